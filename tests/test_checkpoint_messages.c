/* Text read from a file reaches a checkpoint message escaped (issue 35, items 4 and 9 review):
 * a shard whose __metadata__ said "dtensor.rank":"\u001b[31m\n" gave dt_checkpoint_load a
 * message with a raw ESC and newline (a terminal obeys the one, the other forges a line). Now
 * every such text goes through core/text_escape.c: the shard's rank and block record, the
 * metadata's tensor and file names, the names, dtypes and keys of a safetensors header, a
 * path, the unexpected keys of a state dict. Each case checks the escaped form and that the
 * message holds no control character at all. */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint_helpers.h"
#include "comm_helpers.h"
#include "fs_helpers.h"

static bool has_control(const char *m) {
  for (const unsigned char *c = (const unsigned char *)m; *c; c++)
    if (*c < 0x20 || *c == 0x7f) return true;
  return false;
}

/* The message has `escaped` in it and no control character. */
static void expect_escaped(const char *m, const char *escaped) {
  cr_assert(!has_control(m), "a raw control character in: %s", m);
  cr_assert(strstr(m, escaped) != NULL, "`%s` in: %s", escaped, m);
}

/* w: a local [3, 4], b: a local [5], saved by one rank into __1_0.safetensors. */
static dt_status save_rank(dt_comm *world, void *arg) {
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){1}, NULL, &mesh));
  dt_tensor *w = NULL, *b = NULL;
  RANK_OK(dt_zeros(2, (int64_t[]){3, 4}, DT_F32, &w));
  RANK_OK(dt_ones(1, (int64_t[]){5}, DT_F32, &b));
  RANK_OK(dt_checkpoint_save(arg, mesh, 2, (const char *[]){"w", "b"}, (dt_tensor *[]){w, b}));
  dt_tensor_release(w);
  dt_tensor_release(b);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void make_checkpoint(char *dir, size_t size) {
  snprintf(dir, size, "/tmp/dt_ckpt_messages_XXXXXX");
  cr_assert(mkdtemp(dir) != NULL);
  SPAWN_OK(1, save_rank, dir);
}

/* In DIR/name replaces `from` by `to` and `cut` by `cut_to` (the first of each, bytes that may
 * follow a NUL), which together keep the file's length: the header length, the data and the
 * metadata's byte ranges stay right. */
static void edit_file(const char *dir, const char *name, const char *from, const char *to,
                      const char *cut, const char *cut_to) {
  cr_assert_eq(strlen(from) + strlen(cut), strlen(to) + strlen(cut_to), "the edit changes sizes");
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  size_t length = 0;
  char *text = ckpt_read_text(path, &length);
  cr_assert(text != NULL);
  char *edited = malloc(length + 64);
  cr_assert(edited != NULL);
  memcpy(edited, text, length);
  size_t n = length;
  const char *pairs[2][2] = {{from, to}, {cut, cut_to}};
  for (int i = 0; i < 2; i++) {
    size_t old = strlen(pairs[i][0]), now = strlen(pairs[i][1]);
    if (old == 0 && now == 0) continue;
    char *at = memmem(edited, n, pairs[i][0], old);
    cr_assert(at != NULL, "no `%s` in %s", pairs[i][0], name);
    memmove(at + now, at + old, n - (size_t)(at - edited) - old);
    memcpy(at, pairs[i][1], now);
    n = n - old + now;
  }
  cr_assert_eq(n, length);
  cr_assert_eq(ckpt_write_text(path, edited, length), 0);
  free(edited);
  free(text);
}

static dt_status load_local(const char *dir, const char *name, bool skip_checksum) {
  dt_tensor *t = NULL;
  bool w = strcmp(name, "w") == 0;
  cr_assert_eq(dt_zeros(w ? 2 : 1, w ? (int64_t[]){3, 4} : (int64_t[]){5}, DT_F32, &t), DT_OK);
  dt_checkpoint_load_options o = {.skip_data_checksum = skip_checksum};
  dt_status st = dt_checkpoint_load_ex(dir, 1, &name, &t, &o);
  dt_tensor_release(t);
  return st;
}

Test(checkpoint_messages, a_shards_rank_is_escaped) {
  char dir[64];
  make_checkpoint(dir, sizeof dir);
  /* "0" becomes ESC [31m LF (11 more bytes of JSON); b's record is cut by as many. */
  edit_file(dir, "__1_0.safetensors", "\"dtensor.rank\":\"0\"",
            "\"dtensor.rank\":\"\\u001b[31m\\n\"", "\"offsets [0], lengths [5]\"",
            "\"offsets [0], \"");
  cr_assert_eq(load_local(dir, "w", false), DT_ERR_INVALID);
  expect_escaped(dt_last_error(), "is rank \\x1b[31m\\x0a's file of generation 1");
  cr_assert_eq(fs_remove_tree(dir), 0);
}

Test(checkpoint_messages, a_shards_block_record_is_escaped) {
  char dir[64];
  make_checkpoint(dir, sizeof dir);
  /* The same length: 24 bytes of record for 24 of escapes (ESC [2J, ESC ]0; BEL). */
  edit_file(dir, "__1_0.safetensors", "offsets [0], lengths [5]", "\\u001b[2J\\u001b]0;\\u0007", "",
            "");
  cr_assert_eq(load_local(dir, "b", true), DT_ERR_INVALID);
  expect_escaped(dt_last_error(), "that file holds the block of `b` at \\x1b[2J\\x1b]0;\\x07 (a");
  cr_assert_eq(fs_remove_tree(dir), 0);
}

Test(checkpoint_messages, a_metadata_tensor_name_is_escaped) {
  char dir[64], path[128];
  make_checkpoint(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/metadata.json", dir);
  size_t length = 0;
  char *text = ckpt_read_text(path, &length);
  cr_assert(text != NULL);
  /* b renamed ESC [2J CR and given a shape its block does not cover. */
  const char *from = "{\"name\":\"b\",\"dtype\":\"F32\",\"shape\":[5]";
  const char *to = "{\"name\":\"\\u001b[2J\\r\",\"dtype\":\"F32\",\"shape\":[6]";
  char *at = strstr(text, from);
  cr_assert(at != NULL, "%s", text);
  char *edited = malloc(length + 64);
  cr_assert(edited != NULL);
  int n = snprintf(edited, length + 64, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  long resigned = ckpt_resign_text(edited, (size_t)n);
  cr_assert(resigned > 0);
  cr_assert_eq(ckpt_write_text(path, edited, (size_t)resigned), 0);
  cr_assert_eq(load_local(dir, "w", false), DT_ERR_INVALID);
  expect_escaped(dt_last_error(), "tensor `\\x1b[2J\\x0d`: the blocks cover 5 of its 6 elements");
  free(edited);
  free(text);
  cr_assert_eq(fs_remove_tree(dir), 0);
}

/* A safetensors file of one header (8-byte length, then the text) and no data. */
static void write_header_only(const char *path, const char *header) {
  uint64_t n = strlen(header);
  FILE *f = fopen(path, "wb");
  cr_assert(f != NULL, "%s", path);
  cr_assert_eq(fwrite(&n, 8, 1, f), 1);
  cr_assert_eq(fwrite(header, 1, n, f), n);
  cr_assert_eq(fclose(f), 0);
}

Test(checkpoint_messages, a_safetensors_headers_names_and_path_are_escaped) {
  char dir[64], path[128];
  snprintf(dir, sizeof dir, "/tmp/dt_st_messages_XXXXXX");
  cr_assert(mkdtemp(dir) != NULL);
  /* The path itself holds a newline. */
  snprintf(path, sizeof path, "%s/a\nb.safetensors", dir);
  dt_safetensors *f = NULL;
  write_header_only(path, "{\"\\u001b[2Jx\":{\"dtype\":\"Q\\u001b8\",\"shape\":[],"
                          "\"data_offsets\":[0,0]}}");
  cr_assert_eq(dt_safetensors_open(path, &f), DT_ERR_DTYPE);
  expect_escaped(dt_last_error(), "a\\x0ab.safetensors: tensor `\\x1b[2Jx` has dtype `Q\\x1b8`");
  write_header_only(path, "{\"__metadata__\":{\"k\\u009b\":\"1\",\"k\\u009b\":\"2\"}}");
  cr_assert_eq(dt_safetensors_open(path, &f), DT_ERR_INVALID);
  expect_escaped(dt_last_error(), "__metadata__ key `k\\u009b` appears twice");
  write_header_only(path,
                    "{\"x\\u0007\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
  cr_assert_eq(dt_safetensors_open(path, &f), DT_ERR_INVALID);
  expect_escaped(dt_last_error(), "tensor `x\\x07`: data_offsets [0, 4] pass the end");
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(fs_remove_tree(dir), 0);
}

Test(checkpoint_messages, a_state_dicts_unexpected_keys_are_escaped) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/dt_sd_messages_%d.safetensors", (int)getpid());
  dt_module *m = NULL;
  cr_assert_eq(dt_nn_linear(3, 2, true, 0, &m), DT_OK, "%s", dt_last_error());
  dt_tensor *w = NULL, *b = NULL, *x = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){2, 3}, DT_F32, &w), DT_OK);
  cr_assert_eq(dt_zeros(1, (int64_t[]){2}, DT_F32, &b), DT_OK);
  cr_assert_eq(dt_zeros(1, (int64_t[]){1}, DT_F32, &x), DT_OK);
  cr_assert_eq(dt_safetensors_save(path, 3, (const char *[]){"weight", "bias", "\x1b]0;pwned\x07"},
                                   (dt_tensor *[]){w, b, x}, 0, NULL, NULL),
               DT_OK, "%s", dt_last_error());
  dt_safetensors *f = NULL;
  cr_assert_eq(dt_safetensors_open(path, &f), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_state_dict_load(m, f, NULL, NULL), DT_ERR_INVALID);
  expect_escaped(dt_last_error(), "1 unexpected key(s): \\x1b]0;pwned\\x07");
  /* The report is data, not a message: it keeps the key as the file spells it. */
  dt_state_dict_report report = {0};
  cr_assert_eq(dt_state_dict_load(m, f, &(dt_state_dict_options){.non_strict = true}, &report),
               DT_OK, "%s", dt_last_error());
  cr_assert_str_eq(report.unexpected, "\x1b]0;pwned\x07");
  dt_state_dict_report_clear(&report);
  dt_safetensors_destroy(f);
  dt_tensor_release(w);
  dt_tensor_release(b);
  dt_tensor_release(x);
  dt_module_destroy(m);
  cr_assert_eq(unlink(path), 0);
}
