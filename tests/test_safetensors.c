/* safetensors: the reference library's files read back exactly, its malformed files refused
 * with our own messages, round trips of every dtype, byte-identical output, and sharded loads
 * that read only the rank's bytes. The fixtures live outside the project (DT_FIXTURES_DIR);
 * tests that need them skip when the folder is absent. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm_helpers.h"
#include "dtensor/checkpoint.h"
#include "fixture_main.h"

/* The fixtures folder: the DT_FIXTURES_DIR environment variable, else the CMake definition,
 * else ../shared/fixtures beside the source tree this file belongs to. */
static const char *fixtures_dir(void) {
  const char *env = getenv("DT_FIXTURES_DIR");
  if (env && env[0]) return env;
#ifdef DT_FIXTURES_DIR
  return DT_FIXTURES_DIR;
#else
  static char dir[4096];
  const char *file = __FILE__;
  const char *tail = strstr(file, "tests/test_safetensors.c");
  if (!tail) return "../shared/fixtures";
  snprintf(dir, sizeof dir, "%.*s../shared/fixtures", (int)(tail - file), file);
  return dir;
#endif
}

static bool fixture_path(char *buf, size_t size, const char *name) {
  snprintf(buf, size, "%s/safetensors/%s", fixtures_dir(), name);
  if (access(buf, R_OK) != 0) {
    cr_skip_test("fixture %s is absent (set DT_FIXTURES_DIR to the shared fixtures folder)", buf);
    return false;
  }
  return true;
}

static char *read_whole(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *data = malloc((size_t)n + 1);
  cr_assert(fread(data, 1, (size_t)n, f) == (size_t)n);
  data[n] = '\0';
  fclose(f);
  *size = (size_t)n;
  return data;
}

/* The "values" array of tensor `name` in mixed.expected.json. */
static int expected_values(const char *json, const char *name, double *out, int capacity) {
  char key[128];
  snprintf(key, sizeof key, "\"%s\": {", name);
  const char *p = strstr(json, key);
  cr_assert(p, "no %s in expected.json", name);
  p = strstr(p, "\"values\": [");
  cr_assert(p);
  p += strlen("\"values\": [");
  int n = 0;
  for (;;) {
    while (*p == ' ' || *p == '\n' || *p == ',') p++;
    if (*p == ']') break;
    char *end;
    double v = strtod(p, &end);
    cr_assert(end != p && n < capacity);
    out[n++] = v;
    p = end;
  }
  return n;
}

Test(safetensors, mixed_fixture_values) {
  char path[4200], expected_path[4200];
  if (!fixture_path(path, sizeof path, "mixed.safetensors")) return;
  fixture_path(expected_path, sizeof expected_path, "mixed.expected.json");
  size_t size;
  char *json = read_whole(expected_path, &size);
  dt_safetensors *f = NULL;
  cr_assert_eq(dt_safetensors_open(path, &f), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_safetensors_count(f), 10);
  cr_assert_str_eq(dt_safetensors_metadata_find(f, "format"), "pt");
  cr_assert_str_eq(dt_safetensors_metadata_find(f, "note"), "fixture");
  const struct {
    const char *name;
    dt_dtype dtype;
    int ndim;
    int64_t shape[3];
  } cases[] = {
      {"model.layers.0.weight", DT_F32, 2, {4, 3}},
      {"f64", DT_F64, 3, {2, 2, 2}},
      {"bf16", DT_BF16, 1, {5}},
      {"f16", DT_F16, 2, {3, 2}},
      {"i64", DT_I64, 2, {2, 3}},
      {"i32", DT_I32, 1, {7}},
      {"u8", DT_U8, 1, {6}},
      {"bool", DT_BOOL, 1, {3}},
      {"scalar", DT_F32, 0, {0}},
      {"empty", DT_F32, 2, {0, 3}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int mode = 0; mode < 2; mode++) {
      dt_tensor *t = NULL;
      cr_assert_eq(dt_safetensors_load(f, cases[c].name, (dt_safetensors_mode)mode, &t), DT_OK,
                   "%s: %s", cases[c].name, dt_last_error());
      cr_assert_eq(dt_tensor_dtype(t), cases[c].dtype, "%s", cases[c].name);
      cr_assert_eq(dt_tensor_ndim(t), cases[c].ndim, "%s", cases[c].name);
      for (int d = 0; d < cases[c].ndim; d++)
        cr_assert_eq(dt_tensor_size(t, d), cases[c].shape[d], "%s dim %d", cases[c].name, d);
      double want[32], got[32];
      int n = expected_values(json, cases[c].name, want, 32);
      cr_assert_eq(dt_tensor_numel(t), n, "%s", cases[c].name);
      cr_assert_eq(dt_tensor_to_doubles(t, got, 32), DT_OK, "%s", dt_last_error());
      for (int i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s[%d]: %.17g != %.17g", cases[c].name, i, got[i], want[i]);
      dt_tensor_release(t);
    }
  }
  cr_assert_eq(dt_safetensors_find(f, "missing"), -1);
  dt_tensor *t = NULL;
  cr_assert_eq(dt_safetensors_load(f, "missing", DT_SAFETENSORS_COPY, &t), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "no tensor named `missing`"), "%s", dt_last_error());
  dt_safetensors_destroy(f);
  free(json);
}

/* A borrowed tensor outlives its file handle: the map stays while the tensor does. */
Test(safetensors, borrow_outlives_close) {
  char path[4200];
  if (!fixture_path(path, sizeof path, "embedding_1000x64.safetensors")) return;
  dt_safetensors *f = NULL;
  dt_tensor *borrowed = NULL, *copied = NULL;
  cr_assert_eq(dt_safetensors_open(path, &f), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_safetensors_load(f, "tok_embeddings.weight", DT_SAFETENSORS_BORROW, &borrowed),
               DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_safetensors_bytes_read(f), 0, "a borrow reads nothing through pread");
  cr_assert_eq(dt_safetensors_load(f, "tok_embeddings.weight", DT_SAFETENSORS_COPY, &copied),
               DT_OK);
  cr_assert_eq(dt_safetensors_bytes_read(f), 256000);
  dt_safetensors_destroy(f);
  cr_assert_eq(memcmp(dt_tensor_data(borrowed), dt_tensor_data(copied), 256000), 0);
  dt_tensor_release(borrowed);
  dt_tensor_release(copied);
}

/* The MLP's state dict and its input/output: PyTorch's output recomputed from the loaded
 * weights proves the bytes and the shapes are read correctly. */
Test(safetensors, mlp_fixture_gives_pytorch_output) {
  char path[4200], io_path[4200];
  if (!fixture_path(path, sizeof path, "mlp_12_18_6.safetensors")) return;
  fixture_path(io_path, sizeof io_path, "mlp_12_18_6.io.safetensors");
  dt_safetensors *f = NULL, *io = NULL;
  cr_assert_eq(dt_safetensors_open(path, &f), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_safetensors_open(io_path, &io), DT_OK, "%s", dt_last_error());
  dt_tensor *w0, *b0, *w2, *b2, *x, *y;
  cr_assert_eq(dt_safetensors_load(f, "0.weight", DT_SAFETENSORS_COPY, &w0), DT_OK);
  cr_assert_eq(dt_safetensors_load(f, "0.bias", DT_SAFETENSORS_COPY, &b0), DT_OK);
  cr_assert_eq(dt_safetensors_load(f, "2.weight", DT_SAFETENSORS_COPY, &w2), DT_OK);
  cr_assert_eq(dt_safetensors_load(f, "2.bias", DT_SAFETENSORS_COPY, &b2), DT_OK);
  cr_assert_eq(dt_safetensors_load(io, "x", DT_SAFETENSORS_BORROW, &x), DT_OK);
  cr_assert_eq(dt_safetensors_load(io, "y", DT_SAFETENSORS_BORROW, &y), DT_OK);
  const float *W0 = dt_tensor_data(w0), *B0 = dt_tensor_data(b0), *W2 = dt_tensor_data(w2),
              *B2 = dt_tensor_data(b2), *X = dt_tensor_data(x), *Y = dt_tensor_data(y);
  for (int r = 0; r < 10; r++) {
    double h[18];
    for (int j = 0; j < 18; j++) {
      double s = B0[j];
      for (int k = 0; k < 12; k++) s += (double)X[r * 12 + k] * W0[j * 12 + k];
      h[j] = s > 0 ? s : 0;
    }
    for (int o = 0; o < 6; o++) {
      double s = B2[o];
      for (int j = 0; j < 18; j++) s += h[j] * W2[o * 18 + j];
      cr_assert(fabs(s - Y[r * 6 + o]) < 1e-5, "y[%d][%d] = %g, PyTorch %g", r, o, s, Y[r * 6 + o]);
    }
  }
  dt_tensor *all[] = {w0, b0, w2, b2, x, y};
  for (int i = 0; i < 6; i++) dt_tensor_release(all[i]);
  dt_safetensors_destroy(f);
  dt_safetensors_destroy(io);
}

/* Every file the reference library refuses is refused, with a message saying why, both from
 * a file and from memory (under ASan the latter shows no read past the image). */
Test(safetensors, bad_files_refused) {
  static const struct {
    const char *file, *message;
    dt_status status;
  } cases[] = {
      {"bad_header_is_array.safetensors", "header is not a JSON object", DT_ERR_INVALID},
      {"bad_header_len_past_eof.safetensors", "header length 1099511627776 passes the end",
       DT_ERR_INVALID},
      {"bad_header_len_zero.safetensors", "header length is 0", DT_ERR_INVALID},
      {"bad_header_not_json.safetensors", "header is not valid JSON", DT_ERR_INVALID},
      {"bad_negative_dim.safetensors", "tensor `0.bias`: shape holds a negative number",
       DT_ERR_INVALID},
      {"bad_offsets_past_eof.safetensors", "[72, 936] overlap tensor `0.bias` [0, 76]",
       DT_ERR_INVALID},
      {"bad_offsets_reversed.safetensors", "data_offsets [8, 4] end before they begin",
       DT_ERR_INVALID},
      {"bad_overlapping_offsets.safetensors",
       "tensor `0.weight`: data_offsets [0, 72] overlap tensor `0.bias`", DT_ERR_INVALID},
      {"bad_shape_bytes_mismatch.safetensors", "shape [19] of F32 needs 76 bytes", DT_ERR_INVALID},
      {"bad_shape_overflow.safetensors", "overflows", DT_ERR_INVALID},
      {"bad_truncated_data.safetensors", "the file is truncated", DT_ERR_INVALID},
      {"bad_unknown_dtype.safetensors", "tensor `0.bias` has dtype `F31`", DT_ERR_DTYPE},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char path[4200];
    if (!fixture_path(path, sizeof path, cases[c].file)) return;
    dt_safetensors *f = (dt_safetensors *)1;
    cr_assert_eq(dt_safetensors_open(path, &f), cases[c].status, "%s: %s", cases[c].file,
                 dt_last_error());
    cr_assert_null(f);
    cr_assert(strstr(dt_last_error(), cases[c].message), "%s: message '%s' lacks '%s'",
              cases[c].file, dt_last_error(), cases[c].message);
    cr_assert(strstr(dt_last_error(), "dt_safetensors_open"), "%s", dt_last_error());
    size_t size;
    char *image = read_whole(path, &size);
    /* An exact-size copy, so that ASan sees any read past the image. */
    char *exact = malloc(size);
    memcpy(exact, image, size);
    cr_assert_eq(dt_safetensors_open_memory(exact, size, &f), cases[c].status, "%s", cases[c].file);
    cr_assert(strstr(dt_last_error(), cases[c].message), "%s", dt_last_error());
    free(exact);
    free(image);
  }
}

/* Hand-made headers the fixtures do not cover. */
static dt_status open_header(const char *header, size_t data_size) {
  size_t n = strlen(header);
  size_t size = 8 + n + data_size;
  unsigned char *image = calloc(1, size);
  for (int i = 0; i < 8; i++) image[i] = (unsigned char)((uint64_t)n >> (8 * i));
  memcpy(image + 8, header, n);
  dt_safetensors *f = NULL;
  dt_status st = dt_safetensors_open_memory(image, size, &f);
  dt_safetensors_destroy(f);
  free(image);
  return st;
}

Test(safetensors, hand_made_headers) {
  cr_assert_eq(open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                           "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                           8),
               DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "tensor name `a` appears twice"), "%s", dt_last_error());
  cr_assert_eq(open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8),
               DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "gap of 4 bytes"), "%s", dt_last_error());
  cr_assert_eq(open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8),
               DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "not fully covered"), "%s", dt_last_error());
  cr_assert_eq(open_header("{\"a\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
               DT_ERR_DTYPE);
  cr_assert(strstr(dt_last_error(), "tensor `a` has dtype `I8`"), "%s", dt_last_error());
  cr_assert_eq(open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[0,4611686018427387904,4],"
                           "\"data_offsets\":[0,0]}}",
                           0),
               DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "overflows"), "%s", dt_last_error());
  cr_assert_eq(open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2],"
                           "\"extra\":[1,{\"x\":null}]},\"__metadata__\":{\"k\":\"v\\u00e9\"}}",
                           2),
               DT_OK, "%s", dt_last_error());
  cr_assert_eq(open_header("{\"__metadata__\":{\"k\":1}}", 0), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "value of key `k` is not a string"), "%s", dt_last_error());
  cr_assert_eq(open_header("{} trailing", 0), DT_ERR_INVALID);
  cr_assert_eq(open_header("{}", 0), DT_OK, "%s", dt_last_error());
  dt_safetensors *f = NULL;
  cr_assert_eq(dt_safetensors_open_memory("1234567", 7, &f), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "fewer than the 8-byte header length"), "%s", dt_last_error());
  cr_assert_eq(dt_safetensors_open("/nonexistent/x.safetensors", &f), DT_ERR_IO);
  cr_assert(strstr(dt_last_error(), "No such file"), "%s", dt_last_error());
}

/* Every tensor of a file, saved again under the same names, gives the reference's bytes. */
static void check_byte_identical(const char *fixture) {
  char path[4200];
  if (!fixture_path(path, sizeof path, fixture)) return;
  dt_safetensors *f = NULL;
  cr_assert_eq(dt_safetensors_open(path, &f), DT_OK, "%s", dt_last_error());
  int n = dt_safetensors_count(f), m = dt_safetensors_metadata_count(f);
  const char *names[16], *keys[4], *values[4];
  dt_tensor *tensors[16];
  for (int i = 0; i < n; i++) {
    dt_safetensors_entry_info e;
    cr_assert_eq(dt_safetensors_entry(f, i, &e), DT_OK);
    names[i] = e.name;
    cr_assert_eq(dt_safetensors_load(f, e.name, DT_SAFETENSORS_COPY, &tensors[i]), DT_OK);
  }
  for (int i = 0; i < m; i++) dt_safetensors_metadata(f, i, &keys[i], &values[i]);
  char out[] = "/tmp/dt_st_identicalXXXXXX";
  int fd = mkstemp(out);
  close(fd);
  cr_assert_eq(dt_safetensors_save(out, n, names, tensors, m, keys, values), DT_OK, "%s",
               dt_last_error());
  size_t a, b;
  char *want = read_whole(path, &a), *got = read_whole(out, &b);
  cr_assert_eq(a, b, "%s: %zu bytes written, the reference wrote %zu", fixture, b, a);
  cr_assert_eq(memcmp(want, got, a), 0, "%s: bytes differ from the reference's", fixture);
  free(want);
  free(got);
  unlink(out);
  for (int i = 0; i < n; i++) dt_tensor_release(tensors[i]);
  dt_safetensors_destroy(f);
}

Test(safetensors, writer_byte_identical_to_reference) {
  check_byte_identical("mixed.safetensors");
  check_byte_identical("mlp_12_18_6.safetensors");
  check_byte_identical("mlp_12_18_6.io.safetensors");
  check_byte_identical("embedding_1000x64.safetensors");
}

/* Every dtype, a 0-d and an empty tensor, a non-contiguous input and metadata with
 * characters JSON must escape: written, read back equal. */
Test(safetensors, round_trip_every_dtype) {
  const char *names[N_DTYPES + 3];
  dt_tensor *tensors[N_DTYPES + 3];
  char name_buf[N_DTYPES][32];
  for (int i = 0; i < N_DTYPES; i++) {
    snprintf(name_buf[i], sizeof name_buf[i], "t.%s", dt_dtype_name(all_dtypes[i]));
    names[i] = name_buf[i];
    tensors[i] = test_tensor(2, (int64_t[]){3, 5}, all_dtypes[i], DT_REDUCE_SUM, i);
  }
  cr_assert_eq(dt_full(0, NULL, 2.5, DT_F64, &tensors[N_DTYPES]), DT_OK);
  names[N_DTYPES] = "scalar";
  cr_assert_eq(dt_zeros(3, (int64_t[]){2, 0, 4}, DT_BF16, &tensors[N_DTYPES + 1]), DT_OK);
  names[N_DTYPES + 1] = "empty \"quoted\"\n";
  dt_tensor *base = test_tensor(2, (int64_t[]){4, 6}, DT_I32, DT_REDUCE_SUM, 9);
  cr_assert_eq(dt_transpose(base, 0, 1, &tensors[N_DTYPES + 2]), DT_OK);
  names[N_DTYPES + 2] = "transposed";
  int count = N_DTYPES + 3;
  const char *keys[] = {"z", "a\\b", "format"}, *values[] = {"last", "tab\there", "pt"};
  char out[] = "/tmp/dt_st_roundXXXXXX";
  close(mkstemp(out));
  cr_assert_eq(dt_safetensors_save(out, count, names, tensors, 3, keys, values), DT_OK, "%s",
               dt_last_error());
  dt_safetensors *f = NULL;
  cr_assert_eq(dt_safetensors_open(out, &f), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_safetensors_count(f), count);
  cr_assert_str_eq(dt_safetensors_metadata_find(f, "a\\b"), "tab\there");
  cr_assert_str_eq(dt_safetensors_metadata_find(f, "z"), "last");
  for (int i = 0; i < count; i++) {
    dt_tensor *t = NULL;
    cr_assert_eq(dt_safetensors_load(f, names[i], DT_SAFETENSORS_COPY, &t), DT_OK, "%s: %s",
                 names[i], dt_last_error());
    cr_assert_eq(dt_tensor_dtype(t), dt_tensor_dtype(tensors[i]));
    cr_assert_eq(dt_tensor_ndim(t), dt_tensor_ndim(tensors[i]));
    int64_t n = dt_tensor_numel(t);
    cr_assert_eq(n, dt_tensor_numel(tensors[i]));
    double *a = calloc((size_t)n + 1, sizeof *a), *b = calloc((size_t)n + 1, sizeof *b);
    cr_assert_eq(dt_tensor_to_doubles(t, a, n), DT_OK);
    cr_assert_eq(dt_tensor_to_doubles(tensors[i], b, n), DT_OK);
    for (int64_t j = 0; j < n; j++) cr_assert_eq(a[j], b[j], "%s[%ld]", names[i], (long)j);
    free(a);
    free(b);
    dt_tensor_release(t);
  }
  dt_safetensors_destroy(f);
  /* A new file's mode is 0666 minus the umask (read from /proc, never set). */
  unlink(out);
  cr_assert_eq(dt_safetensors_save(out, 1, names, tensors, 0, NULL, NULL), DT_OK);
  unsigned mask = 022;
  FILE *status = fopen("/proc/self/status", "r");
  char line[256];
  while (status && fgets(line, sizeof line, status)) {
    if (sscanf(line, "Umask: %o", &mask) == 1) break;
  }
  if (status) fclose(status);
  struct stat sb;
  cr_assert_eq(stat(out, &sb), 0);
  cr_assert_eq(sb.st_mode & 0777, 0666 & ~mask, "mode %o, umask %o", sb.st_mode & 0777, mask);
  unlink(out);
  for (int i = 0; i < count; i++) dt_tensor_release(tensors[i]);
  dt_tensor_release(base);
}

Test(safetensors, save_refuses_bad_arguments) {
  dt_tensor *t = NULL;
  cr_assert_eq(dt_ones(1, (int64_t[]){2}, DT_F32, &t), DT_OK);
  const char *dup[] = {"w", "w"}, *reserved[] = {"__metadata__"};
  dt_tensor *two[] = {t, t};
  cr_assert_eq(dt_safetensors_save("/tmp/dt_st_never", 2, dup, two, 0, NULL, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "tensor name `w` appears twice"), "%s", dt_last_error());
  cr_assert_eq(dt_safetensors_save("/tmp/dt_st_never", 1, reserved, two, 0, NULL, NULL),
               DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "reserves"), "%s", dt_last_error());
  cr_assert_eq(dt_safetensors_save("/nonexistent/dir/x", 1, dup, two, 0, NULL, NULL), DT_ERR_IO);
  cr_assert(strstr(dt_last_error(), "/nonexistent/dir/x"), "%s", dt_last_error());
  cr_assert_eq(dt_safetensors_save(NULL, 1, dup, two, 0, NULL, NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_safetensors_save("/tmp/dt_st_never", 1, NULL, two, 0, NULL, NULL),
               DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "names is NULL"), "%s", dt_last_error());
  cr_assert_eq(access("/tmp/dt_st_never", F_OK), -1, "a refused save wrote a file");
  dt_tensor_release(t);
}

/* ---- Sharded loading --------------------------------------------------------------------- */

typedef struct shard_case {
  const char *path;
  int mesh_ndim;
  int mesh_shape[2];
  dt_placement placements[2];
  uint64_t expected_bytes; /* per rank */
} shard_case;

static dt_status load_shard_rank(dt_comm *world, void *arg) {
  const shard_case *c = arg;
  dt_mesh *mesh = NULL;
  dt_safetensors *f = NULL;
  dt_tensor *dist = NULL, *full = NULL, *local = NULL;
  RANK_OK(dt_mesh_create(world, c->mesh_ndim, c->mesh_shape, (const char *[]){"a", "b"}, &mesh));
  RANK_OK(dt_safetensors_open(c->path, &f));
  RANK_OK(dt_safetensors_load_distributed(f, "tok_embeddings.weight", mesh, c->mesh_ndim,
                                          c->placements, &dist));
  uint64_t read = dt_safetensors_bytes_read(f);
  RANK_CHECK(read == c->expected_bytes, "rank %d read %llu bytes, expected %llu",
             dt_comm_rank(world), (unsigned long long)read, (unsigned long long)c->expected_bytes);
  const int64_t *global = dt_dist_global_shape(dist);
  RANK_CHECK(global[0] == 1000 && global[1] == 64, "global shape");
  /* The gathered tensor equals the whole file's tensor: every rank's block is right. */
  RANK_OK(dt_dist_full_tensor(dist, &full));
  RANK_OK(dt_safetensors_load(f, "tok_embeddings.weight", DT_SAFETENSORS_BORROW, &local));
  RANK_CHECK(memcmp(dt_tensor_data(full), dt_tensor_data(local), 256000) == 0,
             "rank %d: gathered values differ from the file", dt_comm_rank(world));
  dt_tensor_release(local);
  dt_tensor_release(full);
  dt_tensor_release(dist);
  dt_safetensors_destroy(f);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(safetensors, sharded_load_reads_only_the_shard) {
  char path[4200];
  if (!fixture_path(path, sizeof path, "embedding_1000x64.safetensors")) return;
  /* 1000 rows over 4 ranks: 250 rows of 256 bytes each, one contiguous range. */
  shard_case rows = {path, 1, {4, 1}, {dt_shard(0)}, 250 * 256};
  SPAWN_OK(4, load_shard_rank, &rows);
  /* 64 columns over 4 ranks: 1000 strided runs of 16 floats. */
  shard_case cols = {path, 1, {4, 1}, {dt_shard(1)}, 1000 * 16 * 4};
  SPAWN_OK(4, load_shard_rank, &cols);
  /* A 2x2 mesh: rows over one dim, columns over the other. */
  shard_case grid = {path, 2, {2, 2}, {dt_shard(0), dt_shard(1)}, 500 * 32 * 4};
  SPAWN_OK(4, load_shard_rank, &grid);
  /* Uneven: 1000 rows over 3 ranks (334, 334, 332) is checked through the gathered values;
   * Replicate reads everything. */
  shard_case replicate = {path, 1, {2, 1}, {dt_replicate()}, 256000};
  SPAWN_OK(2, load_shard_rank, &replicate);
}

static dt_status load_uneven_rank(dt_comm *world, void *arg) {
  const char *path = arg;
  dt_mesh *mesh = NULL;
  dt_safetensors *f = NULL;
  dt_tensor *dist = NULL, *full = NULL, *local = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){3}, (const char *[]){"tp"}, &mesh));
  RANK_OK(dt_safetensors_open(path, &f));
  RANK_OK(dt_safetensors_load_distributed(f, "tok_embeddings.weight", mesh, 1,
                                          (dt_placement[]){dt_shard(0)}, &dist));
  int r = dt_comm_rank(world);
  uint64_t rows = r < 2 ? 334 : 332;
  RANK_CHECK(dt_safetensors_bytes_read(f) == rows * 256, "rank %d read %llu", r,
             (unsigned long long)dt_safetensors_bytes_read(f));
  RANK_OK(dt_dist_full_tensor(dist, &full));
  RANK_OK(dt_safetensors_load(f, "tok_embeddings.weight", DT_SAFETENSORS_COPY, &local));
  RANK_CHECK(memcmp(dt_tensor_data(full), dt_tensor_data(local), 256000) == 0, "values");
  dt_tensor_release(local);
  dt_tensor_release(full);
  dt_tensor_release(dist);
  dt_safetensors_destroy(f);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(safetensors, sharded_load_uneven) {
  char path[4200];
  if (!fixture_path(path, sizeof path, "embedding_1000x64.safetensors")) return;
  SPAWN_OK(3, load_uneven_rank, path);
}
