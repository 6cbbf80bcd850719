/* Asynchronous work handles and sub-groups (dt_comm_split) on the threads backend. */
#include <criterion/criterion.h>

#include "comm_helpers.h"

static dt_status async_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  enum { N = 40 }; /* more than a group keeps in flight: older works complete on demand */
  dt_tensor *t[N];
  dt_work *w[N];
  for (int i = 0; i < N; i++) {
    RANK_OK(dt_full(1, (int64_t[]){5 + i}, rank + i, DT_F32, &t[i]));
    RANK_OK(dt_comm_all_reduce_async(comm, t[i], DT_REDUCE_SUM, &w[i]));
  }
  /* Gather asynchronously too, then wait in reverse order, polling some with test first. */
  dt_tensor *in = NULL, *out = NULL;
  RANK_OK(dt_full(1, (int64_t[]){2}, rank, DT_I64, &in));
  RANK_OK(dt_zeros(1, (int64_t[]){2 * world}, DT_I64, &out));
  dt_work *gather = NULL;
  RANK_OK(dt_comm_all_gather_into_tensor_async(comm, in, out, &gather));
  bool done = false;
  while (!done) RANK_OK(dt_work_test(gather, &done));
  RANK_OK(dt_work_wait(gather));
  dt_work_destroy(gather);
  for (int r = 0; r < world; r++) {
    RANK_CHECK(((int64_t *)dt_tensor_data(out))[2 * r + 1] == r, "gathered value of rank %d", r);
  }
  for (int i = N - 1; i >= 0; i--) {
    RANK_OK(dt_work_wait(w[i]));
    RANK_OK(dt_work_test(w[i], &done));
    RANK_CHECK(done, "a waited work tests done");
    float expected = (float)(world * (world - 1) / 2 + world * i);
    float *p = dt_tensor_data(t[i]);
    RANK_CHECK(p[0] == expected && p[4 + i] == expected, "tensor %d: %g, expected %g", i, p[0],
               expected);
    dt_work_destroy(w[i]);
    dt_tensor_release(t[i]);
  }
  /* Released without a wait: release waits. */
  dt_work *unwaited = NULL;
  RANK_OK(dt_comm_barrier_async(comm, &unwaited));
  dt_work_destroy(unwaited);
  dt_tensor_release(in);
  dt_tensor_release(out);
  return DT_OK;
}

Test(async, many_in_flight_any_order) {
  int worlds[] = {1, 2, 3, 8};
  for (int i = 0; i < 4; i++) SPAWN_OK(worlds[i], async_rank, NULL);
}

/* Rank 0 starts a collective and, before waiting for it, blocks on a message that rank 1
 * sends only after finishing the same collective synchronously. Rank 1 must be able to do
 * rank 0's share of the work. */
static dt_status skew_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm);
  dt_tensor *big = NULL, *token = NULL;
  RANK_OK(dt_full(1, (int64_t[]){1 << 20}, rank + 1, DT_F32, &big));
  RANK_OK(dt_zeros(0, (int64_t[]){1}, DT_I32, &token));
  if (rank == 0) {
    dt_work *work = NULL;
    RANK_OK(dt_comm_all_reduce_async(comm, big, DT_REDUCE_SUM, &work));
    RANK_OK(dt_comm_recv(comm, token, 1));
    RANK_OK(dt_work_wait(work));
    dt_work_destroy(work);
  } else {
    RANK_OK(dt_comm_all_reduce(comm, big, DT_REDUCE_SUM));
    RANK_OK(dt_comm_send(comm, token, 0));
  }
  float *p = dt_tensor_data(big);
  RANK_CHECK(p[0] == 3 && p[(1 << 20) - 1] == 3, "sum %g", p[0]);
  dt_tensor_release(big);
  dt_tensor_release(token);
  return DT_OK;
}

Test(async, peers_do_the_share_of_a_rank_that_went_on) { SPAWN_OK(2, skew_rank, NULL); }

/* ---- split ----------------------------------------------------------------------------- */

static dt_status split_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  /* Two colors by parity, ordered by descending world rank; rank 3 opts out. */
  dt_comm *sub = NULL;
  int color = rank == 3 ? -1 : rank % 2;
  RANK_OK(dt_comm_split(comm, color, -rank, &sub));
  if (color < 0) {
    RANK_CHECK(sub == NULL, "opted-out rank gets no group");
  } else {
    int members = 0, position = 0;
    for (int r = 0; r < world; r++) {
      if (r == 3 || r % 2 != color) continue;
      members++;
      if (r > rank) position++;
    }
    RANK_CHECK(dt_comm_size(sub) == members && dt_comm_rank(sub) == position,
               "size %d rank %d, expected %d %d", dt_comm_size(sub), dt_comm_rank(sub), members,
               position);
    RANK_CHECK(strcmp(dt_comm_backend_name(sub), "threads") == 0, "backend");
    RANK_CHECK(dt_comm_id(sub) != dt_comm_id(comm), "a new id");
    /* The group works and only sums its own members. */
    dt_tensor *t = NULL;
    RANK_OK(dt_full(1, (int64_t[]){3}, rank, DT_I64, &t));
    RANK_OK(dt_comm_all_reduce(sub, t, DT_REDUCE_SUM));
    int64_t expected = 0;
    for (int r = 0; r < world; r++) {
      if (r != 3 && r % 2 == color) expected += r;
    }
    RANK_CHECK(((int64_t *)dt_tensor_data(t))[2] == expected, "sub-group sum");
    /* Splitting a split works the same way; interleave with the parent group. */
    dt_comm *single = NULL;
    RANK_OK(dt_comm_split(sub, dt_comm_rank(sub), 0, &single));
    RANK_CHECK(dt_comm_size(single) == 1, "singleton");
    RANK_OK(dt_comm_all_reduce(single, t, DT_REDUCE_SUM));
    dt_comm_destroy(single);
    dt_tensor_release(t);
  }
  RANK_OK(dt_comm_barrier(comm));
  if (sub) {
    /* Ids agree across members: gather them. */
    uint64_t id = dt_comm_id(sub);
    dt_objects *ids = NULL;
    RANK_OK(dt_comm_all_gather_object(sub, &id, sizeof id, &ids));
    for (int r = 0; r < ids->count; r++) {
      RANK_CHECK(memcmp(ids->data + ids->offsets[r], &id, sizeof id) == 0, "same id");
    }
    dt_free(ids);
  }
  dt_comm_destroy(sub);
  dt_comm_destroy(comm); /* ignored: dt_comm_spawn owns the world */
  return DT_OK;
}

Test(split, colors_keys_and_nesting) {
  int worlds[] = {1, 2, 3, 4, 8};
  for (int i = 0; i < 5; i++) SPAWN_OK(worlds[i], split_rank, NULL);
}

/* One color for everyone: a copy of the world, usable beside it. */
static dt_status same_color_rank(dt_comm *comm, void *arg) {
  (void)arg;
  dt_comm *copy = NULL;
  RANK_OK(dt_comm_split(comm, 0, 0, &copy));
  RANK_CHECK(dt_comm_size(copy) == dt_comm_size(comm) && dt_comm_rank(copy) == dt_comm_rank(comm),
             "same layout");
  dt_work *a = NULL, *b = NULL;
  RANK_OK(dt_comm_barrier_async(copy, &a));
  RANK_OK(dt_comm_barrier_async(comm, &b));
  RANK_OK(dt_work_wait(b));
  RANK_OK(dt_work_wait(a));
  dt_work_destroy(a);
  dt_work_destroy(b);
  dt_comm_destroy(copy);
  return DT_OK;
}

Test(split, one_color_copies_the_group) { SPAWN_OK(4, same_color_rank, NULL); }

Test(init, threads_single_rank_world) {
  dt_comm *comm = NULL;
  cr_assert_eq(dt_comm_init(&(dt_comm_options){.backend = "threads", .timeout_ms = 1234}, &comm),
               DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_size(comm), 1);
  cr_assert_eq(dt_comm_rank(comm), 0);
  cr_assert_eq(dt_comm_timeout(comm), 1234);
  cr_assert_str_eq(dt_comm_name(comm), "world");
  dt_comm_set_name(comm, "solo");
  cr_assert_str_eq(dt_comm_name(comm), "solo");
  dt_tensor *t = NULL;
  cr_assert_eq(dt_full(1, (int64_t[]){3}, 2, DT_F32, &t), DT_OK);
  cr_assert_eq(dt_comm_all_reduce(comm, t, DT_REDUCE_AVG), DT_OK, "%s", dt_last_error());
  cr_assert_eq(((float *)dt_tensor_data(t))[1], 2);
  dt_work *work = NULL;
  cr_assert_eq(dt_comm_broadcast_async(comm, t, 0, &work), DT_OK);
  cr_assert_eq(dt_work_wait(work), DT_OK);
  dt_work_destroy(work);
  dt_comm *copy = NULL;
  cr_assert_eq(dt_comm_split(comm, 7, 0, &copy), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_comm_size(copy), 1);
  dt_comm_destroy(copy);
  dt_tensor_release(t);
  dt_comm_destroy(comm);
  dt_comm_destroy(NULL);
  dt_work_destroy(NULL);
}
