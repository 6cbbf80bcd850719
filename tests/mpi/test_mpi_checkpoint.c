/*
 * Distributed checkpoints over the MPI backend (one process per rank): every rank saves its
 * shards of an uneven [7, 5] float32 tensor (Shard(0) on a 1-D mesh) and its replicated copy
 * of a [6] float64 tensor, then loads them back in other layouts (Shard(1), Replicate, and on
 * 4 ranks a 2x2 mesh with Shard(0), Shard(1)); every rank's block must be bit-identical to the
 * same block of the full values. First, a save that rank 0 cannot start (its directory's
 * parent is a file) must fail on every rank with DT_ERR_IO and rank 0's reason, within
 * seconds (it used to leave the other ranks waiting in the next collective until the
 * 10-minute timeout), and the same world must then save normally. Last, with the last rank's
 * file listed one byte longer than it is (the metadata re-signed), only that rank can notice,
 * yet every rank must refuse the load with that rank's reason and leave its targets as they
 * were (rank 0 used to load its block and return DT_OK).
 *
 * Prints "N passed, N failed" (summed over the ranks) and exits 1 on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtensor/dtensor.h"
#include "checkpoint_helpers.h"
#include "fs_helpers.h"
#include "mpi_check.h"

static dt_tensor *full_values(int which) {
  dt_tensor *t = NULL;
  int64_t shape_a[2] = {7, 5}, shape_b[1] = {6};
  if (dt_empty(which ? 1 : 2, which ? shape_b : shape_a, which ? DT_F64 : DT_F32, &t)) return NULL;
  for (int64_t i = 0; i < dt_tensor_numel(t); i++) {
    if (which)
      ((double *)dt_tensor_data(t))[i] = 0.5 + (double)i * 7;
    else
      ((float *)dt_tensor_data(t))[i] = 0.25f + (float)i * 3;
  }
  return t;
}

/* Loads both tensors into `placements` on `mesh` and compares with distribute_tensor. */
static void load_as(const char *dir, dt_mesh *mesh, const dt_placement *pa, const dt_placement *pb,
                    const char *label) {
  const char *names[2] = {"a", "b"};
  dt_tensor *targets[2] = {NULL, NULL};
  int n = dt_mesh_ndim(mesh);
  CHECK_OK(dt_dist_zeros(mesh, 2, (int64_t[]){7, 5}, DT_F32, n, pa, &targets[0]));
  CHECK_OK(dt_dist_zeros(mesh, 1, (int64_t[]){6}, DT_F64, n, pb, &targets[1]));
  CHECK_OK(dt_checkpoint_load(dir, 2, names, targets));
  for (int k = 0; k < 2; k++) {
    dt_tensor *full = full_values(k), *want = NULL, *got = NULL, *want_local = NULL;
    CHECK_OK(dt_dist_distribute_tensor(mesh, full, n, k ? pb : pa, &want));
    CHECK_OK(dt_dist_to_local(targets[k], &got));
    CHECK_OK(dt_dist_to_local(want, &want_local));
    size_t bytes = got ? (size_t)dt_tensor_numel(got) * dt_dtype_size(dt_tensor_dtype(got)) : 0;
    CHECK(got && want_local && dt_tensor_numel(got) == dt_tensor_numel(want_local) &&
              (bytes == 0 || memcmp(dt_tensor_data(got), dt_tensor_data(want_local), bytes) == 0),
          "%s: tensor %s differs", label, names[k]);
    dt_tensor_release(full);
    dt_tensor_release(want);
    dt_tensor_release(got);
    dt_tensor_release(want_local);
    dt_tensor_release(targets[k]);
  }
}

/* Lists rank `last`'s file one byte longer than it is (*real: its size), re-signing the
 * metadata. */
static void lengthen_file(const char *dir, int last, int64_t *real) {
  char path[256], was[96];
  snprintf(path, sizeof path, "%s/metadata.json", dir);
  size_t length = 0;
  char *text = ckpt_read_text(path, &length);
  CHECK(text != NULL, "reading %s", path);
  if (!text) return;
  snprintf(was, sizeof was, "_%d.safetensors\",\"bytes\":", last);
  char *at = strstr(text, was);
  CHECK(at != NULL, "no `%s` in %s", was, text);
  char *edited = at ? malloc(length + 32) : NULL;
  if (edited) {
    char *end = NULL;
    *real = strtoll(at + strlen(was), &end, 10);
    int n = snprintf(edited, length + 32, "%.*s%lld%s", (int)(at + strlen(was) - text), text,
                     (long long)*real + 1, end);
    long resigned = ckpt_resign_text(edited, (size_t)n);
    CHECK(resigned > 0 && ckpt_write_text(path, edited, (size_t)resigned) == 0, "writing %s", path);
  }
  free(edited);
  free(text);
}

/* Every rank refuses the load of the altered checkpoint with the last rank's reason, and no
 * element of its targets changes. */
static void load_refused_everywhere(dt_comm *world, const char *dir, dt_mesh *mesh) {
  int rank = dt_comm_rank(world), last = dt_comm_size(world) - 1;
  int64_t real = 0;
  if (rank == 0) lengthen_file(dir, last, &real);
  dt_tensor *r = NULL;
  CHECK_OK(dt_from_data(&real, 1, (int64_t[]){1}, DT_I64, &r));
  CHECK_OK(dt_comm_broadcast(world, r, 0));
  real = *(int64_t *)dt_tensor_data(r);
  dt_tensor_release(r);
  const char *names[2] = {"a", "b"};
  dt_tensor *targets[2] = {NULL, NULL};
  dt_placement s0 = dt_shard(0);
  CHECK_OK(dt_dist_ones(mesh, 2, (int64_t[]){7, 5}, DT_F32, 1, &s0, &targets[0]));
  CHECK_OK(dt_dist_ones(mesh, 1, (int64_t[]){6}, DT_F64, 1, &s0, &targets[1]));
  dt_status st = dt_checkpoint_load(dir, 2, names, targets);
  char reason[128], prefix[64];
  snprintf(reason, sizeof reason, "_%d.safetensors has %lld bytes, the metadata says %lld", last,
           (long long)real, (long long)real + 1);
  snprintf(prefix, sizeof prefix, "dt_checkpoint_load: rank %d: ", last);
  CHECK(st == DT_ERR_INVALID, "the altered checkpoint loaded with %s", dt_status_string(st));
  CHECK(strstr(dt_last_error(), reason) != NULL, "`%s` in the message", reason);
  CHECK((rank == last) == (strncmp(dt_last_error(), prefix, strlen(prefix)) != 0),
        "the message names rank %d unless it is this rank's", last);
  for (int k = 0; k < 2; k++) {
    dt_tensor *local = NULL;
    CHECK_OK(dt_dist_to_local(targets[k], &local));
    int64_t n = local ? dt_tensor_numel(local) : 0;
    double *v = malloc(sizeof *v * (size_t)(n + 1));
    bool intact = v && dt_tensor_to_doubles(local, v, (size_t)n) == DT_OK;
    for (int64_t i = 0; intact && i < n; i++) intact = v[i] == 1.0;
    CHECK(intact, "a refused load changed target %s", names[k]);
    free(v);
    dt_tensor_release(local);
    dt_tensor_release(targets[k]);
  }
}

int main(void) {
  dt_comm *world = NULL;
  if (dt_comm_init(&(dt_comm_options){.backend = "mpi"}, &world) != DT_OK) {
    fprintf(stderr, "dt_comm_init(mpi) failed: %s\n", dt_last_error());
    return 1;
  }
  int size = dt_comm_size(world);
  mpi_rank_for_messages = dt_comm_rank(world);
  /* One directory for every process: rank 0's pid, broadcast. */
  int64_t pid = getpid();
  dt_tensor *pid_t = NULL;
  CHECK_OK(dt_from_data(&pid, 1, (int64_t[]){1}, DT_I64, &pid_t));
  CHECK_OK(dt_comm_broadcast(world, pid_t, 0));
  char dir[128];
  snprintf(dir, sizeof dir, "/tmp/dt_mpi_ckpt_%lld", (long long)*(int64_t *)dt_tensor_data(pid_t));
  dt_tensor_release(pid_t);

  dt_mesh *line = NULL;
  CHECK_OK(dt_mesh_create(world, 1, (int[]){size}, NULL, &line));
  dt_tensor *full[2] = {full_values(0), full_values(1)}, *saved[2] = {NULL, NULL};
  CHECK_OK(dt_dist_distribute_tensor(line, full[0], 1, (dt_placement[]){dt_shard(0)}, &saved[0]));
  CHECK_OK(
      dt_dist_distribute_tensor(line, full[1], 1, (dt_placement[]){dt_replicate()}, &saved[1]));
  const char *names[2] = {"a", "b"};
  /* Rank 0 cannot create the directory: a regular file stands where its parent should be. */
  char blocker[160], below[200];
  snprintf(blocker, sizeof blocker, "%s_file", dir);
  snprintf(below, sizeof below, "%s/ckpt", blocker);
  if (dt_comm_rank(world) == 0) {
    FILE *f = fopen(blocker, "w");
    CHECK(f != NULL, "creating %s", blocker);
    if (f) fclose(f);
  }
  CHECK_OK(dt_comm_barrier(world));
  time_t started = time(NULL);
  dt_status st = dt_checkpoint_save(below, line, 2, names, saved);
  CHECK(st == DT_ERR_IO, "a save rank 0 cannot start returned %s", dt_status_string(st));
  CHECK(strstr(dt_last_error(), "cannot create") != NULL &&
            (dt_comm_rank(world) == 0) == (strstr(dt_last_error(), "rank 0: ") == NULL),
        "the message names rank 0's reason: %s", dt_last_error());
  CHECK(time(NULL) - started < 30, "the failed save took %lld s",
        (long long)(time(NULL) - started));
  if (dt_comm_rank(world) == 0) CHECK(unlink(blocker) == 0, "removing %s", blocker);
  CHECK_OK(dt_checkpoint_save(dir, line, 2, names, saved));
  load_as(dir, line, (dt_placement[]){dt_shard(1)}, (dt_placement[]){dt_shard(0)}, "S(1)");
  load_as(dir, line, (dt_placement[]){dt_replicate()}, (dt_placement[]){dt_replicate()}, "R");
  if (size == 4) {
    dt_mesh *square = NULL;
    CHECK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, NULL, &square));
    load_as(dir, square, (dt_placement[]){dt_shard(0), dt_shard(1)},
            (dt_placement[]){dt_replicate(), dt_shard(0)}, "2x2");
    dt_mesh_destroy(square);
  }
  CHECK_OK(dt_comm_barrier(world));
  load_refused_everywhere(world, dir, line);
  for (int k = 0; k < 2; k++) {
    dt_tensor_release(full[k]);
    dt_tensor_release(saved[k]);
  }
  dt_mesh_destroy(line);
  CHECK_OK(dt_comm_barrier(world));
  if (dt_comm_rank(world) == 0) {
    CHECK(fs_remove_tree(dir) == 0, "removing %s: %s", dir, strerror(errno));
  }
  int code = mpi_check_finish(world);
  dt_comm_destroy(world);
  return code;
}
