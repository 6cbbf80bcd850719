/* A distributed checkpoint whose metadata.json was altered never loads wrong data (issue 35,
 * item 4). FSDP ranks write files of one layout, so a flipped digit in a block's "file" used
 * to read another rank's bytes without error, and two blocks' offsets swapped went unseen.
 * Now the metadata carries its own CRC32C (every single-digit change is refused by it), and
 * each data file records which block of which tensor it holds: with the checksum recomputed
 * after the edit (as a tool that rewrites the metadata would), every change of a block's
 * "file" or "offsets" digit and every swap is still refused, the message naming the
 * metadata's claim and the file's. A refused load leaves every target as it was. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_helpers.h"
#include "comm_helpers.h"

#define RANKS 4
#define ROWS 8
#define COLS 5
#define N_TENSORS 3
#define SENTINEL -7.25f

/* a and b: [8, 5] Shard(0) on 4 ranks (one layout: the case that loaded wrong data); c: a
 * local [3], written by rank 0. */
static const char *const names[N_TENSORS] = {"a", "b", "c"};
static const int64_t shapes[N_TENSORS][2] = {{ROWS, COLS}, {ROWS, COLS}, {3, 1}};
static const int ndims[N_TENSORS] = {2, 2, 1};

static float value_at(int tensor, int64_t i) { return (float)(tensor * 1000 + i) + 0.5f; }

static int64_t numel_of(int i) { return ndims[i] == 2 ? shapes[i][0] * shapes[i][1] : 3; }

static dt_status save_rank(dt_comm *world, void *arg) {
  const char *dir = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  dt_tensor *tensors[N_TENSORS] = {0};
  for (int i = 0; i < N_TENSORS; i++) {
    dt_tensor *full = NULL;
    RANK_OK(dt_empty(ndims[i], shapes[i], DT_F32, &full));
    for (int64_t k = 0; k < numel_of(i); k++) ((float *)dt_tensor_data(full))[k] = value_at(i, k);
    if (i < 2) {
      RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, &tensors[i]));
      dt_tensor_release(full);
    } else {
      tensors[i] = full;
    }
  }
  RANK_OK(dt_checkpoint_save(dir, mesh, N_TENSORS, names, tensors));
  for (int i = 0; i < N_TENSORS; i++) dt_tensor_release(tensors[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

/* Loads every tensor whole into targets filled with SENTINEL. Returns the status; *intact
 * tells whether every target still holds only SENTINEL, *exact whether every target holds
 * the saved values bit for bit. */
static dt_status load_all(const char *dir, bool *intact, bool *exact) {
  dt_tensor *targets[N_TENSORS];
  for (int i = 0; i < N_TENSORS; i++)
    cr_assert_eq(dt_full(ndims[i], shapes[i], SENTINEL, DT_F32, &targets[i]), DT_OK);
  dt_status st = dt_checkpoint_load(dir, N_TENSORS, names, targets);
  *intact = *exact = true;
  for (int i = 0; i < N_TENSORS; i++) {
    const float *v = dt_tensor_data(targets[i]);
    for (int64_t k = 0; k < numel_of(i); k++) {
      float want = value_at(i, k);
      *intact = *intact && memcmp(&v[k], &(float){SENTINEL}, sizeof(float)) == 0;
      *exact = *exact && memcmp(&v[k], &want, sizeof(float)) == 0;
    }
    dt_tensor_release(targets[i]);
  }
  return st;
}

/* The load of the edited checkpoint is refused with DT_ERR_INVALID, a message of
 * dt_checkpoint_load holding every phrase, and no target changed. */
static void expect_refused(const char *dir, const char *what, const char *const *phrases) {
  bool intact = false, exact = false;
  dt_status st = load_all(dir, &intact, &exact);
  cr_assert_eq(st, DT_ERR_INVALID, "%s: loaded (%s)", what, dt_status_string(st));
  cr_assert(intact, "%s: a refused load changed a target", what);
  const char *m = dt_last_error();
  cr_assert(strncmp(m, "dt_checkpoint_load: ", 20) == 0, "%s: %s", what, m);
  for (int i = 0; phrases && phrases[i]; i++)
    cr_assert(strstr(m, phrases[i]) != NULL, "%s: `%s` in: %s", what, phrases[i], m);
}

typedef struct checkpoint {
  char dir[64], path[128];
  char *text; /* metadata.json as saved */
  size_t length;
} checkpoint;

static void save_checkpoint(checkpoint *c) {
  snprintf(c->dir, sizeof c->dir, "/tmp/dt_ckpt_edits_XXXXXX");
  cr_assert(mkdtemp(c->dir) != NULL);
  SPAWN_OK(RANKS, save_rank, c->dir);
  snprintf(c->path, sizeof c->path, "%s/metadata.json", c->dir);
  c->text = ckpt_read_text(c->path, &c->length);
  cr_assert(c->text != NULL);
  bool intact = false, exact = false;
  cr_assert_eq(load_all(c->dir, &intact, &exact), DT_OK, "%s", dt_last_error());
  cr_assert(exact, "the unaltered checkpoint does not load bit for bit");
}

static void remove_checkpoint(checkpoint *c) {
  char path[160];
  for (int r = 0; r < RANKS; r++) {
    snprintf(path, sizeof path, "%s/__1_%d.safetensors", c->dir, r);
    unlink(path);
  }
  unlink(c->path);
  cr_assert_eq(rmdir(c->dir), 0, "%s is not empty", c->dir);
  free(c->text);
}

/* Writes `edited` (length n) as the metadata, re-signed when asked. */
static void put_metadata(checkpoint *c, const char *edited, size_t n, bool resign) {
  char *copy = malloc(n + 16);
  cr_assert(copy != NULL);
  memcpy(copy, edited, n);
  copy[n] = '\0';
  long length = resign ? ckpt_resign_text(copy, n) : (long)n;
  cr_assert(length > 0);
  cr_assert_eq(ckpt_write_text(c->path, copy, (size_t)length), 0);
  free(copy);
}

static void restore(checkpoint *c) {
  cr_assert_eq(ckpt_write_text(c->path, c->text, c->length), 0);
}

/* Every digit of the text, changed to each of the 9 others, is refused by the checksum. */
Test(checkpoint_metadata_edits, every_single_digit_change_fails_the_checksum) {
  checkpoint c;
  save_checkpoint(&c);
  char *edited = malloc(c.length + 1);
  cr_assert(edited != NULL);
  int digits = 0;
  size_t key = (size_t)(strstr(c.text, "\"metadata_crc32c\"") - c.text);
  for (size_t at = 0; at < c.length; at++) {
    if (c.text[at] < '0' || c.text[at] > '9') continue;
    digits++;
    for (char d = '0'; d <= '9'; d++) {
      if (d == c.text[at]) continue;
      memcpy(edited, c.text, c.length);
      edited[at] = d;
      put_metadata(&c, edited, c.length, false);
      char what[64];
      snprintf(what, sizeof what, "byte %zu '%c' -> '%c'", at, c.text[at], d);
      /* The digits of the key "metadata_crc32c" itself: then the checksum is missing. */
      if (at >= key && at < key + strlen("\"metadata_crc32c\""))
        expect_refused(c.dir, what, (const char *[]){"must end with its checksum", NULL});
      else
        expect_refused(c.dir, what,
                       (const char *[]){"metadata.json: the metadata fails its checksum",
                                        "it was changed after the save", NULL});
    }
  }
  cr_assert_gt(digits, 100, "only %d digits in the metadata", digits);
  free(edited);
  restore(&c);
  remove_checkpoint(&c);
}

/* The positions of the digits of every `field` value in text: up to the ',' after "file"'s
 * number, up to the ']' of an "offsets" list. */
static int field_digits(const char *text, const char *field, size_t *at, int most) {
  int n = 0;
  char end = field[strlen(field) - 1] == '[' ? ']' : ',';
  for (const char *p = strstr(text, field); p; p = strstr(p + 1, field))
    for (const char *q = p + strlen(field); *q && *q != end; q++)
      if (*q >= '0' && *q <= '9' && n < most) at[n++] = (size_t)(q - text);
  return n;
}

/* With the checksum recomputed, every other value of a block's "file" or of an "offsets"
 * digit is refused: by the file's record of its blocks, the tiling or the file count. */
Test(checkpoint_metadata_edits, resigned_file_and_offset_changes_are_refused) {
  checkpoint c;
  save_checkpoint(&c);
  char *edited = malloc(c.length + 1);
  cr_assert(edited != NULL);
  const char *fields[] = {"\"file\":", "\"offsets\":["};
  int by_record = 0;
  for (int f = 0; f < 2; f++) {
    size_t at[256];
    int n = field_digits(c.text, fields[f], at, 256);
    /* 9 blocks (4 + 4 + 1); offsets of 2 numbers each. */
    cr_assert_eq(n, f == 0 ? 9 : 17, "%s: %d digits", fields[f], n);
    for (int i = 0; i < n; i++) {
      for (char d = '0'; d <= '9'; d++) {
        if (d == c.text[at[i]]) continue;
        memcpy(edited, c.text, c.length);
        edited[at[i]] = d;
        put_metadata(&c, edited, c.length, true);
        char what[96];
        snprintf(what, sizeof what, "%s digit at byte %zu '%c' -> '%c' (re-signed)", fields[f],
                 at[i], c.text[at[i]], d);
        expect_refused(c.dir, what, NULL);
        if (strstr(dt_last_error(), "that file holds the block of")) by_record++;
      }
    }
  }
  /* Files 1 to 3 share one layout (file 0 also holds c, so its byte ranges differ): each of
   * a's and b's blocks 1 to 3 pointed at the 2 other files of its layout is caught only by
   * the files' records. These 12 are the edits the old loader read wrong data for. */
  cr_assert_eq(by_record, 2 * 3 * 2, "%d refusals by the block records", by_record);
  free(edited);
  restore(&c);
  remove_checkpoint(&c);
}

/* Replaces the first occurrence of `from` in text by `to` (same length). */
static void replace_in(char *text, const char *from, const char *to) {
  char *p = strstr(text, from);
  cr_assert(p && strlen(from) == strlen(to), "`%s` not in the metadata", from);
  memcpy(p, to, strlen(to));
}

/* a's blocks 0 and 2 (rows 0-1 in file 0, rows 4-5 in file 2) trade offsets: the blocks
 * still tile the tensor and every byte range is right. The first occurrences are a's. */
static void swap_offsets(char *text) {
  replace_in(text, "{\"file\":0,\"offsets\":[0,0]", "{\"file\":0,\"offsets\":[4,0]");
  replace_in(text, "{\"file\":2,\"offsets\":[4,0]", "{\"file\":2,\"offsets\":[0,0]");
}

Test(checkpoint_metadata_edits, swapped_offsets_or_files_are_refused_naming_both) {
  checkpoint c;
  save_checkpoint(&c);
  char *edited = malloc(c.length + 1);
  cr_assert(edited != NULL);
  memcpy(edited, c.text, c.length + 1);
  swap_offsets(edited);
  put_metadata(&c, edited, c.length, false);
  expect_refused(c.dir, "swapped offsets, not re-signed",
                 (const char *[]){"the metadata fails its checksum", NULL});
  put_metadata(&c, edited, c.length, true);
  expect_refused(
      c.dir, "swapped offsets",
      (const char *[]){"the metadata says block 0 of tensor `a` (offsets [4, 0], lengths [2, 5]) "
                       "is in __1_0.safetensors (file 0); that file holds the block of `a` at "
                       "offsets [0, 0], lengths [2, 5]",
                       NULL});
  /* a's blocks 1 and 3 trade files (1 and 3: the same layout, so the byte ranges agree). */
  memcpy(edited, c.text, c.length + 1);
  replace_in(edited, "{\"file\":1,\"offsets\":[2,0]", "{\"file\":3,\"offsets\":[2,0]");
  replace_in(edited, "{\"file\":3,\"offsets\":[6,0]", "{\"file\":1,\"offsets\":[6,0]");
  put_metadata(&c, edited, c.length, true);
  expect_refused(
      c.dir, "swapped files",
      (const char *[]){"the metadata says block 1 of tensor `a` (offsets [2, 0], lengths [2, 5]) "
                       "is in __1_3.safetensors (file 3); that file holds the block of `a` at "
                       "offsets [6, 0], lengths [2, 5]",
                       NULL});
  free(edited);
  restore(&c);
  bool intact = false, exact = false;
  cr_assert_eq(load_all(c.dir, &intact, &exact), DT_OK, "%s", dt_last_error());
  cr_assert(exact);
  remove_checkpoint(&c);
}

/* Old checkpoints: version 2 metadata (no checksum) is read, explicitly, as before; its data
 * files' block records are still compared when they carry them. Version 3 without its
 * checksum, a checksum not at the end, or trailing bytes are refused. */
Test(checkpoint_metadata_edits, versions_without_the_checksum) {
  checkpoint c;
  save_checkpoint(&c);
  char *v2 = malloc(c.length + 1);
  cr_assert(v2 != NULL);
  memcpy(v2, c.text, c.length + 1);
  char *version = strstr(v2, "\"version\":3");
  cr_assert(version != NULL);
  version[10] = '2';
  char *sum = strstr(v2, ",\n\"metadata_crc32c\":");
  cr_assert(sum != NULL);
  size_t n = (size_t)(sum - v2);
  memcpy(v2 + n, "}\n", 2);
  n += 2;
  put_metadata(&c, v2, n, false);
  bool intact = false, exact = false;
  cr_assert_eq(load_all(c.dir, &intact, &exact), DT_OK, "%s", dt_last_error());
  cr_assert(exact, "version 2 metadata does not load bit for bit");
  /* Its swapped offsets are refused by the files' records. */
  swap_offsets(v2);
  put_metadata(&c, v2, n, false);
  expect_refused(c.dir, "version 2, swapped offsets",
                 (const char *[]){"that file holds the block of `a` at offsets [0, 0]", NULL});
  /* Version 3 without its checksum. */
  version[10] = '3';
  put_metadata(&c, v2, n, false);
  expect_refused(c.dir, "version 3 without a checksum",
                 (const char *[]){"must end with its checksum \"metadata_crc32c\"", NULL});
  /* A checksum member that is not the last, and bytes after the object. */
  char *text = malloc(c.length + 64);
  cr_assert(text != NULL);
  memcpy(text, c.text, c.length);
  memcpy(text + c.length, "x", 1);
  put_metadata(&c, text, c.length + 1, false);
  expect_refused(c.dir, "a byte after the metadata", NULL);
  int k =
      snprintf(text, c.length + 64, "%.*s\"metadata_crc32c\":1,", (int)(version - v2 + 12), c.text);
  memcpy(text + k, c.text + (version - v2 + 12), c.length - (size_t)(version - v2 + 12));
  put_metadata(&c, text, (size_t)k + c.length - (size_t)(version - v2 + 12), true);
  expect_refused(c.dir, "a second checksum member",
                 (const char *[]){"\"metadata_crc32c\" must be the last member", NULL});
  free(text);
  free(v2);
  restore(&c);
  remove_checkpoint(&c);
}
