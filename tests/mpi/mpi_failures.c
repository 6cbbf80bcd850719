/*
 * Failure behaviour of the MPI backend, one case per run (argv[1]); CTest matches the output.
 *   clean          worlds made and destroyed twice; the job must exit 0.
 *   timeout        rank 1 never joins a synchronous all_reduce: rank 0's watchdog aborts the
 *                  job after the 300 ms group timeout with a DT_ERR_TIMEOUT message.
 *   async_timeout  the same through dt_all_reduce_async + dt_work_wait.
 *   abort          rank 1 calls dt_comm_abort while rank 0 waits in a barrier.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dtensor/dtensor.h"

static void nap(int seconds) {
  struct timespec ts = {seconds, 0};
  nanosleep(&ts, NULL);
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
    code = dt_all_reduce(world, t, DT_REDUCE_SUM) != DT_OK;
    dt_comm_destroy(world);
    /* A new world after the last one was destroyed: MPI stays up until exit. */
    world = NULL;
    if (dt_comm_init(&(dt_comm_options){.backend = "mpi"}, &world) != DT_OK ||
        dt_barrier(world) != DT_OK) {
      fprintf(stderr, "second world: %s\n", dt_last_error());
      code = 1;
    }
    if (rank == 0 && code == 0) printf("clean: %d ranks OK\n", size);
  } else if (strcmp(mode, "timeout") == 0 || strcmp(mode, "async_timeout") == 0) {
    dt_comm_set_timeout(world, 300);
    if (rank == 0) {
      if (strcmp(mode, "timeout") == 0) {
        dt_all_reduce(world, t, DT_REDUCE_SUM);
      } else {
        dt_work *w = NULL;
        dt_all_reduce_async(world, t, DT_REDUCE_SUM, &w);
        dt_work_wait(w);
      }
      fprintf(stderr, "rank 0 came back from a collective its peer never joined\n");
    } else {
      nap(60); /* mpirun ends this rank when rank 0 aborts the job */
    }
    code = 1;
  } else if (strcmp(mode, "abort") == 0) {
    if (rank == 1) dt_comm_abort(world, "rank 1 gives up");
    dt_barrier(world);
    if (size > 1) nap(60);
    code = 1;
  }
  dt_tensor_release(t);
  dt_comm_destroy(world);
  return code;
}
