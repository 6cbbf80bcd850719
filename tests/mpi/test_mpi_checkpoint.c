/*
 * Distributed checkpoints over the MPI backend (one process per rank): every rank saves its
 * shards of an uneven [7, 5] float32 tensor (Shard(0) on a 1-D mesh) and its replicated copy
 * of a [6] float64 tensor, then loads them back in other layouts (Shard(1), Replicate, and on
 * 4 ranks a 2x2 mesh with Shard(0), Shard(1)); every rank's block must be bit-identical to the
 * same block of the full values. First, a save that rank 0 cannot start (its directory's
 * parent is a file) must fail on every rank with DT_ERR_IO and rank 0's reason, within
 * seconds (it used to leave the other ranks waiting in the next collective until the
 * 10-minute timeout), and the same world must then save normally.
 *
 * Prints "N passed, N failed" (summed over the ranks) and exits 1 on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtensor/dtensor.h"
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
