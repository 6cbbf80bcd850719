/* Every collective on the threads backend, worlds of 1, 2, 3, 4 and 8 ranks, every dtype,
 * against references computed here from the values every rank is known to hold. */
#include <criterion/criterion.h>

#include "comm_helpers.h"

static const int worlds[] = {1, 2, 3, 4, 8};
#define N_WORLDS ((int)(sizeof worlds / sizeof worlds[0]))

static double combine(dt_reduce_op op, dt_dtype dtype, double a, double b) {
  switch (op) {
  case DT_REDUCE_SUM:
  case DT_REDUCE_AVG: return dtype == DT_BOOL ? (a != 0 || b != 0) : a + b;
  case DT_REDUCE_PROD: return dtype == DT_BOOL ? (a != 0 && b != 0) : a * b;
  case DT_REDUCE_MAX: return a > b ? a : b;
  case DT_REDUCE_MIN: return a < b ? a : b;
  }
  return 0;
}

/* The reduction over ranks of element i (i counted in the reduced tensor). */
static double reduced(dt_dtype dtype, dt_reduce_op op, int world, int64_t i) {
  double acc = test_value(dtype, op, 0, i);
  for (int r = 1; r < world; r++) acc = combine(op, dtype, acc, test_value(dtype, op, r, i));
  if (op == DT_REDUCE_AVG) acc /= world;
  if (dtype == DT_U8) acc = (double)((int64_t)acc & 0xff);
  return acc;
}

/* ---- all_reduce ------------------------------------------------------------------------- */

static dt_status all_reduce_rank(dt_comm *comm, void *arg) {
  int64_t numel = *(int64_t *)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX, DT_REDUCE_MIN,
                                     DT_REDUCE_PROD};
  double *expected = malloc(sizeof *expected * (size_t)numel);
  for (int di = 0; di < N_DTYPES; di++) {
    dt_dtype dtype = all_dtypes[di];
    for (int oi = 0; oi < 5; oi++) {
      dt_reduce_op op = ops[oi];
      if (op == DT_REDUCE_AVG && !dt_dtype_is_floating(dtype)) continue;
      int64_t shape[] = {numel};
      dt_tensor *t = test_tensor(1, shape, dtype, op, rank);
      dt_status status = dt_comm_all_reduce(comm, t, op);
      for (int64_t i = 0; i < numel; i++) expected[i] = reduced(dtype, op, world, i);
      if (status == DT_OK) status = compare(t, expected, numel, dt_reduce_op_name(op));
      dt_tensor_release(t);
      if (status != DT_OK) {
        free(expected);
        return status;
      }
    }
  }
  free(expected);
  return DT_OK;
}

Test(all_reduce, every_dtype_and_op) {
  int64_t numel = 37;
  for (int w = 0; w < N_WORLDS; w++) SPAWN_OK(worlds[w], all_reduce_rank, &numel);
}

Test(all_reduce, large_crosses_many_chunks) {
  int64_t numel = 300007; /* > one 256 KiB chunk of f32, odd */
  SPAWN_OK(3, all_reduce_rank, &numel);
}

static dt_status all_reduce_scalar_rank(dt_comm *comm, void *arg) {
  (void)arg;
  dt_tensor *t = NULL;
  RANK_OK(dt_full(0, (int64_t[]){1}, dt_comm_rank(comm) + 1, DT_F64, &t));
  RANK_OK(dt_comm_all_reduce(comm, t, DT_REDUCE_SUM));
  int w = dt_comm_size(comm);
  double v = *(double *)dt_tensor_data(t);
  dt_tensor_release(t);
  RANK_CHECK(v == w * (w + 1) / 2.0, "scalar sum %g", v);
  /* Empty tensors complete like a barrier. */
  RANK_OK(dt_zeros(1, (int64_t[]){0}, DT_F32, &t));
  RANK_OK(dt_comm_all_reduce(comm, t, DT_REDUCE_MAX));
  dt_tensor_release(t);
  return DT_OK;
}

Test(all_reduce, scalar_and_empty) {
  for (int w = 0; w < N_WORLDS; w++) SPAWN_OK(worlds[w], all_reduce_scalar_rank, NULL);
}

/* ---- all_gather ------------------------------------------------------------------------- */

static dt_status all_gather_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  for (int di = 0; di < N_DTYPES; di++) {
    dt_dtype dtype = all_dtypes[di];
    int64_t in_shape[] = {3, 5}, out_shape[] = {3 * world, 5};
    dt_tensor *in = test_tensor(2, in_shape, dtype, DT_REDUCE_SUM, rank), *out = NULL;
    RANK_OK(dt_zeros(2, out_shape, dtype, &out));
    RANK_OK(dt_comm_all_gather_into_tensor(comm, in, out));
    double *expected = malloc(sizeof *expected * 15 * (size_t)world);
    for (int r = 0; r < world; r++) {
      for (int64_t i = 0; i < 15; i++)
        expected[r * 15 + i] = test_value(dtype, DT_REDUCE_SUM, r, i);
    }
    dt_status status = compare(out, expected, 15 * world, "all_gather_into_tensor");
    /* In place: this rank's rows of `out` are the input. */
    if (status == DT_OK) {
      dt_tensor *out2 = NULL;
      RANK_OK(dt_zeros(2, out_shape, dtype, &out2));
      dt_tensor *mine = narrow_rows(out2, 3 * rank, 3);
      copy_bytes(mine, in);
      RANK_OK(dt_comm_all_gather_into_tensor(comm, mine, out2));
      status = compare(out2, expected, 15 * world, "in-place all_gather_into_tensor");
      dt_tensor_release(mine);
      dt_tensor_release(out2);
    }
    free(expected);
    dt_tensor_release(in);
    dt_tensor_release(out);
    if (status != DT_OK) return status;
  }
  return DT_OK;
}

Test(all_gather, into_tensor_and_in_place) {
  for (int w = 0; w < N_WORLDS; w++) SPAWN_OK(worlds[w], all_gather_rank, NULL);
}

static dt_status all_gather_uneven_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  int64_t counts[8], total = 0;
  for (int r = 0; r < world; r++) total += counts[r] = (r * 2 + 1) % 4; /* 1, 3, 1, 3, ... and 0s */
  counts[world - 1] = 0;
  total = 0;
  for (int r = 0; r < world; r++) total += counts[r];
  dt_dtype dtypes[] = {DT_F32, DT_BF16, DT_I64, DT_U8};
  for (int di = 0; di < 4; di++) {
    dt_dtype dtype = dtypes[di];
    dt_tensor *in = test_tensor(2, (int64_t[]){counts[rank], 2}, dtype, DT_REDUCE_SUM, rank);
    dt_tensor *out = NULL;
    RANK_OK(dt_zeros(2, (int64_t[]){total, 2}, dtype, &out));
    RANK_OK(dt_comm_all_gather_uneven(comm, in, out, counts));
    double expected[64];
    int64_t k = 0;
    for (int r = 0; r < world; r++) {
      for (int64_t i = 0; i < counts[r] * 2; i++)
        expected[k++] = test_value(dtype, DT_REDUCE_SUM, r, i);
    }
    dt_status status = compare(out, expected, k, "all_gather_uneven");
    dt_tensor_release(in);
    dt_tensor_release(out);
    if (status != DT_OK) return status;
  }
  return DT_OK;
}

Test(all_gather, uneven) {
  for (int w = 0; w < N_WORLDS; w++) SPAWN_OK(worlds[w], all_gather_uneven_rank, NULL);
}

/* ---- reduce_scatter ------------------------------------------------------------------------ */

static dt_status reduce_scatter_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_MAX, DT_REDUCE_PROD};
  for (int di = 0; di < N_DTYPES; di++) {
    for (int oi = 0; oi < 3; oi++) {
      dt_dtype dtype = all_dtypes[di];
      dt_reduce_op op = ops[oi];
      int64_t rows = 2, cols = 3;
      dt_tensor *in = test_tensor(2, (int64_t[]){rows * world, cols}, dtype, op, rank);
      dt_tensor *out = NULL;
      RANK_OK(dt_zeros(2, (int64_t[]){rows, cols}, dtype, &out));
      RANK_OK(dt_comm_reduce_scatter_tensor(comm, in, out, op));
      double expected[6];
      for (int64_t i = 0; i < rows * cols; i++)
        expected[i] = reduced(dtype, op, world, rank * rows * cols + i);
      dt_status status = compare(out, expected, rows * cols, "reduce_scatter_tensor");
      if (status == DT_OK) {
        /* In place: out is this rank's slice of in. */
        dt_tensor *mine = narrow_rows(in, rank * rows, rows);
        dt_tensor *fresh = test_tensor(2, (int64_t[]){rows * world, cols}, dtype, op, rank);
        copy_bytes(in, fresh);
        dt_tensor_release(fresh);
        RANK_OK(dt_comm_reduce_scatter_tensor(comm, in, mine, op));
        status = compare(mine, expected, rows * cols, "in-place reduce_scatter_tensor");
        dt_tensor_release(mine);
      }
      dt_tensor_release(in);
      dt_tensor_release(out);
      if (status != DT_OK) return status;
    }
  }
  return DT_OK;
}

Test(reduce_scatter, tensor_and_in_place) {
  for (int w = 0; w < N_WORLDS; w++) SPAWN_OK(worlds[w], reduce_scatter_rank, NULL);
}

static dt_status reduce_scatter_uneven_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  int64_t counts[8], total = 0, first = 0;
  for (int r = 0; r < world; r++) {
    counts[r] = r % 3;
    if (r < rank) first += counts[r];
    total += counts[r];
  }
  dt_dtype dtypes[] = {DT_F32, DT_F16, DT_I32, DT_BOOL};
  for (int di = 0; di < 4; di++) {
    dt_dtype dtype = dtypes[di];
    dt_tensor *in = test_tensor(2, (int64_t[]){total, 4}, dtype, DT_REDUCE_SUM, rank);
    dt_tensor *out = NULL;
    RANK_OK(dt_zeros(2, (int64_t[]){counts[rank], 4}, dtype, &out));
    RANK_OK(dt_comm_reduce_scatter_uneven(comm, in, out, counts, DT_REDUCE_SUM));
    double expected[16];
    for (int64_t i = 0; i < counts[rank] * 4; i++)
      expected[i] = reduced(dtype, DT_REDUCE_SUM, world, first * 4 + i);
    dt_status status = compare(out, expected, counts[rank] * 4, "reduce_scatter_uneven");
    dt_tensor_release(in);
    dt_tensor_release(out);
    if (status != DT_OK) return status;
  }
  return DT_OK;
}

Test(reduce_scatter, uneven) {
  for (int w = 0; w < N_WORLDS; w++) SPAWN_OK(worlds[w], reduce_scatter_uneven_rank, NULL);
}

/* ---- all_to_all --------------------------------------------------------------------------- */

/* Rank s sends rank d the rows valued 1000*s + 10*d + j; counts (s + d) % 3 when uneven. */
static dt_status all_to_all_rank(dt_comm *comm, void *arg) {
  bool uneven = *(bool *)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  int64_t send_counts[8], recv_counts[8], sent = 0, received = 0;
  for (int p = 0; p < world; p++) {
    send_counts[p] = uneven ? (rank + p) % 3 : 2;
    recv_counts[p] = uneven ? (p + rank) % 3 : 2;
    sent += send_counts[p];
    received += recv_counts[p];
  }
  double values[64], expected[64];
  int64_t k = 0;
  for (int d = 0; d < world; d++) {
    for (int64_t j = 0; j < send_counts[d]; j++) values[k++] = 1000 * rank + 10 * d + (double)j;
  }
  k = 0;
  for (int s = 0; s < world; s++) {
    for (int64_t j = 0; j < recv_counts[s]; j++) expected[k++] = 1000 * s + 10 * rank + (double)j;
  }
  dt_dtype dtypes[] = {DT_F64, DT_I32, DT_F32};
  for (int di = 0; di < 3; di++) {
    dt_tensor *in = NULL, *out = NULL;
    RANK_OK(dt_empty(1, (int64_t[]){sent}, dtypes[di], &in));
    for (int64_t i = 0; i < sent; i++) RANK_OK(dt_tensor_set(in, (int64_t[]){i}, values[i]));
    RANK_OK(dt_zeros(1, (int64_t[]){received}, dtypes[di], &out));
    RANK_OK(dt_comm_all_to_all(comm, in, out, uneven ? send_counts : NULL,
                               uneven ? recv_counts : NULL));
    dt_status status = compare(out, expected, received, "all_to_all");
    dt_tensor_release(in);
    dt_tensor_release(out);
    if (status != DT_OK) return status;
  }
  return DT_OK;
}

Test(all_to_all, even_and_uneven) {
  bool even = false, uneven = true;
  for (int w = 0; w < N_WORLDS; w++) {
    SPAWN_OK(worlds[w], all_to_all_rank, &even);
    SPAWN_OK(worlds[w], all_to_all_rank, &uneven);
  }
}

/* ---- broadcast, scatter, gather, barrier ------------------------------------------------- */

static dt_status rooted_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  for (int root = 0; root < world; root += (world > 2 ? world - 1 : 1)) {
    for (int di = 0; di < N_DTYPES; di++) {
      dt_dtype dtype = all_dtypes[di];
      /* broadcast: root's values everywhere */
      dt_tensor *t = test_tensor(2, (int64_t[]){4, 3}, dtype, DT_REDUCE_SUM, rank);
      RANK_OK(dt_comm_broadcast(comm, t, root));
      double expected[96];
      for (int64_t i = 0; i < 12; i++) expected[i] = test_value(dtype, DT_REDUCE_SUM, root, i);
      dt_status status = compare(t, expected, 12, "broadcast");
      dt_tensor_release(t);
      if (status != DT_OK) return status;

      /* scatter: rank r gets rows [2r, 2r+2) of root's tensor */
      dt_tensor *all = test_tensor(2, (int64_t[]){2 * world, 3}, dtype, DT_REDUCE_SUM, rank);
      dt_tensor *part = NULL;
      RANK_OK(dt_zeros(2, (int64_t[]){2, 3}, dtype, &part));
      RANK_OK(dt_comm_scatter(comm, rank == root ? all : NULL, part, root));
      for (int64_t i = 0; i < 6; i++)
        expected[i] = test_value(dtype, DT_REDUCE_SUM, root, rank * 6 + i);
      status = compare(part, expected, 6, "scatter");
      if (status != DT_OK) return status;

      /* gather: root gets every rank's `part` (now rank-specific) in order */
      dt_tensor *gathered = NULL;
      RANK_OK(dt_zeros(2, (int64_t[]){2 * world, 3}, dtype, &gathered));
      RANK_OK(dt_comm_gather(comm, part, rank == root ? gathered : NULL, root));
      if (rank == root) {
        for (int64_t i = 0; i < 6 * world; i++)
          expected[i] = test_value(dtype, DT_REDUCE_SUM, root, i);
        status = compare(gathered, expected, 6 * world, "gather");
      }
      dt_tensor_release(gathered);
      dt_tensor_release(part);
      dt_tensor_release(all);
      if (status != DT_OK) return status;
    }
  }
  RANK_OK(dt_comm_barrier(comm));
  return DT_OK;
}

Test(rooted, broadcast_scatter_gather) {
  for (int w = 0; w < N_WORLDS; w++) SPAWN_OK(worlds[w], rooted_rank, NULL);
}

/* ---- send / recv -------------------------------------------------------------------------- */

static dt_status ring_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  if (world == 1) return DT_OK;
  int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  for (int round = 0; round < 3; round++) {
    dt_tensor *mine = NULL, *theirs = NULL;
    RANK_OK(dt_full(1, (int64_t[]){100000}, rank * 10 + round, DT_F32, &mine));
    RANK_OK(dt_zeros(1, (int64_t[]){100000}, DT_F32, &theirs));
    dt_work *sent = NULL;
    RANK_OK(dt_comm_send_async(comm, mine, next, &sent));
    RANK_OK(dt_comm_recv(comm, theirs, prev));
    RANK_OK(dt_work_wait(sent));
    dt_work_destroy(sent);
    float *p = dt_tensor_data(theirs);
    RANK_CHECK(p[0] == prev * 10 + round && p[99999] == prev * 10 + round, "got %g", p[0]);
    dt_tensor_release(mine);
    dt_tensor_release(theirs);
  }
  /* Pairs: even ranks send first, odd ranks receive first, both synchronous. */
  int partner = rank ^ 1;
  if (partner < world) {
    dt_tensor *t = NULL;
    RANK_OK(dt_full(2, (int64_t[]){2, 2}, rank, DT_I64, &t));
    if (rank % 2 == 0) {
      RANK_OK(dt_comm_send(comm, t, partner));
      RANK_OK(dt_comm_recv(comm, t, partner));
    } else {
      dt_tensor *got = NULL;
      RANK_OK(dt_zeros(2, (int64_t[]){2, 2}, DT_I64, &got));
      RANK_OK(dt_comm_recv(comm, got, partner));
      RANK_CHECK(((int64_t *)dt_tensor_data(got))[3] == partner, "pair value");
      RANK_OK(dt_comm_send(comm, t, partner));
      dt_tensor_release(got);
    }
    if (rank % 2 == 0) RANK_CHECK(((int64_t *)dt_tensor_data(t))[0] == partner, "pair reply");
    dt_tensor_release(t);
  }
  return DT_OK;
}

Test(send_recv, ring_and_pairs) {
  for (int w = 0; w < N_WORLDS; w++) SPAWN_OK(worlds[w], ring_rank, NULL);
}

/* ---- all_gather_object --------------------------------------------------------------------- */

static dt_status object_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  char text[64];
  int len =
      rank == 1 ? 0 : snprintf(text, sizeof text, "rank %d says %.*s", rank, rank, "hello!!!");
  dt_objects *objects = NULL;
  RANK_OK(dt_comm_all_gather_object(comm, len ? text : NULL, (size_t)len, &objects));
  RANK_CHECK(objects->count == world, "count %d", objects->count);
  for (int r = 0; r < world; r++) {
    char want[64];
    int wl = r == 1 ? 0 : snprintf(want, sizeof want, "rank %d says %.*s", r, r, "hello!!!");
    RANK_CHECK(objects->lengths[r] == (size_t)wl, "length of %d", r);
    RANK_CHECK(memcmp(objects->data + objects->offsets[r], want, (size_t)wl) == 0, "bytes of %d",
               r);
  }
  dt_free(objects);
  return DT_OK;
}

Test(all_gather_object, any_lengths) {
  for (int w = 0; w < N_WORLDS; w++) SPAWN_OK(worlds[w], object_rank, NULL);
}

/* Collectives beyond the caches take the streaming f32 sum path; odd length for the tail. */
static dt_status streaming_rank(dt_comm *comm, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(comm), world = dt_comm_size(comm);
  int64_t n = (int64_t)(9 << 20) / world + 3;
  dt_tensor *t = NULL;
  RANK_OK(dt_full(1, (int64_t[]){n}, rank + 0.5, DT_F32, &t));
  RANK_OK(dt_comm_all_reduce(comm, t, DT_REDUCE_SUM));
  float expected = (float)(world * world / 2.0), *p = dt_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    RANK_CHECK(p[i] == expected, "element %lld is %g, expected %g", (long long)i, p[i], expected);
  }
  dt_tensor_release(t);
  return DT_OK;
}

Test(all_reduce, large_f32_sum_streams) {
  SPAWN_OK(2, streaming_rank, NULL);
  SPAWN_OK(3, streaming_rank, NULL);
}
