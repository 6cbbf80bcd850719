/* The fake backend: one process as rank r of W. Collectives validate against W and complete
 * at once, leaving outputs untouched. */
#include <criterion/criterion.h>

#include "comm_helpers.h"
#include "log_capture.h"

static dt_comm *fake(int rank, int world) {
  dt_comm *comm = NULL;
  dt_status status =
      dt_comm_init(&(dt_comm_options){.backend = "fake", .rank = rank, .world_size = world}, &comm);
  cr_assert_eq(status, DT_OK, "%s", dt_last_error());
  return comm;
}

static void every_collective(dt_comm *comm) {
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  dt_tensor *t = NULL, *in = NULL, *out = NULL, *big = NULL;
  cr_assert_eq(dt_full(1, (int64_t[]){4}, 7, DT_BF16, &t), DT_OK);
  cr_assert_eq(dt_full(2, (int64_t[]){2, 3}, 7, DT_F32, &in), DT_OK);
  cr_assert_eq(dt_full(2, (int64_t[]){2 * (int64_t)world, 3}, 5, DT_F32, &big), DT_OK);
  cr_assert_eq(dt_full(2, (int64_t[]){2, 3}, 5, DT_F32, &out), DT_OK);
  int64_t *counts = calloc((size_t)world, sizeof *counts);
  counts[rank] = 2;
  int64_t *sends = calloc((size_t)world, sizeof *sends),
          *recvs = calloc((size_t)world, sizeof *recvs);
  sends[(rank + 1) % world] = 2;
  recvs[(rank + world - 1) % world] = 2;

  cr_assert_eq(dt_comm_all_reduce(comm, t, DT_REDUCE_SUM), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_all_gather_into_tensor(comm, in, big), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_all_gather_uneven(comm, in, out, counts), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_reduce_scatter_tensor(comm, big, out, DT_REDUCE_AVG), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(dt_comm_reduce_scatter_uneven(comm, in, out, counts, DT_REDUCE_MAX), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(dt_comm_all_to_all(comm, in, out, sends, recvs), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_broadcast(comm, t, world - 1), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_scatter(comm, big, out, 0), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_gather(comm, in, big, 0), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_barrier(comm), DT_OK, "%s", dt_last_error());
  if (world > 1) {
    cr_assert_eq(dt_comm_send(comm, t, (rank + 1) % world), DT_OK, "%s", dt_last_error());
    cr_assert_eq(dt_comm_recv(comm, t, (rank + 1) % world), DT_OK, "%s", dt_last_error());
  }
  dt_work *work = NULL;
  cr_assert_eq(dt_comm_all_reduce_async(comm, t, DT_REDUCE_PROD, &work), DT_OK);
  bool done = false;
  cr_assert_eq(dt_work_test(work, &done), DT_OK);
  cr_assert(done);
  cr_assert_eq(dt_work_wait(work), DT_OK);
  dt_work_destroy(work);
  /* Outputs keep their contents: nothing moved. */
  cr_assert_eq(((float *)dt_tensor_data(out))[5], 5);
  cr_assert_eq(((float *)dt_tensor_data(big))[0], 5);
  cr_assert_eq(dt_bf16_to_f32(((uint16_t *)dt_tensor_data(t))[0]), 7);

  /* Validation still applies against the simulated world. */
  cr_assert_eq(dt_comm_all_gather_into_tensor(comm, in, out), world == 1 ? DT_OK : DT_ERR_INVALID);
  cr_assert_eq(dt_comm_broadcast(comm, t, world), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "out of range") != NULL, "%s", dt_last_error());

  dt_objects *objects = NULL;
  cr_assert_eq(dt_comm_all_gather_object(comm, "abc", 3, &objects), DT_OK);
  cr_assert_eq(objects->count, world);
  cr_assert_eq(objects->lengths[world - 1], 3);
  cr_assert(memcmp(objects->data + objects->offsets[world - 1], "abc", 3) == 0);
  dt_free(objects);

  dt_comm *sub = NULL;
  cr_assert_eq(dt_comm_split(comm, 3, 0, &sub), DT_OK);
  cr_assert_eq(dt_comm_size(sub), world);
  cr_assert_eq(dt_comm_rank(sub), rank);
  dt_comm_destroy(sub);
  cr_assert_eq(dt_comm_split(comm, -1, 0, &sub), DT_OK);
  cr_assert_null(sub);
  dt_comm_abort(comm, "ignored by fake");

  free(counts);
  free(sends);
  free(recvs);
  dt_tensor_release(t);
  dt_tensor_release(in);
  dt_tensor_release(out);
  dt_tensor_release(big);
}

Test(fake, every_collective_at_1_256_and_4096) {
  int worlds[] = {1, 256, 4096};
  for (int i = 0; i < 3; i++) {
    dt_comm *comm = fake(worlds[i] / 2, worlds[i]);
    cr_assert_str_eq(dt_comm_backend_name(comm), "fake");
    cr_assert_eq(dt_comm_size(comm), worlds[i]);
    cr_assert_eq(dt_comm_rank(comm), worlds[i] / 2);
    every_collective(comm);
    dt_comm_destroy(comm);
  }
}

Test(fake, chosen_by_environment) {
  setenv("DT_BACKEND", "fake", 1);
  setenv("DT_FAKE_WORLD", "256", 1);
  setenv("DT_FAKE_RANK", "17", 1);
  dt_comm *comm = NULL;
  cr_assert_eq(dt_comm_init(NULL, &comm), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_size(comm), 256);
  cr_assert_eq(dt_comm_rank(comm), 17);
  cr_assert_eq(dt_comm_timeout(comm), DT_COMM_DEFAULT_TIMEOUT_MS);
  dt_comm_destroy(comm);
  unsetenv("DT_BACKEND");
  unsetenv("DT_FAKE_WORLD");
  unsetenv("DT_FAKE_RANK");
}

/* A bad DT_FAKE_WORLD / DT_FAKE_RANK is refused by dt_comm_init (a public init), naming the
 * variable and its value; a bad DT_COMM_TIMEOUT_MS is reported through the log callback and the
 * default timeout applies. */
Test(fake, bad_environment_values) {
  setenv("DT_BACKEND", "fake", 1);
  dt_comm *comm = NULL;
  const char *worlds[] = {"abc", "0", "-3", "4x", "99999999999"};
  for (int i = 0; i < 5; i++) {
    setenv("DT_FAKE_WORLD", worlds[i], 1);
    cr_assert_eq(dt_comm_init(NULL, &comm), DT_ERR_INVALID, "DT_FAKE_WORLD=%s", worlds[i]);
    cr_assert_null(comm);
    cr_assert(strstr(dt_last_error(), "DT_FAKE_WORLD") && strstr(dt_last_error(), worlds[i]), "%s",
              dt_last_error());
  }
  setenv("DT_FAKE_WORLD", "4", 1);
  const char *ranks[] = {"x", "4", "-1", "1.5"};
  for (int i = 0; i < 4; i++) {
    setenv("DT_FAKE_RANK", ranks[i], 1);
    cr_assert_eq(dt_comm_init(NULL, &comm), DT_ERR_INVALID, "DT_FAKE_RANK=%s", ranks[i]);
    cr_assert(strstr(dt_last_error(), "DT_FAKE_RANK") && strstr(dt_last_error(), ranks[i]), "%s",
              dt_last_error());
  }
  setenv("DT_FAKE_RANK", "3", 1);
  setenv("DT_COMM_TIMEOUT_MS", "5s", 1);
  log_capture_start();
  warnings = 0;
  cr_assert_eq(dt_comm_init(NULL, &comm), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_rank(comm), 3);
  cr_assert_eq(dt_comm_timeout(comm), DT_COMM_DEFAULT_TIMEOUT_MS);
  cr_assert_eq(warnings, 1);
  cr_assert(strstr(last_warning, "DT_COMM_TIMEOUT_MS=\"5s\" is not an integer >= 1"), "%s",
            last_warning);
  log_capture_stop();
  dt_comm_destroy(comm);
  unsetenv("DT_BACKEND");
  unsetenv("DT_FAKE_WORLD");
  unsetenv("DT_FAKE_RANK");
  unsetenv("DT_COMM_TIMEOUT_MS");
}

/* The call path allocates nothing once warm: count allocator calls over many collectives. */
static int allocations;
static void *counting_alloc(size_t size, size_t alignment, void *user) {
  (void)user;
  allocations++;
  void *p = NULL;
  return posix_memalign(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment,
                        size ? size : 1)
             ? NULL
             : p;
}
static void counting_free(void *p, void *user) {
  (void)user;
  free(p);
}

Test(fake, no_allocation_per_call) {
  dt_set_allocator(&(dt_allocator){counting_alloc, counting_free, NULL});
  dt_comm *comm = fake(3, 256);
  dt_tensor *t = NULL;
  cr_assert_eq(dt_zeros(1, (int64_t[]){1024}, DT_F32, &t), DT_OK);
  dt_work *work = NULL;
  cr_assert_eq(dt_comm_all_reduce_async(comm, t, DT_REDUCE_SUM, &work), DT_OK);
  dt_work_destroy(work);
  int before = allocations;
  for (int i = 0; i < 10000; i++) {
    cr_assert_eq(dt_comm_all_reduce(comm, t, DT_REDUCE_SUM), DT_OK);
    cr_assert_eq(dt_comm_all_reduce_async(comm, t, DT_REDUCE_SUM, &work), DT_OK);
    dt_work_destroy(work);
  }
  cr_assert_eq(allocations, before);
  dt_tensor_release(t);
  dt_comm_destroy(comm);
  dt_set_allocator(NULL);
}

/* Per-rank counts are checked entry by entry: a negative count, or one so large that a sum over
 * the world could wrap around, is refused naming its rank, wherever it sits among valid ones. */
Test(fake, bad_counts_are_named) {
  enum { WORLD = 256 };
  dt_comm *comm = fake(3, WORLD);
  dt_tensor *in = NULL, *out = NULL;
  cr_assert_eq(dt_full(2, (int64_t[]){2, 3}, 7, DT_F32, &in), DT_OK);
  cr_assert_eq(dt_full(2, (int64_t[]){2, 3}, 5, DT_F32, &out), DT_OK);
  int64_t counts[WORLD] = {0}, recvs[WORLD] = {0};
  counts[3] = 2;
  recvs[0] = 2;
  cr_assert_eq(dt_comm_all_to_all(comm, in, out, counts, recvs), DT_OK, "%s", dt_last_error());
  counts[200] = -1;
  cr_assert_eq(dt_comm_all_gather_uneven(comm, in, out, counts), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "counts[200] is -1") != NULL, "%s", dt_last_error());
  counts[200] = 0;
  recvs[255] = (int64_t)1 << 61; /* above INT64_MAX / 2 / DT_COMM_MAX_WORLD */
  cr_assert_eq(dt_comm_all_to_all(comm, in, out, counts, recvs), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "[255] is 2305843009213693952") != NULL, "%s", dt_last_error());
  recvs[255] = (int64_t)(INT64_MAX / 2 / DT_COMM_MAX_WORLD); /* the largest valid count */
  recvs[0] = 0;
  cr_assert_eq(dt_comm_all_to_all(comm, in, out, counts, recvs), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "[255]") == NULL, "%s: a valid count was named",
            dt_last_error());
  dt_tensor_release(in);
  dt_tensor_release(out);
  dt_comm_destroy(comm);
}
