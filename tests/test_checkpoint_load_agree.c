/* A load of distributed targets is all or nothing across the ranks (issue 35, item 4 review):
 * each rank checks only the files its own blocks come from, so with rank 1's file listed one
 * byte longer than it is (the metadata re-signed), rank 0 used to return DT_OK with its shard
 * loaded while rank 1 refused. Now the ranks agree on the checks' verdict before any copies:
 * every rank returns the error (rank 1's own message, "rank 1: ..." on rank 0) and no target
 * changes; the unaltered checkpoint loads on both; targets on meshes of two worlds are
 * refused before anything is read. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_helpers.h"
#include "comm_helpers.h"
#include "fs_helpers.h"

#define RANKS 2
#define SENTINEL -3.5f

/* w: [6, 4] Shard(0), the values 0..23; b: a local [5], the values 0..4 (written by rank 0). */
static dt_status save_rank(dt_comm *world, void *arg) {
  const char *dir = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  dt_tensor *flat = NULL, *full = NULL, *w = NULL, *b = NULL;
  RANK_OK(dt_arange(0, 24, 1, DT_F32, &flat));
  RANK_OK(dt_reshape(flat, 2, (int64_t[]){6, 4}, &full));
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, &w));
  RANK_OK(dt_arange(0, 5, 1, DT_F32, &b));
  RANK_OK(dt_checkpoint_save(dir, mesh, 2, (const char *[]){"w", "b"}, (dt_tensor *[]){w, b}));
  dt_tensor_release(flat);
  dt_tensor_release(full);
  dt_tensor_release(w);
  dt_tensor_release(b);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

typedef struct outcome {
  const char *dir;
  dt_status status[RANKS];
  char message[RANKS][1024];
  bool intact[RANKS]; /* every element of both targets still SENTINEL */
  bool exact[RANKS];  /* both targets hold the saved values */
} outcome;

/* Every element of t (n of them) is SENTINEL, or (exact) the values first, first + 1, ... */
static void compare_values(dt_tensor *t, int64_t n, double first, bool *intact, bool *exact) {
  double v[24];
  if (n > 24 || dt_tensor_to_doubles(t, v, (size_t)n)) {
    *intact = *exact = false;
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    *intact = *intact && v[i] == SENTINEL;
    *exact = *exact && v[i] == first + (double)i;
  }
}

/* A distributed tensor of `shape` on mesh under placement p, every element SENTINEL. */
static dt_status sentinel_on(dt_mesh *mesh, int ndim, const int64_t *shape, dt_placement p,
                             dt_tensor **out) {
  dt_tensor *full = NULL;
  dt_status st = dt_full(ndim, shape, SENTINEL, DT_F32, &full);
  if (!st) st = dt_dist_distribute_tensor(mesh, full, 1, &p, out);
  dt_tensor_release(full);
  return st;
}

static dt_status load_rank(dt_comm *world, void *arg) {
  outcome *o = arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &mesh));
  dt_tensor *w = NULL, *b = NULL, *shard = NULL;
  RANK_OK(sentinel_on(mesh, 2, (int64_t[]){6, 4}, dt_shard(0), &w));
  RANK_OK(dt_full(1, (int64_t[]){5}, SENTINEL, DT_F32, &b));
  o->status[rank] =
      dt_checkpoint_load(o->dir, 2, (const char *[]){"w", "b"}, (dt_tensor *[]){w, b});
  snprintf(o->message[rank], sizeof o->message[rank], "%s", o->status[rank] ? dt_last_error() : "");
  RANK_OK(dt_dist_to_local(w, &shard));
  o->intact[rank] = o->exact[rank] = true;
  compare_values(shard, 12, 12.0 * rank, &o->intact[rank], &o->exact[rank]);
  compare_values(b, 5, 0, &o->intact[rank], &o->exact[rank]);
  dt_tensor_release(shard);
  dt_tensor_release(w);
  dt_tensor_release(b);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void make_checkpoint(char *dir, size_t size) {
  snprintf(dir, size, "/tmp/dt_ckpt_agree_XXXXXX");
  cr_assert(mkdtemp(dir) != NULL);
  SPAWN_OK(RANKS, save_rank, dir);
}

/* The size of DIR/name in bytes. */
static int64_t file_size(const char *dir, const char *name) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat sb;
  cr_assert_eq(stat(path, &sb), 0, "%s", path);
  return (int64_t)sb.st_size;
}

/* Lists __1_1.safetensors in metadata.json one byte longer than it is, re-signed (so only the
 * rank that reads that file can notice). */
static void lengthen_rank1_file(const char *dir, int64_t *real) {
  char path[256], was[96], now[96];
  snprintf(path, sizeof path, "%s/metadata.json", dir);
  *real = file_size(dir, "__1_1.safetensors");
  snprintf(was, sizeof was, "\"name\":\"__1_1.safetensors\",\"bytes\":%" PRId64 ",", *real);
  snprintf(now, sizeof now, "\"name\":\"__1_1.safetensors\",\"bytes\":%" PRId64 ",", *real + 1);
  size_t length = 0;
  char *text = ckpt_read_text(path, &length);
  cr_assert(text != NULL);
  char *at = strstr(text, was);
  cr_assert(at != NULL, "no `%s` in %s", was, text);
  char *edited = malloc(length + 32);
  cr_assert(edited != NULL);
  size_t head = (size_t)(at - text);
  int n = snprintf(edited, length + 32, "%.*s%s%s", (int)head, text, now, at + strlen(was));
  long resigned = ckpt_resign_text(edited, (size_t)n);
  cr_assert(resigned > 0);
  cr_assert_eq(ckpt_write_text(path, edited, (size_t)resigned), 0);
  free(edited);
  free(text);
}

Test(checkpoint_load_agree, the_unaltered_checkpoint_loads_on_every_rank) {
  char dir[64];
  make_checkpoint(dir, sizeof dir);
  outcome o = {.dir = dir};
  SPAWN_OK(RANKS, load_rank, &o);
  for (int r = 0; r < RANKS; r++) {
    cr_assert_eq(o.status[r], DT_OK, "rank %d: %s", r, o.message[r]);
    cr_assert(o.exact[r], "rank %d: the targets do not hold the saved values", r);
  }
  cr_assert_eq(fs_remove_tree(dir), 0);
}

Test(checkpoint_load_agree, one_rank_refusing_fails_every_rank_and_changes_no_target) {
  char dir[64];
  make_checkpoint(dir, sizeof dir);
  int64_t real = 0;
  lengthen_rank1_file(dir, &real);
  outcome o = {.dir = dir};
  SPAWN_OK(RANKS, load_rank, &o);
  char reason[160];
  snprintf(reason, sizeof reason,
           "__1_1.safetensors has %" PRId64 " bytes, the metadata says %" PRId64, real, real + 1);
  for (int r = 0; r < RANKS; r++) {
    cr_assert_eq(o.status[r], DT_ERR_INVALID, "rank %d returned %s (%s)", r,
                 dt_status_string(o.status[r]), o.message[r]);
    cr_assert(o.intact[r], "rank %d: a refused load changed a target", r);
    cr_assert(strstr(o.message[r], reason) != NULL, "rank %d: `%s` in: %s", r, reason,
              o.message[r]);
  }
  /* Rank 1 found it and says it as its own; rank 0 names rank 1. */
  cr_assert(strncmp(o.message[1], "dt_checkpoint_load: checkpoint ", 31) == 0, "%s", o.message[1]);
  cr_assert(strncmp(o.message[0], "dt_checkpoint_load: rank 1: checkpoint ", 39) == 0, "%s",
            o.message[0]);
  cr_assert_eq(fs_remove_tree(dir), 0);
}

/* Targets on meshes made from two worlds (the world and a split of it): no one group covers
 * the ranks that must agree, so the load is refused on every rank before it reads a file. */
static dt_status two_worlds_rank(dt_comm *world, void *arg) {
  outcome *o = arg;
  int rank = dt_comm_rank(world);
  dt_comm *copy = NULL;
  RANK_OK(dt_comm_split(world, 0, rank, &copy));
  dt_mesh *m1 = NULL, *m2 = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){RANKS}, NULL, &m1));
  RANK_OK(dt_mesh_create(copy, 1, (int[]){RANKS}, NULL, &m2));
  dt_tensor *w = NULL, *b = NULL;
  RANK_OK(sentinel_on(m1, 2, (int64_t[]){6, 4}, dt_shard(0), &w));
  RANK_OK(sentinel_on(m2, 1, (int64_t[]){5}, dt_replicate(), &b));
  o->status[rank] =
      dt_checkpoint_load(o->dir, 2, (const char *[]){"w", "b"}, (dt_tensor *[]){w, b});
  snprintf(o->message[rank], sizeof o->message[rank], "%s", o->status[rank] ? dt_last_error() : "");
  dt_tensor_release(w);
  dt_tensor_release(b);
  dt_mesh_destroy(m1);
  dt_mesh_destroy(m2);
  dt_comm_destroy(copy);
  return DT_OK;
}

Test(checkpoint_load_agree, targets_on_two_worlds_are_refused) {
  char dir[64];
  make_checkpoint(dir, sizeof dir);
  outcome o = {.dir = dir};
  SPAWN_OK(RANKS, two_worlds_rank, &o);
  for (int r = 0; r < RANKS; r++) {
    cr_assert_eq(o.status[r], DT_ERR_INVALID, "rank %d: %s", r, o.message[r]);
    cr_assert(strstr(o.message[r], "dt_checkpoint_load: tensors `w` and `b` are on meshes of two "
                                   "worlds (2 and 2 ranks)") != NULL,
              "rank %d: %s", r, o.message[r]);
  }
  cr_assert_eq(fs_remove_tree(dir), 0);
}
