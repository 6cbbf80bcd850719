/* Distributed checkpoints under faults (issue 22, items 11-15): a save that cannot read the
 * committed metadata writes nothing; a save that one rank cannot start or finish fails on
 * every rank at the same collective with that rank's message, removes the files it wrote and
 * leaves the committed checkpoint loadable; the temporaries are never followed. Faults are
 * real: a directory, a FIFO or a file of another owner where a file is expected. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Private header: a crash after the data keeps the committed files: dt__checkpoint_fail_step
 * injects it. */
#include "checkpoint/checkpoint_impl.h"
#include "checkpoint_helpers.h"
#include "comm_helpers.h"
#include "fs_helpers.h"

#define ROWS 7
#define COLS 5

static float value_at(int generation, int64_t i) { return (float)(generation * 1000 + i) + 0.5f; }

static dt_tensor *full_values(int generation) {
  dt_tensor *t = NULL;
  if (dt_empty(2, (int64_t[]){ROWS, COLS}, DT_F32, &t)) return NULL;
  for (int64_t i = 0; i < ROWS * COLS; i++)
    ((float *)dt_tensor_data(t))[i] = value_at(generation, i);
  return t;
}

typedef struct save_case {
  const char *dir;
  int generation;     /* the values saved */
  dt_status expected; /* what every rank must return */
  /* When the save fails: the rank whose fault it is (-1: every rank's own), and a phrase of
   * its message. */
  int culprit;
  const char *phrase;
  const char *retry_dir; /* saved again on the same world right after, when not NULL */
  bool oom;              /* the culprit's report of its blocks cannot be allocated */
} save_case;

/* An allocator that fails, on the thread that asks, the allocation of a save's report of its
 * blocks: 16 bytes of report and 152 per block, room for count + 1 blocks (count 1 here). */
#define REPORT_BYTES (16 + 152 * 2)
static _Thread_local bool fail_report;

static void *failing_alloc(size_t size, size_t alignment, void *user) {
  (void)user;
  if (fail_report && size == REPORT_BYTES) return NULL;
  void *p = NULL;
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  return posix_memalign(&p, alignment, size ? size : 1) ? NULL : p;
}

static void plain_free(void *p, void *user) {
  (void)user;
  free(p);
}

static dt_status save_once(dt_comm *world, const char *dir, int generation, dt_status *result) {
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  dt_tensor *full = full_values(generation), *d = NULL;
  RANK_CHECK(full != NULL, "values");
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, &d));
  *result = dt_checkpoint_save(dir, mesh, 1, (const char *[]){"w"}, (dt_tensor *[]){d});
  dt_tensor_release(d);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static dt_status save_rank(dt_comm *world, void *arg) {
  save_case *c = arg;
  int rank = dt_comm_rank(world);
  dt_status st = DT_OK;
  fail_report = c->oom && rank == c->culprit;
  RANK_OK(save_once(world, c->dir, c->generation, &st));
  fail_report = false;
  char message[2048];
  snprintf(message, sizeof message, "%s", dt_last_error());
  RANK_CHECK(st == c->expected, "rank %d: status %d (%s), expected %d: %.300s", rank, (int)st,
             dt_status_string(st), (int)c->expected, message);
  if (st) {
    /* The culprit says what went wrong; every other rank says which rank and the same. */
    RANK_CHECK(strstr(message, c->phrase) != NULL, "rank %d: `%.300s` lacks `%s`", rank, message,
               c->phrase);
    RANK_CHECK(strncmp(message, "dt_checkpoint_save: ", 20) == 0, "rank %d: %.300s", rank, message);
    char blame[32];
    snprintf(blame, sizeof blame, "rank %d: ", c->culprit);
    if (c->culprit >= 0)
      RANK_CHECK((strstr(message, blame) != NULL) == (rank != c->culprit), "rank %d: %.300s", rank,
                 message);
  }
  if (c->retry_dir) {
    RANK_OK(save_once(world, c->retry_dir, c->generation, &st));
    RANK_CHECK(st == DT_OK, "rank %d: the retry failed: %s", rank, dt_last_error());
  }
  return DT_OK;
}

/* Loads "w" whole on this thread and compares every element with the generation's values. */
static void expect_values(const char *dir, int generation) {
  dt_tensor *t = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){ROWS, COLS}, DT_F32, &t), DT_OK);
  cr_assert_eq(dt_checkpoint_load(dir, 1, (const char *[]){"w"}, &t), DT_OK, "%s: %s", dir,
               dt_last_error());
  const float *v = dt_tensor_data(t);
  for (int64_t i = 0; i < ROWS * COLS; i++)
    cr_assert_eq(v[i], value_at(generation, i), "%s: element %lld is %g, generation %d has %g", dir,
                 (long long)i, (double)v[i], generation, (double)value_at(generation, i));
  dt_tensor_release(t);
}

static void temp_dir(char *buf, size_t size) {
  snprintf(buf, size, "/tmp/dt_ckpt_faults_XXXXXX");
  cr_assert(mkdtemp(buf) != NULL);
}

static void remove_dir(const char *dir) {
  cr_assert_eq(fs_remove_tree(dir), 0, "removing %s: %s", dir, strerror(errno));
}

static int not_dots(const struct dirent *e) {
  return strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
}

/* The directory's entries with their checksums and sizes, one line each, sorted: what a
 * failed save must leave exactly as it was. A link is described by what it points to. */
static void listing(const char *dir, char *out, size_t size) {
  struct dirent **names = NULL;
  int count = scandir(dir, &names, not_dots, alphasort);
  cr_assert(count >= 0, "listing %s: %s", dir, strerror(errno));
  size_t n = 0;
  out[0] = '\0';
  for (int i = 0; i < count; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
    struct stat sb;
    size_t length = 0;
    char *bytes = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? fs_read_file(path, &length) : NULL;
    if (bytes)
      snprintf(out + n, size - n, "%s %u %zu\n", names[i]->d_name,
               (unsigned)dt__crc32c(0, bytes, length), length);
    else
      snprintf(out + n, size - n, "%s (not a file)\n", names[i]->d_name);
    n += strlen(out + n);
    free(bytes);
    free(names[i]);
  }
  free(names);
}

static bool exists(const char *dir, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat sb;
  return lstat(path, &sb) == 0;
}

static void path_in(char *buf, size_t size, const char *dir, const char *name) {
  snprintf(buf, size, "%s/%s", dir, name);
}

/* Item 11: only a missing metadata.json means "no checkpoint yet". */
Test(checkpoint_faults, unreadable_metadata_fails_before_anything_is_written) {
  char dir[64], meta[128], aside[128], before[4096], after[4096];
  temp_dir(dir, sizeof dir);
  save_case first = {.dir = dir, .generation = 1};
  SPAWN_OK(2, save_rank, &first);
  path_in(meta, sizeof meta, dir, "metadata.json");
  path_in(aside, sizeof aside, dir, "metadata.aside");
  cr_assert_eq(rename(meta, aside), 0);
  /* A directory, a FIFO and garbage where the metadata was: each fails the save on every
   * rank, before a byte is written (the old code took each for "no checkpoint" and wrote
   * generation 1's names over the committed files). */
  for (int fault = 0; fault < 3; fault++) {
    const char *phrase = NULL;
    if (fault == 0) {
      cr_assert_eq(mkdir(meta, 0755), 0);
      phrase = "metadata.json is not a regular file";
    } else if (fault == 1) {
      cr_assert_eq(mkfifo(meta, 0644), 0);
      phrase = "metadata.json is not a regular file";
    } else {
      FILE *f = fopen(meta, "w");
      fputs("{\"format\":\"dtensor-checkpoint\",\"version\":1,\"gener", f);
      fclose(f);
      phrase = "corrupt metadata";
    }
    listing(dir, before, sizeof before);
    save_case again = {
        .dir = dir, .generation = 2, .expected = DT_ERR_IO, .culprit = 0, .phrase = phrase};
    SPAWN_OK(3, save_rank, &again);
    listing(dir, after, sizeof after);
    cr_assert_str_eq(after, before, "fault %d: the save changed the directory", fault);
    if (fault == 0)
      cr_assert_eq(rmdir(meta), 0);
    else
      cr_assert_eq(unlink(meta), 0);
  }
  cr_assert_eq(rename(aside, meta), 0);
  expect_values(dir, 1);
  remove_dir(dir);
}

/* Item 11: the new files' names are past every generation the committed metadata names. */
Test(checkpoint_faults, new_names_pass_every_committed_name) {
  char dir[64], meta[128], from[128], to[128];
  temp_dir(dir, sizeof dir);
  save_case first = {.dir = dir, .generation = 1};
  SPAWN_OK(2, save_rank, &first);
  /* A committed checkpoint of generation 1 whose rank-0 file is named for generation 7. */
  path_in(meta, sizeof meta, dir, "metadata.json");
  path_in(from, sizeof from, dir, "__1_0.safetensors");
  path_in(to, sizeof to, dir, "__7_0.safetensors");
  cr_assert_eq(rename(from, to), 0);
  cr_assert_gt(fs_replace_in_file(meta, "__1_0.safetensors", "__7_0.safetensors"), 0, "%s", meta);
  cr_assert_eq(ckpt_resign(dir), 0); /* the edit stands for a save's own metadata */
  expect_values(dir, 1);
  /* A crash after the data leaves the committed files untouched: the new ones are __8_. */
  atomic_store(&dt__checkpoint_fail_step, DT__CKPT_STEP_DATA_WRITTEN);
  save_case crash = {.dir = dir,
                     .generation = 2,
                     .expected = DT_ERR_IO,
                     .culprit = -1,
                     .phrase = "injected failure"};
  SPAWN_OK(2, save_rank, &crash);
  atomic_store(&dt__checkpoint_fail_step, 0);
  cr_assert(exists(dir, "__8_0.safetensors") && exists(dir, "__8_1.safetensors"));
  expect_values(dir, 1);
  save_case ok = {.dir = dir, .generation = 3};
  SPAWN_OK(2, save_rank, &ok);
  expect_values(dir, 3);
  cr_assert(!exists(dir, "__7_0.safetensors") && !exists(dir, "__1_1.safetensors"));
  remove_dir(dir);
}

/* Item 12: rank 0 cannot make the directory. Every rank returns DT_ERR_IO from the same
 * collective with rank 0's reason, and the same world can save again at once (on threads
 * the old code interleaved the retry with the failed save). */
Test(checkpoint_faults, rank0_cannot_start_every_rank_agrees) {
  char dir[64], file[128], below[160], good[128];
  temp_dir(dir, sizeof dir);
  path_in(file, sizeof file, dir, "a_file");
  FILE *f = fopen(file, "w");
  fclose(f);
  snprintf(below, sizeof below, "%s/ckpt", file);
  path_in(good, sizeof good, dir, "good");
  for (int world = 2; world <= 4; world++) {
    save_case c = {.dir = below,
                   .generation = world,
                   .expected = DT_ERR_IO,
                   .culprit = 0,
                   .phrase = "cannot create",
                   .retry_dir = good};
    SPAWN_OK(world, save_rank, &c);
    expect_values(good, world);
    /* A plain file where the directory should be. */
    save_case d = {.dir = file,
                   .generation = world,
                   .expected = DT_ERR_IO,
                   .culprit = 0,
                   .phrase = "exists and is not a directory"};
    SPAWN_OK(world, save_rank, &d);
  }
  remove_dir(dir);
}

/* Item 12 and 15: one rank cannot write its file. Every rank fails with its message, the
 * others remove the files they wrote, the committed checkpoint still loads, and a save after
 * the fault is gone succeeds. */
Test(checkpoint_faults, one_rank_cannot_write_all_fail_and_clean_up) {
  char dir[64], blocker[128], before[4096], after[4096];
  temp_dir(dir, sizeof dir);
  save_case first = {.dir = dir, .generation = 1};
  SPAWN_OK(2, save_rank, &first);
  listing(dir, before, sizeof before);
  /* Generation 2 is next: rank 1's file name is taken by a directory. */
  path_in(blocker, sizeof blocker, dir, "__2_1.safetensors");
  cr_assert_eq(mkdir(blocker, 0755), 0);
  save_case c = {.dir = dir,
                 .generation = 2,
                 .expected = DT_ERR_IO,
                 .culprit = 1,
                 .phrase = "__2_1.safetensors"};
  SPAWN_OK(3, save_rank, &c);
  cr_assert_eq(rmdir(blocker), 0);
  listing(dir, after, sizeof after);
  cr_assert_str_eq(after, before, "the failed save left files behind");
  expect_values(dir, 1);
  save_case ok = {.dir = dir, .generation = 2};
  SPAWN_OK(3, save_rank, &ok);
  expect_values(dir, 2);
  remove_dir(dir);
}

/* Item 15: the commit fails (a directory where the metadata temporary goes): every rank
 * removes its new file, and the old checkpoint loads. */
Test(checkpoint_faults, failed_commit_removes_the_new_files) {
  char dir[64], blocker[128], before[4096], after[4096];
  temp_dir(dir, sizeof dir);
  save_case first = {.dir = dir, .generation = 1};
  SPAWN_OK(3, save_rank, &first);
  path_in(blocker, sizeof blocker, dir, ".metadata.json.tmp");
  cr_assert_eq(mkdir(blocker, 0755), 0);
  listing(dir, before, sizeof before);
  save_case c = {.dir = dir,
                 .generation = 2,
                 .expected = DT_ERR_IO,
                 .culprit = 0,
                 .phrase = ".metadata.json.tmp exists and is not a file"};
  SPAWN_OK(4, save_rank, &c);
  listing(dir, after, sizeof after);
  cr_assert_str_eq(after, before, "the failed commit left files behind");
  expect_values(dir, 1);
  cr_assert_eq(rmdir(blocker), 0);
  remove_dir(dir);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert(f != NULL, "%s", path);
  fputs(text, f);
  fclose(f);
}

static void expect_text(const char *path, const char *text) {
  char got[256] = "";
  FILE *f = fopen(path, "r");
  cr_assert(f != NULL, "%s", path);
  size_t n = fread(got, 1, sizeof got - 1, f);
  got[n] = '\0';
  fclose(f);
  cr_assert_str_eq(got, text, "%s was written through a link", path);
}

static mode_t mode_of(const char *dir, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat sb;
  cr_assert_eq(lstat(path, &sb), 0, "%s", path);
  cr_assert(S_ISREG(sb.st_mode), "%s is not a regular file", path);
  return sb.st_mode & 07777;
}

/* Item 13: a link planted at the metadata temporary's name or at a shard's name is never
 * written through; our own stale link is removed, another user's is refused. */
Test(checkpoint_faults, planted_links_are_not_followed) {
  char dir[64], victim[128], tmp[128], shard[128];
  temp_dir(dir, sizeof dir);
  path_in(victim, sizeof victim, dir, "victim");
  write_text(victim, "precious");
  save_case first = {.dir = dir, .generation = 1};
  SPAWN_OK(2, save_rank, &first);
  path_in(tmp, sizeof tmp, dir, ".metadata.json.tmp");
  path_in(shard, sizeof shard, dir, "__2_1.safetensors");
  cr_assert_eq(symlink(victim, tmp), 0);
  cr_assert_eq(symlink(victim, shard), 0);
  save_case second = {.dir = dir, .generation = 2};
  SPAWN_OK(2, save_rank, &second);
  expect_text(victim, "precious");
  mode_of(dir, "metadata.json"); /* a regular file, not the link */
  mode_of(dir, "__2_1.safetensors");
  expect_values(dir, 2);
  /* Another user's link at the temporary's name: refused, nothing written through it, the
   * new files removed (as root the link can be given away; otherwise this part is moot). */
  if (geteuid() == 0) {
    char before[4096], after[4096];
    cr_assert_eq(symlink(victim, tmp), 0);
    cr_assert_eq(lchown(tmp, 4242, 4242), 0);
    listing(dir, before, sizeof before);
    save_case third = {.dir = dir,
                       .generation = 3,
                       .expected = DT_ERR_IO,
                       .culprit = 0,
                       .phrase = ".metadata.json.tmp exists and is a link of another user (uid "
                                 "4242)"};
    SPAWN_OK(3, save_rank, &third);
    listing(dir, after, sizeof after);
    cr_assert_str_eq(after, before);
    expect_text(victim, "precious");
    expect_values(dir, 2);
  }
  remove_dir(dir);
}

/* Item 13: every file a save creates has mode 0666 less the umask, whatever stale file of an
 * earlier save had the name (a crash leaves a temporary or a shard of mode 0644). */
Test(checkpoint_faults, umask_077_gives_0600_files) {
  char dir[64], path[128];
  temp_dir(dir, sizeof dir);
  save_case first = {.dir = dir, .generation = 1};
  SPAWN_OK(2, save_rank, &first);
  cr_assert_eq(mode_of(dir, "metadata.json"), 0644, "umask 022");
  cr_assert_eq(mode_of(dir, "__1_0.safetensors"), 0644, "umask 022");
  const char *stale[] = {".metadata.json.tmp", "__2_0.safetensors"};
  for (int i = 0; i < 2; i++) {
    path_in(path, sizeof path, dir, stale[i]);
    write_text(path, "stale");
    cr_assert_eq(chmod(path, 0644), 0);
  }
  mode_t old = umask(077);
  save_case second = {.dir = dir, .generation = 2};
  SPAWN_OK(2, save_rank, &second);
  umask(old);
  cr_assert_eq(mode_of(dir, "metadata.json"), 0600, "umask 077");
  cr_assert_eq(mode_of(dir, "__2_0.safetensors"), 0600, "umask 077");
  cr_assert_eq(mode_of(dir, "__2_1.safetensors"), 0600, "umask 077");
  cr_assert(!exists(dir, ".metadata.json.tmp"));
  expect_values(dir, 2);
  remove_dir(dir);
}

/* Item 12: a rank out of memory for its report still takes part in the collective: every
 * rank returns DT_ERR_NOMEM with its message, and the committed checkpoint is untouched. */
Test(checkpoint_faults, rank_out_of_memory_fails_every_rank) {
  dt_set_allocator(&(dt_allocator){failing_alloc, plain_free, NULL}); /* before any object */
  char dir[64], before[4096], after[4096];
  temp_dir(dir, sizeof dir);
  save_case first = {.dir = dir, .generation = 1};
  SPAWN_OK(3, save_rank, &first);
  listing(dir, before, sizeof before);
  save_case c = {.dir = dir,
                 .generation = 2,
                 .expected = DT_ERR_NOMEM,
                 .culprit = 1,
                 .phrase = "cannot allocate for 1 tensors",
                 .oom = true};
  SPAWN_OK(3, save_rank, &c);
  listing(dir, after, sizeof after);
  cr_assert_str_eq(after, before, "the failed save left files behind");
  expect_values(dir, 1);
  remove_dir(dir);
}
