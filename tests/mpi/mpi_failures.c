/*
 * Failure behaviour of the MPI backend, one case per run (argv[1]); CTest matches the output.
 *   clean          worlds made and destroyed twice; the job must exit 0.
 *   timeout        rank 1 never joins a synchronous all_reduce: rank 0's watchdog aborts the
 *                  job after the 300 ms group timeout with a DT_ERR_TIMEOUT message.
 *   async_timeout  the same through dt_comm_all_reduce_async + dt_work_wait.
 *   abort          rank 1 calls dt_comm_abort while rank 0 waits in a barrier.
 *   exit_mid_job   rank 1 calls exit(0) with its world alive while rank 0 waits in an
 *                  all_reduce: the exit handler must end the whole job within seconds
 *                  (run under tests/mpi/timed_run.cmake), naming the rank's last collective.
 *   tidy_failure   rank 1 fails tidily: it releases everything, destroys its world and exits
 *                  1, while rank 0 waits in an all_reduce under the default (10-minute)
 *                  timeout: the exit handler must still end the whole job within seconds.
 *   idle_exit      every rank returns from main without destroying its world: they all
 *                  exit together, so the job must still end normally with status 0.
 *   mismatch       collectives whose sizes, dtypes or ops differ across ranks (no debug
 *                  mode): each must fail with DT_ERR_MISMATCH on every rank and write
 *                  nothing out of bounds (run in the DT_SANITIZE build too); the group works
 *                  afterwards. Prints "mismatch: N checks failed".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtensor/dtensor.h"

static void nap(int seconds) {
  struct timespec ts = {seconds, 0};
  nanosleep(&ts, NULL);
}

/* One disagreeing collective per case; the buffers are exactly as large as each rank's own
 * call needs, so ASan flags any write past them. Returns the number of failed checks. */
static int mismatch_cases(dt_comm *world, int rank) {
  int failed = 0;
  int64_t n = rank == 0 ? 512 : 2048; /* 2 KiB against 8 KiB of f32 */
  dt_tensor *a = NULL, *b = NULL, *in = NULL, *out = NULL, *wide = NULL;
  dt_ones(1, (int64_t[]){n}, DT_F32, &a);
  dt_ones(1, (int64_t[]){512}, rank == 0 ? DT_F32 : DT_F64, &b);
  dt_ones(1, (int64_t[]){2 * n}, DT_F32, &in);
  dt_zeros(1, (int64_t[]){2 * n}, DT_F32, &out);
  dt_zeros(1, (int64_t[]){n}, DT_F32, &wide);
  /* The calls run in this order on every rank; each must fail on every rank. */
  const char *names[6] = {"all_reduce counts", "all_reduce dtypes", "all_reduce ops",
                          "all_gather counts", "broadcast counts",  "reduce_scatter counts"};
  dt_status results[6];
  int count = 0;
  results[count++] = dt_comm_all_reduce(world, a, DT_REDUCE_SUM);
  results[count++] = dt_comm_all_reduce(world, b, DT_REDUCE_SUM);
  results[count++] = dt_comm_all_reduce(world, in, rank ? DT_REDUCE_MAX : DT_REDUCE_SUM);
  results[count++] = dt_comm_all_gather_into_tensor(world, a, out);
  results[count++] = dt_comm_broadcast(world, a, 0);
  results[count++] = dt_comm_reduce_scatter_tensor(world, in, wide, DT_REDUCE_SUM);
  for (int i = 0; i < count; i++) {
    if (results[i] != DT_ERR_MISMATCH) {
      fprintf(stderr, "[rank %d] %s returned %s\n", rank, names[i], dt_status_string(results[i]));
      failed++;
    }
  }
  /* A refused all_reduce leaves the tensor as it was. */
  const float *data = dt_tensor_data(a);
  if (data[0] != 1.0f || data[n - 1] != 1.0f) {
    fprintf(stderr, "[rank %d] a mismatched all_reduce changed the data\n", rank);
    failed++;
  }
  /* The group still works, and the message of a fresh mismatch names both ranks' calls. */
  dt_tensor *one = NULL;
  dt_ones(1, (int64_t[]){1}, DT_F32, &one);
  if (dt_comm_all_reduce(world, one, DT_REDUCE_SUM) != DT_OK ||
      ((const float *)dt_tensor_data(one))[0] != (float)dt_comm_size(world)) {
    fprintf(stderr, "[rank %d] all_reduce after the mismatches failed: %s\n", rank,
            dt_last_error());
    failed++;
  }
  dt_status st = dt_comm_all_reduce(world, a, DT_REDUCE_SUM);
  if (st != DT_ERR_MISMATCH ||
      !strstr(dt_last_error(), "rank 0 called all_reduce(float32, count=512") ||
      !strstr(dt_last_error(), "rank 1 called all_reduce(float32, count=2048")) {
    fprintf(stderr, "[rank %d] mismatch message: %s\n", rank, dt_last_error());
    failed++;
  }
  dt_tensor_release(one);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(in);
  dt_tensor_release(out);
  dt_tensor_release(wide);
  return failed;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "clean";
  dt_comm *world = NULL;
  if (dt_comm_init(&(dt_comm_options){.backend = "mpi"}, &world) != DT_OK) {
    fprintf(stderr, "dt_comm_init: %s\n", dt_last_error());
    return 1;
  }
  int rank = dt_comm_rank(world), size = dt_comm_size(world);
  dt_tensor *t = NULL;
  dt_ones(1, (int64_t[]){4}, DT_F32, &t);
  int code = 0;
  if (strcmp(mode, "clean") == 0) {
    code = dt_comm_all_reduce(world, t, DT_REDUCE_SUM) != DT_OK;
    dt_comm_destroy(world);
    /* A new world after the last one was destroyed: MPI stays up until exit. */
    world = NULL;
    if (dt_comm_init(&(dt_comm_options){.backend = "mpi"}, &world) != DT_OK ||
        dt_comm_barrier(world) != DT_OK) {
      fprintf(stderr, "second world: %s\n", dt_last_error());
      code = 1;
    }
    if (rank == 0 && code == 0) printf("clean: %d ranks OK\n", size);
  } else if (strcmp(mode, "timeout") == 0 || strcmp(mode, "async_timeout") == 0) {
    dt_comm_set_timeout(world, 300);
    if (rank == 0) {
      if (strcmp(mode, "timeout") == 0) {
        dt_comm_all_reduce(world, t, DT_REDUCE_SUM);
      } else {
        dt_work *w = NULL;
        dt_comm_all_reduce_async(world, t, DT_REDUCE_SUM, &w);
        dt_work_wait(w);
      }
      fprintf(stderr, "rank 0 came back from a collective its peer never joined\n");
    } else {
      nap(60); /* mpirun ends this rank when rank 0 aborts the job */
    }
    code = 1;
  } else if (strcmp(mode, "abort") == 0) {
    if (rank == 1) dt_comm_abort(world, "rank 1 gives up");
    dt_comm_barrier(world);
    if (size > 1) nap(60);
    code = 1;
  } else if (strcmp(mode, "exit_mid_job") == 0) {
    /* One collective both ranks finish, then rank 1 leaves while rank 0 waits in the next. */
    dt_comm_all_reduce(world, t, DT_REDUCE_SUM);
    if (rank == 1) exit(0);
    dt_comm_all_reduce(world, t, DT_REDUCE_SUM);
    fprintf(stderr, "rank 0 came back from an all_reduce its peer left\n");
    code = 1;
  } else if (strcmp(mode, "tidy_failure") == 0) {
    dt_comm_all_reduce(world, t, DT_REDUCE_SUM);
    if (rank == 1) {
      fprintf(stderr, "rank 1 fails and cleans up\n");
      dt_tensor_release(t);
      dt_comm_destroy(world);
      exit(1);
    }
    dt_comm_all_reduce(world, t, DT_REDUCE_SUM);
    fprintf(stderr, "rank 0 came back from an all_reduce its peer left\n");
    code = 1;
  } else if (strcmp(mode, "idle_exit") == 0) {
    code = dt_comm_all_reduce(world, t, DT_REDUCE_SUM) != DT_OK;
    if (rank == 0 && code == 0) printf("idle_exit: %d ranks OK\n", size);
    dt_tensor_release(t);
    return code; /* the world is left alive on purpose */
  } else if (strcmp(mode, "mismatch") == 0) {
    int failed = size == 2 ? mismatch_cases(world, rank) : 0;
    printf("[rank %d] mismatch: %d checks failed\n", rank, failed);
    code = failed != 0;
  }
  dt_tensor_release(t);
  dt_comm_destroy(world);
  return code;
}
