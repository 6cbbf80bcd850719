/* Distributed checkpoints that were damaged after the save (issue 22, items 14 and 15): every
 * damage the fault injection found loading wrong values silently is refused with a message
 * naming the file and the tensor: swapped shard files, a shard from another generation, a
 * flipped digit in an offset, a flipped data byte; and the metadata parser's limits (int64
 * overflow, duplicate keys, gaps, overlaps, FIFOs). CRC32C is checked against RFC 3720's
 * values and a bit-by-bit loop. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Private header: CRC32C is exact (dt__crc32c) and the metadata parser refuses what it must
 * (dt__ckpt_meta_parse, fed hand-made text). */
#include "checkpoint/checkpoint_meta.h"
#include "checkpoint_helpers.h"
#include "comm_helpers.h"
#include "fs_helpers.h"

/* ---- CRC32C ------------------------------------------------------------------------------- */

static uint32_t crc32c_bitwise(const unsigned char *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

Test(checkpoint_integrity, crc32c_matches_rfc3720_and_a_bitwise_loop) {
  cr_assert_eq(dt__crc32c(0, "123456789", 9), 0xE3069283u);
  unsigned char buf[300];
  memset(buf, 0, 32);
  cr_assert_eq(dt__crc32c(0, buf, 32), 0x8A9136AAu);
  memset(buf, 0xff, 32);
  cr_assert_eq(dt__crc32c(0, buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
  cr_assert_eq(dt__crc32c(0, buf, 32), 0x46DD794Eu);
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < sizeof buf; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    buf[i] = (unsigned char)x;
  }
  /* Every length and start (the 8-byte steps meet every alignment and tail), and chaining. */
  for (size_t start = 0; start < 9; start++)
    for (size_t n = 0; n + start <= sizeof buf; n += 7) {
      uint32_t want = crc32c_bitwise(buf + start, n);
      cr_assert_eq(dt__crc32c(0, buf + start, n), want, "start %zu, %zu bytes", start, n);
      size_t half = n / 3;
      cr_assert_eq(dt__crc32c(dt__crc32c(0, buf + start, half), buf + start + half, n - half), want,
                   "chained at %zu of %zu", half, n);
    }
}

/* ---- Damaged checkpoints ------------------------------------------------------------------ */

#define ROWS 8
#define COLS 5

static float value_at(int generation, int64_t i) { return (float)(generation * 1000 + i) + 0.5f; }

typedef struct save_case {
  const char *dir;
  int generation;
} save_case;

static dt_status save_rank(dt_comm *world, void *arg) {
  save_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  dt_tensor *full = NULL, *d = NULL;
  RANK_OK(dt_empty(2, (int64_t[]){ROWS, COLS}, DT_F32, &full));
  for (int64_t i = 0; i < ROWS * COLS; i++)
    ((float *)dt_tensor_data(full))[i] = value_at(c->generation, i);
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, &d));
  RANK_OK(dt_checkpoint_save(c->dir, mesh, 1, (const char *[]){"w"}, (dt_tensor *[]){d}));
  dt_tensor_release(d);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void save(const char *dir, int world, int generation) {
  save_case c = {dir, generation};
  SPAWN_OK(world, save_rank, &c);
}

/* Loads "w" whole; returns the status and leaves the values in out (ROWS * COLS floats). */
static dt_status load(const char *dir, bool skip_checksum, float *out) {
  dt_tensor *t = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){ROWS, COLS}, DT_F32, &t), DT_OK);
  dt_checkpoint_load_options o = {.skip_data_checksum = skip_checksum};
  dt_status st = dt_checkpoint_load_ex(dir, 1, (const char *[]){"w"}, &t, &o);
  memcpy(out, dt_tensor_data(t), sizeof(float) * ROWS * COLS);
  dt_tensor_release(t);
  return st;
}

static void expect_refused(const char *dir, const char *const *phrases) {
  float v[ROWS * COLS];
  cr_assert_eq(load(dir, false, v), DT_ERR_INVALID, "a damaged checkpoint loaded");
  const char *m = dt_last_error();
  cr_assert(strncmp(m, "dt_checkpoint_load: ", 20) == 0, "%s", m);
  for (int i = 0; phrases[i]; i++)
    cr_assert(strstr(m, phrases[i]) != NULL, "`%s` in: %s", phrases[i], m);
}

static void temp_dir(char *buf, size_t size) {
  snprintf(buf, size, "/tmp/dt_ckpt_integrity_XXXXXX");
  cr_assert(mkdtemp(buf) != NULL);
}

static void remove_dir(const char *dir) {
  cr_assert_eq(fs_remove_tree(dir), 0, "removing %s: %s", dir, strerror(errno));
}

/* dir/from renamed to dir/to. */
static void move(const char *dir, const char *from, const char *to) {
  char a[256], b[256];
  snprintf(a, sizeof a, "%s/%s", dir, from);
  snprintf(b, sizeof b, "%s/%s", dir, to);
  cr_assert_eq(rename(a, b), 0, "renaming %s to %s: %s", a, b, strerror(errno));
}

Test(checkpoint_integrity, intact_checkpoint_loads_and_counts_the_checksum_reads) {
  char dir[64];
  temp_dir(dir, sizeof dir);
  save(dir, 2, 1);
  float v[ROWS * COLS];
  uint64_t before = dt_checkpoint_bytes_read();
  cr_assert_eq(load(dir, false, v), DT_OK, "%s", dt_last_error());
  uint64_t verified = dt_checkpoint_bytes_read() - before;
  for (int64_t i = 0; i < ROWS * COLS; i++) cr_assert_eq(v[i], value_at(1, i));
  before = dt_checkpoint_bytes_read();
  cr_assert_eq(load(dir, true, v), DT_OK, "%s", dt_last_error());
  uint64_t skipped = dt_checkpoint_bytes_read() - before;
  for (int64_t i = 0; i < ROWS * COLS; i++) cr_assert_eq(v[i], value_at(1, i));
  /* Skipped: the tensor's bytes only. Verified: plus both files whole. */
  struct stat a, b;
  char p0[128], p1[128];
  snprintf(p0, sizeof p0, "%s/__1_0.safetensors", dir);
  snprintf(p1, sizeof p1, "%s/__1_1.safetensors", dir);
  cr_assert_eq(stat(p0, &a), 0);
  cr_assert_eq(stat(p1, &b), 0);
  cr_assert_eq(skipped, (uint64_t)ROWS * COLS * 4);
  cr_assert_eq(verified, skipped + (uint64_t)a.st_size + (uint64_t)b.st_size);
  remove_dir(dir);
}

Test(checkpoint_integrity, swapped_shard_files_are_refused) {
  char dir[64];
  temp_dir(dir, sizeof dir);
  save(dir, 2, 1);
  /* Both files hold 4 rows: the sizes match, the identities do not. */
  move(dir, "__1_0.safetensors", "x");
  move(dir, "__1_1.safetensors", "__1_0.safetensors");
  move(dir, "x", "__1_1.safetensors");
  expect_refused(dir, (const char *[]){"__1_0.safetensors (read for tensor `w`)",
                                       "is rank 1's file of generation 1",
                                       "lists it as rank 0's file", NULL});
  remove_dir(dir);
}

Test(checkpoint_integrity, shard_of_another_generation_is_refused) {
  char dir[64];
  temp_dir(dir, sizeof dir);
  save(dir, 2, 1);
  char shard[128], old[128];
  snprintf(shard, sizeof shard, "%s/__1_1.safetensors", dir);
  snprintf(old, sizeof old, "%s.old", dir);
  cr_assert_eq(fs_copy_file(shard, old), 0, "copying %s to %s", shard, old);
  save(dir, 2, 2);
  snprintf(shard, sizeof shard, "%s/__2_1.safetensors", dir);
  cr_assert_eq(fs_copy_file(old, shard), 0, "copying %s to %s", old, shard);
  cr_assert_eq(unlink(old), 0, "removing %s: %s", old, strerror(errno));
  expect_refused(dir, (const char *[]){"__2_1.safetensors (read for tensor `w`)",
                                       "is rank 1's file of generation 1", "file of generation 2",
                                       NULL});
  remove_dir(dir);
}

Test(checkpoint_integrity, flipped_offset_digit_is_refused) {
  char dir[64];
  temp_dir(dir, sizeof dir);
  save(dir, 2, 1);
  /* Rank 1's block starts at row 4; a flipped digit makes it 3: it overlaps rank 0's and
   * leaves row 7 uncovered, though the element counts still add up. */
  char meta[128];
  snprintf(meta, sizeof meta, "%s/metadata.json", dir);
  cr_assert_gt(fs_replace_in_file(meta, "\"offsets\":[4,0]", "\"offsets\":[3,0]"), 0, "%s", meta);
  /* The metadata's own checksum refuses the edit first; re-signed, the tiling check does. */
  expect_refused(dir, (const char *[]){"metadata.json: the metadata fails its checksum", NULL});
  cr_assert_eq(ckpt_resign(dir), 0);
  expect_refused(dir, (const char *[]){"metadata.json: tensor `w`",
                                       "blocks 0 (offsets [0, 0], lengths [4, 5]) and 1 (offsets "
                                       "[3, 0], lengths [4, 5]) overlap",
                                       NULL});
  remove_dir(dir);
}

Test(checkpoint_integrity, flipped_data_byte_is_refused_unless_skipped) {
  char dir[64], path[128];
  temp_dir(dir, sizeof dir);
  save(dir, 2, 1);
  snprintf(path, sizeof path, "%s/__1_1.safetensors", dir);
  struct stat sb;
  cr_assert_eq(stat(path, &sb), 0);
  /* The last byte of the file: the top byte of rank 1's last float, element 39. */
  FILE *f = fopen(path, "r+b");
  cr_assert(f != NULL);
  cr_assert_eq(fseek(f, sb.st_size - 1, SEEK_SET), 0);
  int c = fgetc(f);
  cr_assert_eq(fseek(f, sb.st_size - 1, SEEK_SET), 0);
  fputc(c ^ 0x01, f);
  fclose(f);
  expect_refused(dir, (const char *[]){"__1_1.safetensors (read for tensor `w`) fails its checksum",
                                       "CRC32C 0x", NULL});
  /* Skipping the checksum is the caller's choice: then exactly that element is wrong. */
  float v[ROWS * COLS];
  cr_assert_eq(load(dir, true, v), DT_OK, "%s", dt_last_error());
  for (int64_t i = 0; i < ROWS * COLS; i++)
    cr_assert_eq(v[i] != value_at(1, i), i == ROWS * COLS - 1, "element %lld", (long long)i);
  remove_dir(dir);
}

Test(checkpoint_integrity, fifo_in_place_of_a_shard_does_not_block) {
  char dir[64], path[128];
  temp_dir(dir, sizeof dir);
  save(dir, 2, 1);
  snprintf(path, sizeof path, "%s/__1_1.safetensors", dir);
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(mkfifo(path, 0644), 0);
  expect_refused(dir, (const char *[]){"__1_1.safetensors is not a regular file", NULL});
  snprintf(path, sizeof path, "%s/metadata.json", dir);
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(mkfifo(path, 0644), 0);
  float v[ROWS * COLS];
  cr_assert_eq(load(dir, false, v), DT_ERR_IO);
  cr_assert(strstr(dt_last_error(), "metadata.json is not a regular file"), "%s", dt_last_error());
  remove_dir(dir);
}

/* ---- The metadata parser's limits --------------------------------------------------------- */

static dt_status parse(const char *text) {
  dt__ckpt_meta meta;
  dt_status st = dt__ckpt_meta_parse("m.json", text, strlen(text), &meta);
  dt__ckpt_meta_free(&meta);
  return st;
}

#define HEAD "{\"format\":\"dtensor-checkpoint\",\"version\":2,\"generation\":1,"
#define FILE0                                                                                      \
  "\"files\":[{\"name\":\"f\",\"bytes\":1000,\"generation\":1,\"rank\":0,\"crc32c\":7}],"

static void expect_bad(const char *text, const char *phrase) {
  cr_assert_eq(parse(text), DT_ERR_INVALID, "accepted: %s", text);
  cr_assert(strstr(dt_last_error(), phrase) != NULL, "`%s` in: %s", phrase, dt_last_error());
}

Test(checkpoint_integrity, metadata_parser_limits) {
  /* A valid one first: two blocks tile a [4, 2] float32 tensor. */
  const char *good = HEAD FILE0 "\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\",\"shape\":[4,2],"
                                "\"blocks\":[{\"file\":0,\"offsets\":[0,0],\"lengths\":[2,2],"
                                "\"byte_range\":[0,16]},{\"file\":0,\"offsets\":[2,0],"
                                "\"lengths\":[2,2],\"byte_range\":[16,32]}]}]}";
  cr_assert_eq(parse(good), DT_OK, "%s", dt_last_error());
  /* offsets + lengths past int64: 2^62 + 2^62 (was signed overflow, UB). */
  expect_bad(HEAD FILE0
             "\"tensors\":[{\"name\":\"w\",\"dtype\":\"U8\",\"shape\":[4611686018427387904],"
             "\"blocks\":[{\"file\":0,\"offsets\":[4611686018427387904],"
             "\"lengths\":[4611686018427387904],\"byte_range\":[0,1]}]}]}",
             "passes");
  /* A duplicate "name" (the first used to leak) and other duplicate keys. */
  expect_bad(HEAD FILE0 "\"tensors\":[{\"name\":\"w\",\"name\":\"v\",\"dtype\":\"F32\","
                        "\"shape\":[1],\"blocks\":[]}]}",
             "key \"name\" appears twice");
  expect_bad(HEAD "\"files\":[{\"name\":\"f\",\"name\":\"g\",\"bytes\":1}],\"tensors\":[]}",
             "key \"name\" appears twice");
  expect_bad(HEAD "\"version\":2," FILE0 "\"tensors\":[]}", "key \"version\" appears twice");
  /* A gap: one block of two. */
  expect_bad(HEAD FILE0 "\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\",\"shape\":[4,2],"
                        "\"blocks\":[{\"file\":0,\"offsets\":[2,0],\"lengths\":[2,2],"
                        "\"byte_range\":[16,32]}]}]}",
             "tensor `w`: the blocks cover 4 of its 8 elements");
  /* Overlap in a 2-D grid, and two blocks of a 0-d tensor. */
  expect_bad(HEAD FILE0 "\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\",\"shape\":[4,2],"
                        "\"blocks\":[{\"file\":0,\"offsets\":[0,0],\"lengths\":[4,1],"
                        "\"byte_range\":[0,16]},{\"file\":0,\"offsets\":[1,0],"
                        "\"lengths\":[2,2],\"byte_range\":[16,32]}]}]}",
             "overlap");
  expect_bad(HEAD FILE0 "\"tensors\":[{\"name\":\"s\",\"dtype\":\"F32\",\"shape\":[],"
                        "\"blocks\":[{\"file\":0,\"offsets\":[],\"lengths\":[],"
                        "\"byte_range\":[0,4]},{\"file\":0,\"offsets\":[],\"lengths\":[],"
                        "\"byte_range\":[4,8]}]}]}",
             "overlap");
  /* An empty block, a file listed twice as one rank, a file of another generation. */
  expect_bad(HEAD FILE0 "\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\",\"shape\":[4,2],"
                        "\"blocks\":[{\"file\":0,\"offsets\":[0,0],\"lengths\":[0,2],"
                        "\"byte_range\":[0,0]}]}]}",
             "is empty");
  expect_bad(HEAD
             "\"files\":[{\"name\":\"f\",\"bytes\":1,\"generation\":1,\"rank\":0,\"crc32c\":7},"
             "{\"name\":\"g\",\"bytes\":1,\"generation\":1,\"rank\":0,\"crc32c\":7}],"
             "\"tensors\":[]}",
             "two files are listed as rank 0");
  expect_bad(HEAD
             "\"files\":[{\"name\":\"f\",\"bytes\":1,\"generation\":3,\"rank\":0,\"crc32c\":7}],"
             "\"tensors\":[]}",
             "file f is listed as generation 3");
  expect_bad(HEAD "\"files\":[{\"name\":\"f\",\"bytes\":1,\"rank\":0}],\"tensors\":[]}",
             "all of generation, rank and crc32c");
  /* Version 2 requires the identities; version 1 (older saves) is read without them. */
  expect_bad(HEAD "\"files\":[{\"name\":\"f\",\"bytes\":1}],\"tensors\":[]}",
             "file f has no generation, rank and crc32c");
  cr_assert_eq(parse("{\"format\":\"dtensor-checkpoint\",\"version\":1,\"generation\":1,"
                     "\"files\":[{\"name\":\"f\",\"bytes\":1}],\"tensors\":[]}"),
               DT_OK, "%s", dt_last_error());
  expect_bad("{\"format\":\"dtensor-checkpoint\",\"generation\":1,\"tensors\":[]}",
             "no \"version\"");
}

/* A tensor of `good`'s blocks with mesh `mesh` and placements `placements` (JSON text), the
 * placements before the shape when `early` (the members come in any order). */
static void with_placements(char *buf, size_t size, const char *mesh, const char *placements,
                            bool early) {
  char members[256];
  snprintf(members, sizeof members, "\"mesh\":%s,\"placements\":%s,", mesh, placements);
  snprintf(buf, size,
           HEAD FILE0 "\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\",%s\"shape\":[4,2],%s"
                      "\"blocks\":[{\"file\":0,\"offsets\":[0,0],\"lengths\":[4,2],"
                      "\"byte_range\":[0,32]}]}]}",
           early ? members : "", early ? "" : members);
}

/* Placements a save never writes ("S(99)", "S(-1)", "P(sum)") used to load, and `ckpt
 * inspect` showed them: each is refused naming the tensor and the placement, escaped. */
Test(checkpoint_integrity, placements_are_ones_a_save_writes) {
  char text[1024];
  static const char *const good[][2] = {{"[2]", "[\"S(0)\"]"},
                                        {"[2]", "[\"S(1)\"]"},
                                        {"[2]", "[\"R\"]"},
                                        {"[2,3]", "[\"R\",\"S(1)\"]"},
                                        {"[2,2]", "[\"S(0)\",\"S(0)\"]"},
                                        {"[]", "[]"}};
  for (int i = 0; i < (int)(sizeof good / sizeof good[0]); i++)
    for (int early = 0; early < 2; early++) {
      with_placements(text, sizeof text, good[i][0], good[i][1], early);
      cr_assert_eq(parse(text), DT_OK, "%s: %s", text, dt_last_error());
    }
  static const char *const bad[][3] = {
      {"[2]", "[\"S(99)\"]", "tensor `w`: placement 0 \"S(99)\" is not one a save writes"},
      {"[2]", "[\"S(-1)\"]", "tensor `w`: placement 0 \"S(-1)\" is not one a save writes"},
      {"[2]", "[\"P(sum)\"]", "tensor `w`: placement 0 \"P(sum)\" is not one a save writes"},
      {"[2]", "[\"SS(0,2)\"]", "placement 0 \"SS(0,2)\" is not one"},
      {"[2]", "[\"S(01)\"]", "placement 0 \"S(01)\" is not one"},
      {"[2]", "[\"S( 0)\"]", "placement 0 \"S( 0)\" is not one"},
      {"[2]", "[\"S(0) \"]", "placement 0 \"S(0) \" is not one"},
      {"[2]", "[\"r\"]", "placement 0 \"r\" is not one"},
      {"[2]", "[\"\"]", "placement 0 \"\" is not one"},
      {"[2,2]", "[\"R\",\"S(\\u001b[2J)\"]", "placement 1 \"S(\\x1b[2J)\" is not one"},
      {"[2]", "[\"S(2)\"]", "tensor `w`: placement 0 \"S(2)\" shards dim 2 of a tensor of 2 dims"},
      {"[2,2]", "[\"S(0)\",\"S(7)\"]", "placement 1 \"S(7)\" shards dim 7 of a tensor of 2"},
      {"[2]", "[]", "tensor `w`: 0 placements for a mesh of 1 dims"},
      {"[]", "[\"R\"]", "tensor `w`: 1 placements for a mesh of 0 dims"},
      {"[2]", "[\"R\",\"R\"]", "tensor `w`: 2 placements for a mesh of 1 dims"}};
  for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++)
    for (int early = 0; early < 2; early++) {
      with_placements(text, sizeof text, bad[i][0], bad[i][1], early);
      expect_bad(text, bad[i][2]);
      cr_assert(strchr(dt_last_error(), '\x1b') == NULL, "a raw ESC in: %s", dt_last_error());
    }
}

/* The same through a real, re-signed checkpoint: the load is refused and no target changes. */
Test(checkpoint_integrity, a_saved_checkpoint_with_an_unwritable_placement_is_refused) {
  char dir[64], path[128];
  temp_dir(dir, sizeof dir);
  save(dir, 2, 1);
  snprintf(path, sizeof path, "%s/metadata.json", dir);
  size_t length = 0;
  char *text = ckpt_read_text(path, &length);
  cr_assert(text != NULL);
  char *at = strstr(text, "\"placements\":[\"S(0)\"]");
  cr_assert(at != NULL, "%s", text);
  char *edited = malloc(length + 32);
  cr_assert(edited != NULL);
  int n = snprintf(edited, length + 32, "%.*s\"placements\":[\"S(99)\"]%s", (int)(at - text), text,
                   at + strlen("\"placements\":[\"S(0)\"]"));
  long resigned = ckpt_resign_text(edited, (size_t)n);
  cr_assert(resigned > 0);
  cr_assert_eq(ckpt_write_text(path, edited, (size_t)resigned), 0);
  float v[ROWS * COLS];
  cr_assert_eq(load(dir, false, v), DT_ERR_INVALID, "an S(99) checkpoint loaded");
  cr_assert(strstr(dt_last_error(), "metadata.json: tensor `w`: placement 0 \"S(99)\" is not "
                                    "one a save writes") != NULL,
            "%s", dt_last_error());
  for (int i = 0; i < ROWS * COLS; i++) cr_assert_eq(v[i], 0.0f, "element %d changed", i);
  free(edited);
  free(text);
  remove_dir(dir);
}
