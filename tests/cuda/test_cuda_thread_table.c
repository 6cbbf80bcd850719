/*
 * The per-thread tables of CUDA objects (streams, staging buffers, cuBLAS handles:
 * cuda_impl.h's dt_cuda_thread_table) reset the thread's own pointer when the table is freed
 * at thread exit (issue 39 item 3), as tensor.c's handle pool does: a destructor that runs
 * later on the same thread (a tensor freed at exit) then makes a fresh table instead of
 * reading freed memory. Plain host code: runs without a GPU.
 */
#include <pthread.h>

#include "cuda/cuda_test.h"
#include "kernels/cuda/cuda_impl.h"

static int released[DT__CUDA_MAX_DEVICES];
static void release(int device, void *slot) {
  released[device] += *(int *)slot == 0 ? 1 : 100; /* 100: a slot the test wrote */
}

static dt_cuda_thread_table table = DT_CUDA_THREAD_TABLE_INIT(int, release);
static _Thread_local int *mine;

/* A second key's destructor on the exiting thread: once the table's destructor has run (in
 * this round or an earlier one; pthread repeats rounds while values are set), records whether
 * the thread's pointer was reset. */
static pthread_key_t check_key;
static int reset = -1;
static void check_after(void *value) {
  if (released[0] == 0) {
    pthread_setspecific(check_key, value); /* the table's turn has not come: next round */
    return;
  }
  reset = mine == NULL;
}

static void *thread_main(void *arg) {
  (void)arg;
  CHECK(dt__cuda_thread_slots(&table, (void **)&mine) == mine && mine, "no slots");
  mine[3] = 7;
  CHECK(pthread_key_create(&check_key, check_after) == 0, "pthread_key_create");
  pthread_setspecific(check_key, &reset);
  return NULL;
}

int main(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, thread_main, NULL) == 0, "pthread_create");
  pthread_join(t, NULL);
  CHECK(reset == 1, "reset %d: the thread's pointer still points at its freed table", reset);
  for (int d = 0; d < DT__CUDA_MAX_DEVICES; d++)
    CHECK(released[d] == (d == 3 ? 100 : 1), "device %d's slot released %d", d, released[d]);
  return dt_test_result("test_cuda_thread_table");
}
