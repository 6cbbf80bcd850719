/* Failure behaviour of the threads backend: timeouts, aborts, ranks that leave early,
 * mismatched collectives and bad arguments. Every test ends in well under a second: the
 * timeouts used are 200 ms. */
#include <criterion/criterion.h>
#include <time.h>

#include "comm_helpers.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static bool mentions(const char *text, const char *part) { return strstr(text, part) != NULL; }

/* ---- timeouts --------------------------------------------------------------------------- */

static dt_status timeout_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  RANK_OK(dt_comm_set_timeout(comm, 200));
  RANK_CHECK(dt_comm_timeout(comm) == 200, "timeout");
  dt_tensor *t = NULL;
  RANK_OK(dt_ones(1, (int64_t[]){4}, DT_F32, &t));
  RANK_OK(dt_comm_all_reduce(comm, t, DT_REDUCE_SUM));
  if (rank == world - 1) {
    dt_tensor_release(t);
    /* Late: by the time it arrives the others have timed out and aborted the group. */
    sleep_ms(600);
    dt_status status = dt_comm_barrier(comm);
    RANK_CHECK(status == DT_ERR_ABORTED, "late rank got %s: %s", dt_status_string(status),
               dt_last_error());
    RANK_CHECK(mentions(dt_last_error(), "timed out"), "late rank message: %s", dt_last_error());
    return DT_OK;
  }
  dt_status status = dt_comm_all_reduce(comm, t, DT_REDUCE_SUM);
  dt_tensor_release(t);
  const char *msg = dt_last_error();
  RANK_CHECK(status == DT_ERR_TIMEOUT, "got %s: %s", dt_status_string(status), msg);
  char missing[32];
  snprintf(missing, sizeof missing, "rank %d", world - 1);
  RANK_CHECK(mentions(msg, "all_reduce") && mentions(msg, "sequence number 1") &&
                 mentions(msg, "'world'") && mentions(msg, missing) && mentions(msg, "200 ms"),
             "message: %s", msg);
  return DT_OK;
}

Test(failures, timeout_names_op_group_and_sequence) {
  SPAWN_OK(2, timeout_rank, NULL);
  SPAWN_OK(3, timeout_rank, NULL);
}

static dt_status env_timeout_rank(dt_comm *comm, void *arg) {
  (void)arg;
  RANK_CHECK(dt_comm_timeout(comm) == 150, "timeout from the environment: %lld",
             (long long)dt_comm_timeout(comm));
  if (dt_comm_rank(comm) == 1) {
    sleep_ms(400);
    return DT_OK;
  }
  dt_work *work = NULL;
  RANK_OK(dt_comm_barrier_async(comm, &work));
  dt_status status = dt_work_wait(work);
  RANK_CHECK(status == DT_ERR_TIMEOUT, "got %s: %s", dt_status_string(status), dt_last_error());
  /* A second wait replays the same result. */
  RANK_CHECK(dt_work_wait(work) == DT_ERR_TIMEOUT && mentions(dt_last_error(), "barrier"), "%s",
             dt_last_error());
  dt_work_destroy(work);
  return DT_OK;
}

Test(failures, timeout_from_environment_and_async) {
  setenv("DT_COMM_TIMEOUT_MS", "150", 1);
  SPAWN_OK(2, env_timeout_rank, NULL);
  unsetenv("DT_COMM_TIMEOUT_MS");
}

/* ---- aborts ------------------------------------------------------------------------------ */

static dt_status failing_rank(dt_comm *comm, void *arg) {
  int failing = *(int *)arg;
  int rank = dt_comm_rank(comm);
  dt_comm *half = NULL;
  RANK_OK(dt_comm_split(comm, rank % 2, rank, &half));
  if (rank == failing) {
    dt_comm_destroy(half);
    return dt__error(DT_ERR_INVALID, "the test's rank %d gives up", rank);
  }
  dt_tensor *t = NULL;
  RANK_OK(dt_ones(1, (int64_t[]){1000}, DT_F64, &t));
  /* Repeat until the abort arrives: whether a collective had started or not, it fails. */
  dt_status status = DT_OK;
  for (int i = 0; i < 1000 && status == DT_OK; i++) {
    status = i % 2 ? dt_comm_all_reduce(comm, t, DT_REDUCE_SUM)
                   : dt_comm_all_reduce(half, t, DT_REDUCE_MAX);
  }
  dt_tensor_release(t);
  dt_comm_destroy(half);
  RANK_CHECK(status == DT_ERR_ABORTED, "got %s: %s", dt_status_string(status), dt_last_error());
  char origin[64];
  snprintf(origin, sizeof origin, "rank %d failed", failing);
  RANK_CHECK(mentions(dt_last_error(), origin) && mentions(dt_last_error(), "gives up"), "%s",
             dt_last_error());
  return DT_OK;
}

Test(failures, failing_rank_aborts_peers) {
  int failing = 2;
  dt_status status = dt_comm_spawn(4, failing_rank, &failing);
  cr_assert_eq(status, DT_ERR_INVALID, "%s", dt_last_error());
  cr_assert(mentions(dt_last_error(), "rank 2: the test's rank 2 gives up"), "%s", dt_last_error());
  failing = 0;
  cr_assert_eq(dt_comm_spawn(3, failing_rank, &failing), DT_ERR_INVALID, "%s", dt_last_error());
}

/* A rank function that fails without setting an error message still gets a reason. */
static dt_status silent_failing_rank(dt_comm *comm, void *arg) {
  (void)arg;
  return dt_comm_rank(comm) == 1 ? DT_ERR_INVALID : DT_OK;
}

Test(failures, silent_failing_rank_gets_a_reason) {
  cr_assert_eq(dt_comm_spawn(2, silent_failing_rank, NULL), DT_ERR_INVALID);
  cr_assert(mentions(dt_last_error(), "rank 1: its function returned") &&
                mentions(dt_last_error(), "without an error message"),
            "%s", dt_last_error());
}

static dt_status abort_call_rank(dt_comm *comm, void *arg) {
  (void)arg;
  if (dt_comm_rank(comm) == 0) {
    sleep_ms(20);
    dt_comm_abort(comm, "the test says stop");
    return DT_OK;
  }
  dt_status status = dt_comm_barrier(comm);
  RANK_CHECK(status == DT_ERR_ABORTED && mentions(dt_last_error(), "the test says stop") &&
                 mentions(dt_last_error(), "barrier"),
             "got %s: %s", dt_status_string(status), dt_last_error());
  status = dt_comm_barrier(comm);
  RANK_CHECK(status == DT_ERR_ABORTED, "later collectives fail too");
  return DT_OK;
}

Test(failures, dt_comm_abort_reaches_everyone) { SPAWN_OK(3, abort_call_rank, NULL); }

static dt_status early_exit_rank(dt_comm *comm, void *arg) {
  (void)arg;
  if (dt_comm_rank(comm) == 1) return DT_OK; /* leaves without joining the barrier */
  dt_status status = dt_comm_barrier(comm);
  RANK_CHECK(status == DT_ERR_ABORTED && mentions(dt_last_error(), "rank 1 returned"), "got %s: %s",
             dt_status_string(status), dt_last_error());
  return DT_OK;
}

Test(failures, rank_that_returns_early_does_not_hang_peers) { SPAWN_OK(3, early_exit_rank, NULL); }

/* ---- mismatches ---------------------------------------------------------------------------- */

static dt_status mismatch_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm);
  dt_tensor *t = NULL;
  RANK_OK(dt_zeros(1, (int64_t[]){rank == 0 ? 4 : 8}, DT_F32, &t));
  dt_status status = dt_comm_all_reduce(comm, t, DT_REDUCE_SUM);
  const char *msg = dt_last_error();
  RANK_CHECK(status == DT_ERR_MISMATCH, "got %s: %s", dt_status_string(status), msg);
  RANK_CHECK(mentions(msg, "rank 0 called all_reduce(float32, count=4, op=sum)") &&
                 mentions(msg, "rank 1 called all_reduce(float32, count=8, op=sum)") &&
                 mentions(msg, "sequence number 0"),
             "message: %s", msg);
  /* Different collectives at the same point. */
  status = rank == 0 ? dt_comm_broadcast(comm, t, 0) : dt_comm_all_reduce(comm, t, DT_REDUCE_MAX);
  msg = dt_last_error();
  RANK_CHECK(status == DT_ERR_MISMATCH && mentions(msg, "rank 0 called broadcast") &&
                 mentions(msg, "rank 1 called all_reduce"),
             "got %s: %s", dt_status_string(status), msg);
  /* all_to_all counts that do not pair up. */
  dt_tensor *in = NULL, *out = NULL;
  RANK_OK(dt_zeros(1, (int64_t[]){3}, DT_F32, &in));
  RANK_OK(dt_zeros(1, (int64_t[]){3}, DT_F32, &out));
  int64_t send[2] = {1, 2}, recv[2] = {rank == 0 ? 1 : 2, rank == 0 ? 2 : 1};
  status = dt_comm_all_to_all(comm, in, out, send, recv);
  RANK_CHECK(status == DT_ERR_MISMATCH && mentions(dt_last_error(), "rows to rank"), "got %s: %s",
             dt_status_string(status), dt_last_error());
  /* send/recv of different sizes. */
  if (rank == 0) {
    status = dt_comm_send(comm, in, 1);
  } else {
    status = dt_comm_recv(comm, t, 0);
  }
  RANK_CHECK(status == DT_ERR_MISMATCH && mentions(dt_last_error(), "send/recv mismatch"),
             "got %s: %s", dt_status_string(status), dt_last_error());
  /* The group stays in step afterwards. */
  RANK_OK(dt_comm_barrier(comm));
  dt_tensor_release(in);
  dt_tensor_release(out);
  dt_tensor_release(t);
  return DT_OK;
}

Test(failures, mismatch_names_every_rank) {
  setenv("DT_DEBUG_COLLECTIVES", "1", 1);
  SPAWN_OK(2, mismatch_rank, NULL);
  unsetenv("DT_DEBUG_COLLECTIVES");
}

/* ---- bad arguments fail alone, before any communication ---------------------------------- */

#define EXPECT_FAIL(call, status, part)                                                            \
  do {                                                                                             \
    dt_status expect_status_ = (call);                                                             \
    RANK_CHECK(expect_status_ == (status) && mentions(dt_last_error(), part), "%s gave %s: %s",    \
               #call, dt_status_string(expect_status_), dt_last_error());                          \
  } while (0)

static dt_status noop_rank(dt_comm *comm, void *arg) {
  (void)comm;
  (void)arg;
  return DT_OK;
}

static dt_status bad_args_then_valid_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm);
  dt_tensor *t = NULL, *big = NULL, *i32 = NULL, *m = NULL, *mt = NULL, *wrong = NULL;
  RANK_OK(dt_zeros(1, (int64_t[]){4}, DT_F32, &t));
  RANK_OK(dt_zeros(1, (int64_t[]){8}, DT_F32, &big));
  RANK_OK(dt_zeros(1, (int64_t[]){4}, DT_I32, &i32));
  RANK_OK(dt_zeros(2, (int64_t[]){3, 4}, DT_F32, &m));
  RANK_OK(dt_transpose(m, 0, 1, &mt));
  RANK_OK(dt_zeros(1, (int64_t[]){7}, DT_F32, &wrong));
  if (rank == 0) {
    int64_t bad_counts[2] = {3, 4}, negative[2] = {-1, 9}, fine[2] = {4, 4};
    dt_work *work = NULL;
    dt_objects *objects = NULL;
    EXPECT_FAIL(dt_comm_all_reduce(NULL, t, DT_REDUCE_SUM), DT_ERR_INVALID,
                "all_reduce: comm is NULL");
    EXPECT_FAIL(dt_comm_all_reduce(comm, NULL, DT_REDUCE_SUM), DT_ERR_INVALID, "tensor is NULL");
    EXPECT_FAIL(dt_comm_all_reduce(comm, mt, DT_REDUCE_SUM), DT_ERR_INVALID, "contiguous");
    EXPECT_FAIL(dt_comm_all_reduce(comm, i32, DT_REDUCE_AVG), DT_ERR_DTYPE, "avg");
    EXPECT_FAIL(dt_comm_all_reduce(comm, t, (dt_reduce_op)17), DT_ERR_INVALID, "op 17");
    EXPECT_FAIL(dt_comm_all_reduce_async(comm, t, DT_REDUCE_SUM, NULL), DT_ERR_INVALID, "work");
    EXPECT_FAIL(dt_comm_all_gather_into_tensor(comm, t, wrong), DT_ERR_INVALID,
                "out has shape [7]");
    EXPECT_FAIL(dt_comm_all_gather_into_tensor(comm, t, t), DT_ERR_INVALID, "expected [8]");
    EXPECT_FAIL(dt_comm_all_gather_into_tensor(comm, i32, big), DT_ERR_DTYPE, "int32");
    EXPECT_FAIL(dt_comm_all_gather_into_tensor(comm, mt, big), DT_ERR_INVALID,
                "in must be contiguous");
    dt_tensor *overlap = narrow_rows(big, 2, 4); /* overlaps big but is not rank 0's slice */
    EXPECT_FAIL(dt_comm_all_gather_into_tensor(comm, overlap, big), DT_ERR_INVALID, "overlaps");
    dt_tensor_release(overlap);
    EXPECT_FAIL(dt_comm_all_gather_uneven(comm, t, big, NULL), DT_ERR_INVALID, "counts is NULL");
    EXPECT_FAIL(dt_comm_all_gather_uneven(comm, t, big, bad_counts), DT_ERR_INVALID,
                "counts[0] is 3");
    EXPECT_FAIL(dt_comm_all_gather_uneven(comm, t, big, negative), DT_ERR_INVALID,
                "counts[0] is -1");
    EXPECT_FAIL(dt_comm_all_gather_uneven(comm, t, wrong, fine), DT_ERR_INVALID, "sum of counts");
    EXPECT_FAIL(dt_comm_reduce_scatter_tensor(comm, wrong, t, DT_REDUCE_SUM), DT_ERR_INVALID,
                "in has shape [7]");
    EXPECT_FAIL(dt_comm_reduce_scatter_tensor(comm, big, i32, DT_REDUCE_SUM), DT_ERR_DTYPE,
                "reduce_scatter_tensor");
    EXPECT_FAIL(dt_comm_reduce_scatter_uneven(comm, big, wrong, fine, DT_REDUCE_SUM),
                DT_ERR_INVALID, "counts[rank]");
    EXPECT_FAIL(dt_comm_all_to_all(comm, wrong, wrong, NULL, NULL), DT_ERR_INVALID,
                "not divisible");
    EXPECT_FAIL(dt_comm_all_to_all(comm, t, big, fine, NULL), DT_ERR_INVALID,
                "recv_counts is NULL");
    EXPECT_FAIL(dt_comm_all_to_all(comm, t, big, fine, fine), DT_ERR_INVALID, "sum of send_counts");
    EXPECT_FAIL(dt_comm_all_to_all(comm, big, big, NULL, NULL), DT_ERR_INVALID, "overlap");
    EXPECT_FAIL(dt_comm_broadcast(comm, t, 2), DT_ERR_INVALID,
                "root 2 is out of range for a group of 2");
    EXPECT_FAIL(dt_comm_broadcast(comm, t, -1), DT_ERR_INVALID, "root -1");
    EXPECT_FAIL(dt_comm_scatter(comm, NULL, t, 0), DT_ERR_INVALID, "in (on the root) is NULL");
    EXPECT_FAIL(dt_comm_scatter(comm, wrong, t, 0), DT_ERR_INVALID, "in has shape [7]");
    EXPECT_FAIL(dt_comm_gather(comm, t, NULL, 0), DT_ERR_INVALID, "out (on the root) is NULL");
    EXPECT_FAIL(dt_comm_gather(comm, t, t, 5), DT_ERR_INVALID, "root 5");
    EXPECT_FAIL(dt_comm_send(comm, t, 0), DT_ERR_INVALID, "cannot send to itself");
    EXPECT_FAIL(dt_comm_recv(comm, t, 3), DT_ERR_INVALID, "src 3");
    EXPECT_FAIL(dt_comm_send_async(comm, t, 1, NULL), DT_ERR_INVALID, "work is NULL");
    EXPECT_FAIL(dt_comm_barrier_async(comm, NULL), DT_ERR_INVALID, "work is NULL");
    EXPECT_FAIL(dt_comm_all_gather_object(comm, NULL, 3, &objects), DT_ERR_INVALID, "data is NULL");
    EXPECT_FAIL(dt_comm_all_gather_object(comm, "x", 1, NULL), DT_ERR_INVALID, "out is NULL");
    EXPECT_FAIL(dt_work_wait(NULL), DT_ERR_INVALID, "work is NULL");
    EXPECT_FAIL(dt_work_test(NULL, NULL), DT_ERR_INVALID, "work is NULL");
    EXPECT_FAIL(dt_comm_set_timeout(comm, 0), DT_ERR_INVALID, "timeout_ms is 0");
    EXPECT_FAIL(dt_comm_split(comm, 0, 0, NULL), DT_ERR_INVALID, "out is NULL");
    RANK_CHECK(work == NULL && objects == NULL, "outputs stay NULL");
  }
  /* None of the above communicated: both ranks are still at sequence number 0. */
  RANK_OK(dt_comm_all_reduce(comm, t, DT_REDUCE_SUM));
  RANK_OK(dt_comm_all_gather_into_tensor(comm, t, big));
  dt_tensor_release(t);
  dt_tensor_release(big);
  dt_tensor_release(i32);
  dt_tensor_release(m);
  dt_tensor_release(mt);
  dt_tensor_release(wrong);
  return DT_OK;
}

Test(failures, bad_arguments_fail_alone) { SPAWN_OK(2, bad_args_then_valid_rank, NULL); }

Test(failures, bad_spawn_and_init) {
  cr_assert_eq(dt_comm_spawn(0, noop_rank, NULL), DT_ERR_INVALID);
  cr_assert(mentions(dt_last_error(), "world_size is 0"), "%s", dt_last_error());
  cr_assert_eq(dt_comm_spawn(DT_COMM_MAX_THREADS + 1, noop_rank, NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_comm_spawn(2, NULL, NULL), DT_ERR_INVALID);
  dt_comm *comm = (dt_comm *)1;
#ifndef DT_HAVE_MPI
  /* With MPI built in, "mpi" works (tests/mpi/ runs it under mpirun, not here). */
  cr_assert_eq(dt_comm_init(&(dt_comm_options){.backend = "mpi"}, &comm), DT_ERR_UNSUPPORTED);
  cr_assert_null(comm);
  cr_assert(mentions(dt_last_error(), "mpi"), "%s", dt_last_error());
#endif
  cr_assert_eq(dt_comm_init(&(dt_comm_options){.backend = "gloo"}, &comm), DT_ERR_INVALID);
  cr_assert(mentions(dt_last_error(), "unknown backend \"gloo\""), "%s", dt_last_error());
#ifndef DT_HAVE_NCCL
  /* "nccl" is a backend this build leaves out: said so, with how to build it. */
  cr_assert_eq(dt_comm_init(&(dt_comm_options){.backend = "nccl"}, &comm), DT_ERR_UNSUPPORTED);
  cr_assert_null(comm);
  cr_assert(mentions(dt_last_error(), "DT_WITH_CUDA=ON"), "%s", dt_last_error());
  cr_assert_eq(dt_comm_nccl_create(NULL, -1, &comm), DT_ERR_UNSUPPORTED);
  cr_assert(mentions(dt_last_error(), "no NCCL backend"), "%s", dt_last_error());
#endif
  cr_assert_eq(
      dt_comm_init(&(dt_comm_options){.backend = "fake", .rank = 4, .world_size = 4}, &comm),
      DT_ERR_INVALID);
  cr_assert(mentions(dt_last_error(), "fake rank 4"), "%s", dt_last_error());
  cr_assert_eq(dt_comm_init(&(dt_comm_options){.backend = "threads", .world_size = 2}, &comm),
               DT_ERR_INVALID);
  cr_assert(mentions(dt_last_error(), "dt_comm_spawn"), "%s", dt_last_error());
  cr_assert_eq(dt_comm_init(NULL, NULL), DT_ERR_INVALID);
#ifndef DT_HAVE_MPI
  setenv("DT_BACKEND", "mpi", 1);
  cr_assert_eq(dt_comm_init(NULL, &comm), DT_ERR_UNSUPPORTED);
#else
  setenv("DT_BACKEND", "bogus", 1);
  cr_assert_eq(dt_comm_init(NULL, &comm), DT_ERR_INVALID);
  cr_assert(mentions(dt_last_error(), "DT_BACKEND"), "%s", dt_last_error());
#endif
  unsetenv("DT_BACKEND");
}
