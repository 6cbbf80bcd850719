/*
 * The MPI backend under mpirun: every collective x every dtype x uneven sizes x sync and
 * async (several works in flight), in place and out of place, checked against a reference
 * each rank computes locally from the same value formula. Also bad arguments (failing on
 * the calling rank alone, before any communication), dt_comm_split, a 2 x (W/2) mesh with
 * per-dimension collectives, send/recv, all_gather_object, and with DT_DEBUG_COLLECTIVES=1
 * the mismatch reports. Run it with DT_MPI_MAX_COUNT=7 to push every collective through
 * its large-count paths (chunks, unit datatypes, point-to-point pieces).
 *
 * Prints "N passed, N failed" (summed over the ranks) and exits 1 on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "mpi_check.h"

static const dt_dtype all_dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16,
                                      DT_I64, DT_I32, DT_U8,   DT_BOOL};
#define N_DTYPES (int)(sizeof all_dtypes / sizeof *all_dtypes)

static int W, R;
static dt_comm *g_world;

/* ---- Values ------------------------------------------------------------------------------ */

/* Element i of rank r's input: small integers, exact in every dtype (prod inputs are 1..3
 * so products of up to 4 ranks stay exact even in bf16). */
static double value(int r, int64_t i, dt_dtype dtype, bool for_prod) {
  if (dtype == DT_BOOL) return (r + i) % 3 == 0;
  if (for_prod) return (double)((r * 5 + i * 7) % 3 + 1);
  double v = (double)((r * 7 + i * 3) % 11);
  return dtype == DT_U8 ? v : v - 5;
}

static double get(const dt_tensor *t, int64_t i) {
  const char *p = dt_tensor_data(t);
  switch (dt_tensor_dtype(t)) {
  case DT_F32: return ((const float *)p)[i];
  case DT_F64: return ((const double *)p)[i];
  case DT_BF16: return dt_bf16_to_f32(((const uint16_t *)p)[i]);
  case DT_F16: return dt_f16_to_f32(((const uint16_t *)p)[i]);
  case DT_I64: return (double)((const int64_t *)p)[i];
  case DT_I32: return ((const int32_t *)p)[i];
  case DT_U8: return ((const uint8_t *)p)[i];
  default: return ((const uint8_t *)p)[i] != 0;
  }
}

static void set(dt_tensor *t, int64_t i, double v) {
  char *p = dt_tensor_data(t);
  switch (dt_tensor_dtype(t)) {
  case DT_F32: ((float *)p)[i] = (float)v; break;
  case DT_F64: ((double *)p)[i] = v; break;
  case DT_BF16: ((uint16_t *)p)[i] = dt_f32_to_bf16((float)v); break;
  case DT_F16: ((uint16_t *)p)[i] = dt_f32_to_f16((float)v); break;
  case DT_I64: ((int64_t *)p)[i] = (int64_t)v; break;
  case DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case DT_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  default: ((uint8_t *)p)[i] = v != 0; break;
  }
}

static dt_tensor *make(dt_dtype dtype, int64_t rows, int64_t cols) {
  dt_tensor *t = NULL;
  if (dt_zeros(2, (int64_t[]){rows, cols}, dtype, &t) != DT_OK) {
    fprintf(stderr, "[rank %d] dt_zeros failed: %s\n", R, dt_last_error());
    exit(2);
  }
  return t;
}

/* Fills t with rank r's values, element i being value(r, first + i). */
static void fill(dt_tensor *t, int r, int64_t first, bool for_prod) {
  for (int64_t i = 0; i < dt_tensor_numel(t); i++) {
    set(t, i, value(r, first + i, dt_tensor_dtype(t), for_prod));
  }
}

static double reduce_ref(dt_reduce_op op, dt_dtype dtype, int64_t i) {
  bool prod = op == DT_REDUCE_PROD;
  double acc = value(0, i, dtype, prod);
  for (int r = 1; r < W; r++) {
    double v = value(r, i, dtype, prod);
    if (dtype == DT_BOOL) {
      acc = (op == DT_REDUCE_SUM || op == DT_REDUCE_MAX) ? (acc || v) : (acc && v);
      continue;
    }
    switch (op) {
    case DT_REDUCE_SUM:
    case DT_REDUCE_AVG: acc += v; break;
    case DT_REDUCE_PROD: acc *= v; break;
    case DT_REDUCE_MAX: acc = v > acc ? v : acc; break;
    case DT_REDUCE_MIN: acc = v < acc ? v : acc; break;
    }
  }
  if (op == DT_REDUCE_AVG) acc /= W;
  if (dtype == DT_U8) acc = fmod(fmod(acc, 256) + 256, 256);
  return acc;
}

static bool close_enough(double got, double want, dt_dtype dtype) {
  double tol = 0;
  if (dtype == DT_F32) tol = 1e-6 + 1e-6 * fabs(want);
  if (dtype == DT_F64) tol = 1e-12 + 1e-12 * fabs(want);
  if (dtype == DT_BF16) tol = 1e-2 * fabs(want) + 1e-2;
  if (dtype == DT_F16) tol = 1e-3 * fabs(want) + 1e-3;
  return fabs(got - want) <= tol;
}

/* Index of the first element of t (n elements) that differs from want(i), or -1. */
#define FIRST_BAD(t, n, want_expr, bad)                                                            \
  do {                                                                                             \
    bad = -1;                                                                                      \
    for (int64_t i = 0; i < (n); i++) {                                                            \
      double want_ = (want_expr);                                                                  \
      if (!close_enough(get((t), i), want_, dt_tensor_dtype(t))) {                                 \
        bad = i;                                                                                   \
        break;                                                                                     \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* Waits for a work: half the time by polling dt_work_test first. */
static dt_status finish_work(dt_work *w, int salt) {
  if (salt % 2) {
    bool done = false;
    for (int spins = 0; !done && spins < 1000000; spins++) {
      dt_status st = dt_work_test(w, &done);
      if (st != DT_OK) return st;
    }
  }
  dt_status st = dt_work_wait(w);
  dt_work_destroy(w);
  return st;
}

/* ---- Collectives ------------------------------------------------------------------------- */

static void test_all_reduce(dt_dtype dtype) {
  static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX, DT_REDUCE_MIN,
                                     DT_REDUCE_PROD};
  static const int64_t sizes[][2] = {{1, 1}, {3, 7}, {37, 29}};
  for (int o = 0; o < 5; o++) {
    dt_reduce_op op = ops[o];
    if (op == DT_REDUCE_AVG && !dt_dtype_is_floating(dtype)) continue;
    for (int s = 0; s < 3; s++) {
      int64_t n = sizes[s][0] * sizes[s][1];
      /* Sync, then two async ones in flight at once. */
      dt_tensor *t[3];
      for (int k = 0; k < 3; k++) {
        t[k] = make(dtype, sizes[s][0], sizes[s][1]);
        fill(t[k], R, 0, op == DT_REDUCE_PROD);
      }
      dt_work *w1 = NULL, *w2 = NULL;
      CHECK_OK(dt_comm_all_reduce(g_world, t[0], op));
      CHECK_OK(dt_comm_all_reduce_async(g_world, t[1], op, &w1));
      CHECK_OK(dt_comm_all_reduce_async(g_world, t[2], op, &w2));
      CHECK_OK(finish_work(w2, s));
      CHECK_OK(finish_work(w1, s + 1));
      for (int k = 0; k < 3; k++) {
        int64_t bad;
        FIRST_BAD(t[k], n, reduce_ref(op, dtype, i), bad);
        CHECK(bad < 0, "all_reduce %s %s n=%lld form %d: element %lld is %g, expected %g",
              dt_dtype_name(dtype), dt_reduce_op_name(op), (long long)n, k, (long long)bad,
              bad >= 0 ? get(t[k], bad) : 0, bad >= 0 ? reduce_ref(op, dtype, bad) : 0);
        dt_tensor_release(t[k]);
      }
    }
  }
}

static int64_t uneven_rows(int r) { return (r * 3 + 2) % 5; } /* 2, 0, 3, 1, 4, ... */

static void test_all_gather(dt_dtype dtype) {
  const int64_t cols = 5;
  for (int variant = 0; variant < 4; variant++) {
    bool uneven = variant >= 2, async = variant % 2 == 1;
    int64_t counts[64], total = 0, first = 0;
    for (int r = 0; r < W; r++) {
      counts[r] = uneven ? uneven_rows(r) : 3;
      if (r < R) first += counts[r];
      total += counts[r];
    }
    for (int in_place = 0; in_place < 2; in_place++) {
      dt_tensor *out = make(dtype, total, cols), *in = NULL;
      if (in_place) {
        CHECK_OK(dt_narrow(out, 0, first, counts[R], &in));
      } else {
        in = make(dtype, counts[R], cols);
      }
      fill(in, R, first * cols, false);
      dt_status st;
      if (async) {
        dt_work *w = NULL;
        st = uneven ? dt_comm_all_gather_uneven_async(g_world, in, out, counts, &w)
                    : dt_comm_all_gather_into_tensor_async(g_world, in, out, &w);
        if (st == DT_OK) st = finish_work(w, variant + in_place);
      } else {
        st = uneven ? dt_comm_all_gather_uneven(g_world, in, out, counts)
                    : dt_comm_all_gather_into_tensor(g_world, in, out);
      }
      CHECK(st == DT_OK, "all_gather %s variant %d in_place %d: %s", dt_dtype_name(dtype), variant,
            in_place, dt_status_string(st));
      /* Element i of out came from the rank whose rows hold it. */
      int64_t bad = -1;
      for (int64_t i = 0, row_start = 0, r = 0; i < total * cols && bad < 0; i++) {
        while (i >= (row_start + counts[r]) * cols) row_start += counts[r++];
        if (!close_enough(get(out, i), value((int)r, i, dtype, false), dtype)) bad = i;
      }
      CHECK(bad < 0, "all_gather %s variant %d in_place %d: element %lld wrong",
            dt_dtype_name(dtype), variant, in_place, (long long)bad);
      dt_tensor_release(in);
      dt_tensor_release(out);
    }
  }
}

static void test_reduce_scatter(dt_dtype dtype) {
  const int64_t cols = 3;
  static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX, DT_REDUCE_PROD};
  for (int o = 0; o < 4; o++) {
    dt_reduce_op op = ops[o];
    if (op == DT_REDUCE_AVG && !dt_dtype_is_floating(dtype)) continue;
    for (int variant = 0; variant < 4; variant++) {
      bool uneven = variant >= 2, async = variant % 2 == 1;
      int64_t counts[64], total = 0, first = 0;
      for (int r = 0; r < W; r++) {
        counts[r] = uneven ? uneven_rows(r) : 2;
        if (r < R) first += counts[r];
        total += counts[r];
      }
      for (int in_place = 0; in_place < 2; in_place++) {
        dt_tensor *in = make(dtype, total, cols), *out = NULL;
        fill(in, R, 0, op == DT_REDUCE_PROD);
        if (in_place) {
          CHECK_OK(dt_narrow(in, 0, first, counts[R], &out));
        } else {
          out = make(dtype, counts[R], cols);
        }
        dt_status st;
        if (async) {
          dt_work *w = NULL;
          st = uneven ? dt_comm_reduce_scatter_uneven_async(g_world, in, out, counts, op, &w)
                      : dt_comm_reduce_scatter_tensor_async(g_world, in, out, op, &w);
          if (st == DT_OK) st = finish_work(w, o + variant);
        } else {
          st = uneven ? dt_comm_reduce_scatter_uneven(g_world, in, out, counts, op)
                      : dt_comm_reduce_scatter_tensor(g_world, in, out, op);
        }
        CHECK(st == DT_OK, "reduce_scatter %s %s variant %d: %s", dt_dtype_name(dtype),
              dt_reduce_op_name(op), variant, dt_status_string(st));
        int64_t bad;
        FIRST_BAD(out, counts[R] * cols, reduce_ref(op, dtype, first * cols + i), bad);
        CHECK(bad < 0, "reduce_scatter %s %s variant %d in_place %d: element %lld is %g",
              dt_dtype_name(dtype), dt_reduce_op_name(op), variant, in_place, (long long)bad,
              bad >= 0 ? get(out, bad) : 0);
        dt_tensor_release(out);
        dt_tensor_release(in);
      }
    }
  }
}

/* Rows rank s sends to rank d in the uneven all_to_all. */
static int64_t a2a_rows(int s, int d) { return (s + 2 * d + 1) % 4; }

static void test_all_to_all(dt_dtype dtype) {
  const int64_t cols = 3;
  for (int variant = 0; variant < 4; variant++) {
    bool uneven = variant >= 2, async = variant % 2 == 1;
    int64_t send_counts[64], recv_counts[64], sent = 0, received = 0;
    for (int r = 0; r < W; r++) {
      send_counts[r] = uneven ? a2a_rows(R, r) : 2;
      recv_counts[r] = uneven ? a2a_rows(r, R) : 2;
      sent += send_counts[r];
      received += recv_counts[r];
    }
    dt_tensor *in = make(dtype, sent, cols), *out = make(dtype, received, cols);
    /* Element j of the block rank s sends to d is value(s, 1000 * d + j). */
    for (int d = 0, row = 0; d < W; row += (int)send_counts[d], d++) {
      for (int64_t j = 0; j < send_counts[d] * cols; j++) {
        set(in, row * cols + j, value(R, 1000 * d + j, dtype, false));
      }
    }
    dt_status st;
    const int64_t *sc = uneven ? send_counts : NULL, *rc = uneven ? recv_counts : NULL;
    if (async) {
      dt_work *w = NULL;
      st = dt_comm_all_to_all_async(g_world, in, out, sc, rc, &w);
      if (st == DT_OK) st = finish_work(w, variant);
    } else {
      st = dt_comm_all_to_all(g_world, in, out, sc, rc);
    }
    CHECK(st == DT_OK, "all_to_all %s variant %d: %s", dt_dtype_name(dtype), variant,
          dt_status_string(st));
    int64_t bad = -1;
    for (int s = 0, row = 0; s < W && bad < 0; row += (int)recv_counts[s], s++) {
      for (int64_t j = 0; j < recv_counts[s] * cols; j++) {
        if (!close_enough(get(out, row * cols + j), value(s, 1000 * R + j, dtype, false), dtype)) {
          bad = row * cols + j;
          break;
        }
      }
    }
    CHECK(bad < 0, "all_to_all %s variant %d: element %lld wrong", dt_dtype_name(dtype), variant,
          (long long)bad);
    dt_tensor_release(in);
    dt_tensor_release(out);
  }
}

static void test_rooted(dt_dtype dtype) {
  const int64_t rows = 2, cols = 7;
  for (int variant = 0; variant < 4; variant++) {
    int root = variant % 2 ? W - 1 : 0;
    bool async = variant >= 2;
    /* broadcast */
    dt_tensor *t = make(dtype, rows + variant, cols);
    if (R == root) fill(t, root, 0, false);
    dt_status st;
    if (async) {
      dt_work *w = NULL;
      st = dt_comm_broadcast_async(g_world, t, root, &w);
      if (st == DT_OK) st = finish_work(w, variant);
    } else {
      st = dt_comm_broadcast(g_world, t, root);
    }
    CHECK(st == DT_OK, "broadcast %s root %d: %s", dt_dtype_name(dtype), root,
          dt_status_string(st));
    int64_t bad;
    FIRST_BAD(t, dt_tensor_numel(t), value(root, i, dtype, false), bad);
    CHECK(bad < 0, "broadcast %s root %d: element %lld wrong", dt_dtype_name(dtype), root,
          (long long)bad);
    dt_tensor_release(t);

    /* scatter: rank r gets rows [r * rows, +rows) of root's tensor. */
    dt_tensor *whole = R == root ? make(dtype, rows * W, cols) : NULL;
    dt_tensor *part = make(dtype, rows, cols);
    if (whole) fill(whole, root, 0, false);
    if (async) {
      dt_work *w = NULL;
      st = dt_comm_scatter_async(g_world, whole, part, root, &w);
      if (st == DT_OK) st = finish_work(w, variant + 1);
    } else {
      st = dt_comm_scatter(g_world, whole, part, root);
    }
    CHECK(st == DT_OK, "scatter %s root %d: %s", dt_dtype_name(dtype), root, dt_status_string(st));
    FIRST_BAD(part, rows * cols, value(root, R * rows * cols + i, dtype, false), bad);
    CHECK(bad < 0, "scatter %s root %d: element %lld wrong", dt_dtype_name(dtype), root,
          (long long)bad);

    /* gather it back, each rank's rows now carrying its own values. */
    fill(part, R, R * rows * cols, false);
    if (async) {
      dt_work *w = NULL;
      st = dt_comm_gather_async(g_world, part, whole, root, &w);
      if (st == DT_OK) st = finish_work(w, variant);
    } else {
      st = dt_comm_gather(g_world, part, whole, root);
    }
    CHECK(st == DT_OK, "gather %s root %d: %s", dt_dtype_name(dtype), root, dt_status_string(st));
    if (whole) {
      FIRST_BAD(whole, rows * cols * W, value((int)(i / (rows * cols)), i, dtype, false), bad);
      CHECK(bad < 0, "gather %s root %d: element %lld wrong", dt_dtype_name(dtype), root,
            (long long)bad);
    }
    dt_tensor_release(whole);
    dt_tensor_release(part);
  }
}

static void test_send_recv(dt_dtype dtype) {
  if (W < 2) return;
  int next = (R + 1) % W, prev = (R + W - 1) % W;
  for (int64_t n = 0; n < 40; n += 13) {
    dt_tensor *out = make(dtype, 1, n), *in = make(dtype, 1, n);
    fill(out, R, 0, false);
    dt_work *w = NULL;
    CHECK_OK(dt_comm_send_async(g_world, out, next, &w));
    CHECK_OK(dt_comm_recv(g_world, in, prev));
    CHECK_OK(finish_work(w, (int)n));
    int64_t bad;
    FIRST_BAD(in, n, value(prev, i, dtype, false), bad);
    CHECK(bad < 0, "send/recv %s n=%lld: element %lld wrong", dt_dtype_name(dtype), (long long)n,
          (long long)bad);
    /* Two messages in flight to the same peer arrive in order. */
    dt_tensor *a = make(dtype, 1, n + 1), *b = make(dtype, 1, n + 2);
    dt_tensor *ra = make(dtype, 1, n + 1), *rb = make(dtype, 1, n + 2);
    fill(a, R, 100, false);
    fill(b, R, 200, false);
    dt_work *wa = NULL, *wb = NULL, *wra = NULL;
    CHECK_OK(dt_comm_send_async(g_world, a, next, &wa));
    CHECK_OK(dt_comm_send_async(g_world, b, next, &wb));
    CHECK_OK(dt_comm_recv_async(g_world, ra, prev, &wra));
    CHECK_OK(dt_comm_recv(g_world, rb, prev));
    CHECK_OK(finish_work(wra, 1));
    CHECK_OK(finish_work(wa, 0));
    CHECK_OK(finish_work(wb, 1));
    FIRST_BAD(ra, n + 1, value(prev, 100 + i, dtype, false), bad);
    CHECK(bad < 0, "send/recv order %s: first message wrong at %lld", dt_dtype_name(dtype),
          (long long)bad);
    FIRST_BAD(rb, n + 2, value(prev, 200 + i, dtype, false), bad);
    CHECK(bad < 0, "send/recv order %s: second message wrong at %lld", dt_dtype_name(dtype),
          (long long)bad);
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_tensor_release(ra);
    dt_tensor_release(rb);
    dt_tensor_release(out);
    dt_tensor_release(in);
  }
}

/* ---- Other features ----------------------------------------------------------------------- */

static void test_objects(void) {
  char mine[64];
  int len = R % 3 == 1 ? 0 : snprintf(mine, sizeof mine, "rank %d says %s", R, R ? "hi" : "hello");
  dt_objects *objects = NULL;
  CHECK_OK(dt_comm_all_gather_object(g_world, mine, (size_t)len, &objects));
  if (!objects) return;
  CHECK(objects->count == W, "all_gather_object count %d", objects->count);
  for (int r = 0; r < W && r < objects->count; r++) {
    char want[64];
    int wlen =
        r % 3 == 1 ? 0 : snprintf(want, sizeof want, "rank %d says %s", r, r ? "hi" : "hello");
    CHECK(objects->lengths[r] == (size_t)wlen &&
              memcmp(objects->data + objects->offsets[r], want, (size_t)wlen) == 0,
          "all_gather_object entry %d", r);
  }
  dt_free(objects);
}

static void test_barrier(void) {
  CHECK_OK(dt_comm_barrier(g_world));
  dt_work *w = NULL;
  CHECK_OK(dt_comm_barrier_async(g_world, &w));
  CHECK_OK(finish_work(w, 1));
}

/* Bad calls on rank 0 only: if any of them communicated, the barrier after them (and the
 * ranks waiting in it) would notice. */
static void test_bad_arguments(void) {
  if (R == 0) {
    dt_tensor *f = make(DT_F32, 4, 3), *i = make(DT_I32, 4, 3), *small = make(DT_F32, 1, 3);
    dt_tensor *big = make(DT_F32, 4 * W + 1, 3), *tr = NULL;
    CHECK_OK(dt_transpose(f, 0, 1, &tr));
    dt_work *w = (dt_work *)&w;
    CHECK(dt_comm_all_reduce(g_world, NULL, DT_REDUCE_SUM) == DT_ERR_INVALID, "NULL tensor");
    CHECK(strstr(dt_last_error(), "all_reduce") != NULL, "message names the op: %s",
          dt_last_error());
    CHECK(dt_comm_all_reduce(g_world, i, DT_REDUCE_AVG) == DT_ERR_DTYPE, "avg of int");
    CHECK(dt_comm_all_reduce(g_world, tr, DT_REDUCE_SUM) == DT_ERR_INVALID, "non-contiguous");
    CHECK(dt_comm_all_reduce(g_world, f, (dt_reduce_op)42) == DT_ERR_INVALID, "bad op");
    CHECK(dt_comm_all_reduce_async(g_world, f, DT_REDUCE_SUM, NULL) == DT_ERR_INVALID, "NULL work");
    CHECK(dt_comm_broadcast(g_world, f, W) == DT_ERR_INVALID, "root out of range");
    CHECK(dt_comm_broadcast(g_world, f, -1) == DT_ERR_INVALID, "negative root");
    CHECK(dt_comm_all_gather_into_tensor(g_world, f, i) == DT_ERR_DTYPE, "all_gather dtypes");
    CHECK(dt_comm_all_gather_into_tensor(g_world, f, big) == DT_ERR_INVALID, "all_gather size");
    CHECK(dt_comm_reduce_scatter_tensor(g_world, big, small, DT_REDUCE_SUM) == DT_ERR_INVALID,
          "reduce_scatter size");
    CHECK(dt_comm_all_to_all(g_world, big, big, NULL, NULL) == DT_ERR_INVALID, "all_to_all shape");
    CHECK(dt_comm_send(g_world, f, R) == DT_ERR_INVALID, "send to self");
    CHECK(dt_comm_recv(g_world, f, W + 3) == DT_ERR_INVALID, "recv from out of range");
    CHECK(dt_comm_scatter(g_world, NULL, f, 0) == DT_ERR_INVALID, "scatter NULL in on root");
    CHECK(dt_comm_all_gather_uneven_async(g_world, f, big, NULL, &w) == DT_ERR_INVALID,
          "uneven NULL counts");
    dt_tensor_release(f);
    dt_tensor_release(i);
    dt_tensor_release(small);
    dt_tensor_release(big);
    dt_tensor_release(tr);
  }
  CHECK_OK(dt_comm_barrier(g_world));
}

static void test_split(void) {
  /* Two groups (even and odd ranks), ordered backwards by key. */
  dt_comm *half = NULL;
  CHECK_OK(dt_comm_split(g_world, R % 2, -R, &half));
  if (!half) return;
  int members = (W - R % 2 + 1) / 2;
  CHECK(dt_comm_size(half) == members, "split size %d, expected %d", dt_comm_size(half), members);
  /* Ranks of the same parity, largest world rank first. */
  int position = 0;
  for (int r = W - 1; r > R; r--) position += r % 2 == R % 2;
  CHECK(dt_comm_rank(half) == position, "split rank %d, expected %d", dt_comm_rank(half), position);
  CHECK(strcmp(dt_comm_backend_name(half), "mpi") == 0, "split backend name");
  dt_tensor *t = make(DT_I64, 1, 1);
  set(t, 0, R);
  CHECK_OK(dt_comm_all_reduce(half, t, DT_REDUCE_SUM));
  int64_t want = 0;
  for (int r = R % 2; r < W; r += 2) want += r;
  CHECK(get(t, 0) == (double)want, "split all_reduce %g, expected %lld", get(t, 0),
        (long long)want);
  dt_tensor_release(t);
  /* A rank passing a negative color joins nothing. */
  dt_comm *some = NULL;
  CHECK_OK(dt_comm_split(half, dt_comm_rank(half) == 0 ? -1 : 0, 0, &some));
  CHECK((some == NULL) == (dt_comm_rank(half) == 0), "negative color gives NULL");
  if (some) CHECK(dt_comm_size(some) == members - 1, "split without rank 0");
  dt_comm_destroy(some);
  dt_comm_destroy(half);
}

static void test_mesh(void) {
  if (W % 2 != 0) return;
  const int shape[2] = {2, W / 2};
  const char *names[2] = {"dp", "tp"};
  dt_mesh *mesh = NULL;
  CHECK_OK(dt_mesh_create(g_world, 2, shape, names, &mesh));
  if (!mesh) return;
  int dp = dt_mesh_coordinate(mesh, 0), tp = dt_mesh_coordinate(mesh, 1);
  CHECK(R == dp * (W / 2) + tp, "mesh coordinates of rank %d: %d, %d", R, dp, tp);
  int dim = -1;
  CHECK_OK(dt_mesh_dim_by_name(mesh, "tp", &dim));
  CHECK(dim == 1, "dim by name");
  /* Along "dp" the group is {tp, W/2 + tp}; along "tp" it is {dp * W/2 + k}. */
  dt_tensor *t = make(DT_F32, 1, 1);
  set(t, 0, R);
  CHECK_OK(dt_comm_all_reduce(dt_mesh_group(mesh, 0), t, DT_REDUCE_SUM));
  CHECK(get(t, 0) == 2 * tp + W / 2, "dp all_reduce %g", get(t, 0));
  set(t, 0, R);
  CHECK_OK(dt_comm_all_reduce(dt_mesh_group(mesh, 1), t, DT_REDUCE_MAX));
  CHECK(get(t, 0) == dp * (W / 2) + W / 2 - 1, "tp all_reduce max %g", get(t, 0));
  dt_tensor *row = make(DT_I32, 1, 2), *rows = make(DT_I32, W / 2, 2);
  set(row, 0, R);
  set(row, 1, -R);
  CHECK_OK(dt_comm_all_gather_into_tensor(dt_mesh_group(mesh, 1), row, rows));
  bool ok = true;
  for (int k = 0; k < W / 2; k++) ok = ok && get(rows, 2 * k) == dp * (W / 2) + k;
  CHECK(ok, "tp all_gather");
  dt_work *w = NULL;
  dt_tensor *pair = make(DT_I32, 2, 2);
  CHECK_OK(dt_comm_all_gather_into_tensor_async(dt_mesh_group(mesh, 0), row, pair, &w));
  CHECK_OK(finish_work(w, 0));
  CHECK(get(pair, 0) == tp && get(pair, 2) == W / 2 + tp, "dp all_gather async");
  dt_tensor_release(t);
  dt_tensor_release(row);
  dt_tensor_release(rows);
  dt_tensor_release(pair);
  dt_mesh_destroy(mesh);
}

/* Only with DT_DEBUG_COLLECTIVES=1: disagreeing calls fail on every rank with a message
 * naming what each rank called, instead of corrupting data or hanging. */
static void test_mismatch(void) {
  dt_tensor *t = make(DT_F32, 2, 3);
  dt_status st = dt_comm_all_reduce(g_world, t, R == 0 ? DT_REDUCE_SUM : DT_REDUCE_MAX);
  CHECK(W == 1 || st == DT_ERR_MISMATCH, "op mismatch gives %s", dt_status_string(st));
  if (W > 1) {
    CHECK(strstr(dt_last_error(), "rank 0 called all_reduce") != NULL &&
              strstr(dt_last_error(), "op=max") != NULL,
          "mismatch message: %s", dt_last_error());
  }
  dt_tensor *u = make(DT_F32, R == 0 ? 3 : 2, 3);
  st = dt_comm_broadcast(g_world, u, 0);
  CHECK(W == 1 || st == DT_ERR_MISMATCH, "size mismatch gives %s", dt_status_string(st));
  /* all_to_all whose counts disagree between sender and receiver. */
  int64_t sc[64], rc[64], sent = 0, received = 0;
  for (int r = 0; r < W; r++) {
    sc[r] = 1;
    rc[r] = (R == 0 && r == W - 1) ? 2 : 1;
    sent += sc[r];
    received += rc[r];
  }
  dt_tensor *in = make(DT_F32, sent, 1), *out = make(DT_F32, received, 1);
  st = dt_comm_all_to_all(g_world, in, out, sc, rc);
  CHECK(W == 1 || st == DT_ERR_MISMATCH, "all_to_all counts mismatch gives %s",
        dt_status_string(st));
  /* send/recv with different dtypes: the receiver reports both calls. */
  if (W > 1 && R < 2) {
    dt_tensor *msg = make(R == 0 ? DT_F32 : DT_I32, 1, 5);
    st = R == 0 ? dt_comm_send(g_world, msg, 1) : dt_comm_recv(g_world, msg, 0);
    if (R == 1) {
      CHECK(st == DT_ERR_MISMATCH && strstr(dt_last_error(), "float32") != NULL,
            "send/recv dtype mismatch: %s", dt_last_error());
    }
    dt_tensor_release(msg);
  }
  /* The group still works afterwards. */
  CHECK_OK(dt_comm_all_reduce(g_world, t, DT_REDUCE_SUM));
  dt_tensor_release(t);
  dt_tensor_release(u);
  dt_tensor_release(in);
  dt_tensor_release(out);
}

int main(void) {
  dt_status st = dt_comm_init(&(dt_comm_options){.backend = "mpi"}, &g_world);
  if (st != DT_OK) {
    fprintf(stderr, "dt_comm_init(mpi) failed: %s\n", dt_last_error());
    return 1;
  }
  W = dt_comm_size(g_world);
  R = dt_comm_rank(g_world);
  mpi_rank_for_messages = R;
  CHECK(strcmp(dt_comm_backend_name(g_world), "mpi") == 0, "backend name");
  CHECK(W <= 64, "this test handles up to 64 ranks");
  const char *debug = getenv("DT_DEBUG_COLLECTIVES");
  bool debug_mode = debug && *debug && strcmp(debug, "0") != 0;

  for (int d = 0; d < N_DTYPES; d++) {
    dt_dtype dtype = all_dtypes[d];
    test_all_reduce(dtype);
    test_all_gather(dtype);
    test_reduce_scatter(dtype);
    test_all_to_all(dtype);
    test_rooted(dtype);
    test_send_recv(dtype);
  }
  test_barrier();
  test_objects();
  test_bad_arguments();
  test_split();
  test_mesh();
  if (debug_mode) test_mismatch();

  /* A second world handle on the same process works alongside the first; DT_BACKEND picks
   * the backend when the options do not. */
  dt_comm *again = NULL;
  setenv("DT_BACKEND", "mpi", 1);
  CHECK_OK(dt_comm_init(NULL, &again));
  if (again) {
    CHECK(dt_comm_size(again) == W && dt_comm_rank(again) == R, "second world");
    CHECK_OK(dt_comm_barrier(again));
    dt_comm_destroy(again);
  }
  int code = mpi_check_finish(g_world);
  dt_comm_destroy(g_world);
  return code;
}
