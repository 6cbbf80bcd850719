/* DLPack export and import (zero copy, the deleter called exactly once, bad inputs refused
 * with the producer's tensor untouched), dt_wrap_ex's release callback, and safetensors
 * BORROW tensors that keep their file mapping alive exactly as long as they need it. */
#include <criterion/criterion.h>
#include <dlpack/dlpack.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_helpers.h"
#include "dtensor/checkpoint.h"

#if defined(DLPACK_MAJOR_VERSION)
#define HEADER_VERSION (DLPACK_MAJOR_VERSION * 100 + DLPACK_MINOR_VERSION * 10)
#else
#define HEADER_VERSION DLPACK_VERSION
#endif

static double get(const dt_tensor *t, int64_t i, int64_t j) {
  double v = 0;
  int64_t index[2] = {i, j};
  cr_assert_eq(dt_tensor_get(t, index, &v), DT_OK, "%s", dt_last_error());
  return v;
}

/* A deleter that counts its calls and forwards to the producer's own one. */
static atomic_int deleter_calls;
static void (*original_deleter)(DLManagedTensor *);
static void counting_deleter(DLManagedTensor *self) {
  atomic_fetch_add(&deleter_calls, 1);
  if (original_deleter) original_deleter(self);
}

Test(dlpack, header_version_is_the_installed_one) {
  cr_assert_eq(dt_dlpack_header_version(), HEADER_VERSION);
}

Test(dlpack, round_trip_of_a_transposed_view) {
  dt_tensor *a = NULL, *t = NULL, *b = NULL;
  cr_assert_eq(dt_arange(0, 12, 1, DT_F32, &a), DT_OK);
  dt_tensor *m = NULL;
  cr_assert_eq(dt_reshape(a, 2, (int64_t[]){3, 4}, &m), DT_OK);
  cr_assert_eq(dt_transpose(m, 0, 1, &t), DT_OK); /* 4 x 3, strides {1, 4} */
  DLManagedTensor *managed = NULL;
  cr_assert_eq(dt_dlpack_export(t, &managed), DT_OK, "%s", dt_last_error());
  DLTensor *x = &managed->dl_tensor;
  cr_assert_eq(x->device.device_type, kDLCPU);
  cr_assert_eq(x->dtype.code, kDLFloat);
  cr_assert_eq(x->dtype.bits, 32);
  cr_assert_eq(x->dtype.lanes, 1);
  cr_assert_eq(x->ndim, 2);
  cr_assert(x->shape[0] == 4 && x->shape[1] == 3);
  cr_assert(x->strides[0] == 1 && x->strides[1] == 4, "strides %lld %lld", (long long)x->strides[0],
            (long long)x->strides[1]);
  cr_assert_eq((char *)x->data + x->byte_offset, dt_tensor_data(t));

  deleter_calls = 0;
  original_deleter = managed->deleter;
  managed->deleter = counting_deleter;
  cr_assert_eq(dt_dlpack_import(managed, &b), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_data(b), dt_tensor_data(t), "zero copy: the same data pointer");
  cr_assert(dt_tensor_strides(b)[0] == 1 && dt_tensor_strides(b)[1] == 4);
  /* The producer's handles go first: the export's own reference keeps the data alive. */
  dt_tensor_release(t);
  dt_tensor_release(m);
  dt_tensor_release(a);
  cr_assert_eq(deleter_calls, 0);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) cr_assert_eq(get(b, i, j), (double)(j * 4 + i));
  dt_tensor *view = NULL;
  cr_assert_eq(dt_transpose(b, 0, 1, &view), DT_OK);
  dt_tensor_release(b);
  cr_assert_eq(deleter_calls, 0, "a view of the import still holds the producer's tensor");
  cr_assert_eq(get(view, 2, 3), 11.0);
  dt_tensor_release(view);
  cr_assert_eq(deleter_calls, 1);
}

Test(dlpack, export_of_every_dtype) {
  struct {
    dt_dtype dtype;
    uint8_t code, bits;
  } cases[] = {
    {DT_F32, kDLFloat, 32},
    {DT_F64, kDLFloat, 64},
    {DT_BF16, kDLBfloat, 16},
    {DT_F16, kDLFloat, 16},
    {DT_I64, kDLInt, 64},
    {DT_I32, kDLInt, 32},
    {DT_U8, kDLUInt, 8},
#if HEADER_VERSION >= 80
    {DT_BOOL, kDLBool, 8},
#else
    {DT_BOOL, kDLUInt, 8}, /* no kDLBool before DLPack 0.8: bool travels as uint8 */
#endif
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dt_tensor *t = NULL, *back = NULL;
    cr_assert_eq(dt_zeros(1, (int64_t[]){5}, cases[i].dtype, &t), DT_OK);
    DLManagedTensor *managed = NULL;
    cr_assert_eq(dt_dlpack_export(t, &managed), DT_OK);
    cr_assert_eq(managed->dl_tensor.dtype.code, cases[i].code, "%s", dt_dtype_name(cases[i].dtype));
    cr_assert_eq(managed->dl_tensor.dtype.bits, cases[i].bits, "%s", dt_dtype_name(cases[i].dtype));
    cr_assert_eq(dt_dlpack_import(managed, &back), DT_OK);
    dt_dtype expected = cases[i].dtype;
#if HEADER_VERSION < 80
    if (expected == DT_BOOL) expected = DT_U8;
#endif
    cr_assert_eq(dt_tensor_dtype(back), expected, "%s", dt_dtype_name(cases[i].dtype));
    dt_tensor_release(back);
    dt_tensor_release(t);
  }
}

/* ---- A hand-built producer ---------------------------------------------------------------- */

typedef struct producer {
  double data[8];
  int64_t shape[2];
  int64_t strides[2];
  DLManagedTensor managed;
  int deleted;
} producer;

static void producer_deleter(DLManagedTensor *self) {
  producer *p = self->manager_ctx;
  p->deleted++;
}

/* A 2 x 3 float64 tensor read column-major from data[1..6] (byte_offset 8). */
static void producer_init(producer *p) {
  memset(p, 0, sizeof *p);
  for (int i = 0; i < 8; i++) p->data[i] = 100 + i;
  p->shape[0] = 2;
  p->shape[1] = 3;
  p->strides[0] = 1;
  p->strides[1] = 2;
  p->managed.dl_tensor = (DLTensor){.data = p->data,
                                    .device = {kDLCPU, 0},
                                    .ndim = 2,
                                    .dtype = {kDLFloat, 64, 1},
                                    .shape = p->shape,
                                    .strides = p->strides,
                                    .byte_offset = 8};
  p->managed.manager_ctx = p;
  p->managed.deleter = producer_deleter;
}

Test(dlpack, import_of_a_hand_built_tensor) {
  producer p;
  producer_init(&p);
  dt_tensor *t = NULL;
  cr_assert_eq(dt_dlpack_import(&p.managed, &t), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_data(t), (void *)&p.data[1]);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) cr_assert_eq(get(t, i, j), 101.0 + i + 2 * j);
  /* Zero copy both ways: a write through the tensor is seen by the producer. */
  cr_assert_eq(dt_tensor_set(t, (int64_t[]){1, 2}, -1.0), DT_OK);
  cr_assert_eq(p.data[6], -1.0);
  cr_assert_eq(p.deleted, 0);
  dt_tensor_release(t);
  cr_assert_eq(p.deleted, 1);

  /* Strides NULL means contiguous row-major. */
  producer_init(&p);
  p.managed.dl_tensor.strides = NULL;
  p.managed.dl_tensor.byte_offset = 0;
  cr_assert_eq(dt_dlpack_import(&p.managed, &t), DT_OK, "%s", dt_last_error());
  cr_assert(dt_tensor_strides(t)[0] == 3 && dt_tensor_strides(t)[1] == 1);
  cr_assert_eq(get(t, 1, 0), 103.0);
  dt_tensor_release(t);
  cr_assert_eq(p.deleted, 1);
}

/* Each bad producer is refused with a message naming the function and the field; the deleter
 * is not called, so the caller still owns the tensor. */
static void expect_refused(producer *p, dt_status status, const char *words) {
  dt_tensor *t = (dt_tensor *)0x1;
  dt_status st = dt_dlpack_import(&p->managed, &t);
  cr_assert_eq(st, status, "expected %s, got %s: %s", dt_status_string(status),
               dt_status_string(st), dt_last_error());
  cr_assert_null(t);
  cr_assert(strstr(dt_last_error(), "dt_dlpack_import: ") == dt_last_error(), "%s",
            dt_last_error());
  cr_assert(strstr(dt_last_error(), words), "'%s' lacks '%s'", dt_last_error(), words);
  cr_assert_eq(p->deleted, 0, "the deleter ran on a refused import");
}

Test(dlpack, bad_inputs_are_refused_and_left_to_the_caller) {
  producer p;
  producer_init(&p);
  p.managed.dl_tensor.device.device_type = kDLROCM;
  expect_refused(&p, DT_ERR_UNSUPPORTED, "device type 10");
  /* CUDA memory of a device this process does not have (every build: without CUDA, without
   * a GPU, or with fewer than 100 GPUs): refused naming it, before anything is wrapped. */
  producer_init(&p);
  p.managed.dl_tensor.device = (DLDevice){kDLCUDA, 99};
  expect_refused(&p, DT_ERR_UNSUPPORTED, "cuda:99");
  producer_init(&p);
  p.managed.dl_tensor.device = (DLDevice){kDLCUDA, 99};
  p.managed.dl_tensor.dtype = (DLDataType){kDLComplex, 64, 1};
  expect_refused(&p, DT_ERR_DTYPE, "code 5"); /* the fields are checked before the device */

  producer_init(&p);
  p.managed.dl_tensor.dtype = (DLDataType){kDLComplex, 64, 1};
  expect_refused(&p, DT_ERR_DTYPE, "code 5, bits 64, lanes 1");
  producer_init(&p);
  p.managed.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 4};
  expect_refused(&p, DT_ERR_DTYPE, "lanes 4");

  producer_init(&p);
  p.shape[1] = -3;
  expect_refused(&p, DT_ERR_INVALID, "shape[1] is -3, negative");

  producer_init(&p);
  p.managed.dl_tensor.data = NULL;
  expect_refused(&p, DT_ERR_INVALID, "data is NULL for a non-empty tensor");

  producer_init(&p);
  p.managed.dl_tensor.ndim = 9;
  expect_refused(&p, DT_ERR_INVALID, "ndim 9 is outside [0, 8]");

  producer_init(&p);
  p.strides[1] = -2;
  expect_refused(&p, DT_ERR_INVALID, "strides[1] is -2");

  producer_init(&p);
  p.strides[1] = INT64_MAX / 2;
  expect_refused(&p, DT_ERR_INVALID, "reach element offsets past");

  producer_init(&p);
  p.managed.dl_tensor.byte_offset = 4;
  expect_refused(&p, DT_ERR_INVALID, "byte_offset 4 is not a multiple of the 8-byte");

  cr_assert_eq(dt_dlpack_import(NULL, &(dt_tensor *){NULL}), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_dlpack_import: managed is NULL"), "%s", dt_last_error());
  producer_init(&p);
  cr_assert_eq(dt_dlpack_import(&p.managed, NULL), DT_ERR_INVALID);
  cr_assert_eq(p.deleted, 0);
  cr_assert_eq(dt_dlpack_export(NULL, &(DLManagedTensor *){NULL}), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_dlpack_export: t is NULL"), "%s", dt_last_error());

  /* An empty tensor may have NULL data. */
  producer_init(&p);
  p.shape[0] = 0;
  p.managed.dl_tensor.data = NULL;
  dt_tensor *t = NULL;
  cr_assert_eq(dt_dlpack_import(&p.managed, &t), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_numel(t), 0);
  dt_tensor_release(t);
  cr_assert_eq(p.deleted, 1);
}

Test(dlpack, versioned_matches_the_header) {
#if defined(DLPACK_MAJOR_VERSION)
  dt_tensor *t = NULL, *back = NULL;
  cr_assert_eq(dt_arange(0, 6, 1, DT_I64, &t), DT_OK);
  struct DLManagedTensorVersioned *v = NULL;
  cr_assert_eq(dt_dlpack_export_versioned(t, &v), DT_OK, "%s", dt_last_error());
  cr_assert_eq(v->version.major, DLPACK_MAJOR_VERSION);
  cr_assert_eq(dt_dlpack_import_versioned(v, &back), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_data(back), dt_tensor_data(t));
  dt_tensor_release(back);
  dt_tensor_release(t);
#else
  /* A 0.x header has no DLManagedTensorVersioned: the library says so instead. */
  dt_tensor *t = NULL;
  cr_assert_eq(dt_zeros(1, (int64_t[]){2}, DT_F32, &t), DT_OK);
  struct DLManagedTensorVersioned *v = (struct DLManagedTensorVersioned *)0x1;
  cr_assert_eq(dt_dlpack_export_versioned(t, &v), DT_ERR_UNSUPPORTED);
  cr_assert_null(v);
  cr_assert(strstr(dt_last_error(), "dt_dlpack_export_versioned: libdtensor was built against "
                                    "DLPack header version 60"),
            "%s", dt_last_error());
  dt_tensor *back = NULL;
  cr_assert_eq(dt_dlpack_import_versioned(NULL, &back), DT_ERR_UNSUPPORTED);
  dt_tensor_release(t);
#endif
}

/* ---- A distributed tensor's shard --------------------------------------------------------- */

static dt_status export_shard_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_tensor *full = NULL, *dist = NULL, *back = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"x"}, &mesh));
  RANK_OK(dt_arange(0, 12, 1, DT_F64, &full));
  dt_tensor *full2 = NULL;
  RANK_OK(dt_reshape(full, 2, (int64_t[]){4, 3}, &full2));
  RANK_OK(dt_dist_distribute_tensor(mesh, full2, 1, (dt_placement[]){dt_shard(0)}, &dist));
  DLManagedTensor *managed = NULL;
  RANK_OK(dt_dlpack_export(dist, &managed));
  int r = dt_comm_rank(world);
  DLTensor *x = &managed->dl_tensor;
  RANK_CHECK(x->ndim == 2 && x->shape[0] == 2 && x->shape[1] == 3, "rank %d: local shape", r);
  double *d = (double *)((char *)x->data + x->byte_offset);
  RANK_CHECK(d[0] == 6.0 * r && d[5] == 6.0 * r + 5, "rank %d: values %g %g", r, d[0], d[5]);
  dt_tensor_release(dist);
  RANK_OK(dt_dlpack_import(managed, &back));
  RANK_CHECK(!dt_tensor_is_distributed(back), "an import is a local tensor");
  dt_tensor_release(back);
  dt_tensor_release(full2);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(dlpack, export_of_a_distributed_tensor_is_its_local_shard) {
  SPAWN_OK(2, export_shard_rank, NULL);
}

/* ---- dt_wrap_ex --------------------------------------------------------------------------- */

static void count_release(void *user) { (*(int *)user)++; }

Test(dlpack, wrap_ex_calls_release_once_after_the_last_view) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  int released = 0;
  dt_tensor *t = NULL, *v = NULL;
  cr_assert_eq(dt_wrap_ex(data, sizeof data, 2, (int64_t[]){2, 3}, NULL, DT_F32, count_release,
                          &released, &t),
               DT_OK);
  cr_assert_eq(dt_transpose(t, 0, 1, &v), DT_OK);
  dt_tensor_release(t);
  cr_assert_eq(released, 0);
  dt_tensor_release(v);
  cr_assert_eq(released, 1);
  /* A refused wrap does not call release: the caller keeps the memory. */
  cr_assert_eq(
      dt_wrap_ex(data, 4, 2, (int64_t[]){2, 3}, NULL, DT_F32, count_release, &released, &t),
      DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_wrap_ex: dt_wrap: nbytes 4 is too small"), "%s",
            dt_last_error());
  cr_assert_eq(released, 1);
}

/* ---- safetensors BORROW -------------------------------------------------------------------- */

/* Whether /proc/self/maps lists a mapping of path. */
static bool mapped(const char *path) {
  FILE *f = fopen("/proc/self/maps", "r");
  cr_assert_not_null(f);
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, path) != NULL;
  fclose(f);
  return found;
}

Test(dlpack, borrowed_safetensors_tensor_keeps_its_map_until_released) {
  char path[] = "/tmp/dt_test_dlpack_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  dt_tensor *w = NULL, *b = NULL, *view = NULL;
  cr_assert_eq(dt_arange(0, 6, 1, DT_F32, &w), DT_OK);
  cr_assert_eq(
      dt_safetensors_save(path, 1, (const char *[]){"w"}, (dt_tensor *[]){w}, 0, NULL, NULL), DT_OK,
      "%s", dt_last_error());
  dt_safetensors *f = NULL;
  cr_assert_eq(dt_safetensors_open(path, &f), DT_OK, "%s", dt_last_error());
  cr_assert(mapped(path));
  cr_assert_eq(dt_safetensors_load(f, "w", DT_SAFETENSORS_BORROW, &b), DT_OK);
  cr_assert_eq(dt_reshape(b, 2, (int64_t[]){2, 3}, &view), DT_OK);
  dt_safetensors_destroy(f);
  cr_assert(mapped(path), "the borrowed tensors still use the map");
  dt_tensor_release(b);
  cr_assert(mapped(path), "a view of the borrowed tensor still uses the map");
  cr_assert_eq(get(view, 1, 2), 5.0);
  cr_assert_eq(get(view, 0, 1), 1.0);
  dt_tensor_release(view);
  cr_assert(!mapped(path), "the map outlived its last tensor");

  /* Without borrowed tensors, destroying the handle unmaps at once. */
  cr_assert_eq(dt_safetensors_open(path, &f), DT_OK);
  cr_assert(mapped(path));
  dt_safetensors_destroy(f);
  cr_assert(!mapped(path));
  unlink(path);
  dt_tensor_release(w);
}
