/*
 * The threads backend on device memory, without a GPU: the rendezvous, the pieces of every
 * collective and the marker protocol (each rank marks its queue at post, one task queues every
 * piece after all the markers and ends with a `done` marker, each rank's queue waits for it)
 * are the same code for CUDA; only the mover differs. Here the mover is a stand-in: a
 * run-time device kind "mirror" (host memory the library must treat as unreadable, one device
 * per rank) whose mover copies with memcpy and reduces with the CPU's reduction, and counts
 * what the protocol did. Values are checked against naive loops on the host.
 *
 * Includes private headers (tensor/device_impl.h, comm/threads/threads_impl.h): registering
 * a device kind and its mover is internal.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "comm/threads/threads_impl.h"
#include "comm_helpers.h"
#include "kernels/kernel_table.h"
#include "mirror_device.h"
#include "tensor/device_impl.h"

#define RANKS 3

/* The stand-in device's memory is tests/mirror_device.h's. */

/* ---- The stand-in device: its mover, counting the protocol ----------------------------- */

typedef struct marker {
  int device;
  bool done; /* end's marker, not mark's */
} marker;

typedef struct run_state {
  int device;
  int waited; /* markers begin waited for */
} run_state;

static atomic_int n_marks, n_begins, n_waits, n_live_markers, n_copies, n_reduces, n_cross_device;
static atomic_int fail_copies; /* > 0: copy fails */

static dt_status mover_mark(const char *op, int device, void **out) {
  marker *m = malloc(sizeof *m);
  if (!m) return dt__error(DT_ERR_NOMEM, "%s: mirror marker", op);
  *m = (marker){.device = device};
  atomic_fetch_add(&n_marks, 1);
  atomic_fetch_add(&n_live_markers, 1);
  *out = m;
  return DT_OK;
}

static dt_status mover_begin(const char *op, int device, void *const *markers, int n, void **out) {
  run_state *r = malloc(sizeof *r);
  if (!r) return dt__error(DT_ERR_NOMEM, "%s: mirror run", op);
  *r = (run_state){.device = device};
  for (int i = 0; i < n; i++) {
    const marker *m = markers[i];
    if (!m || m->done) {
      free(r);
      return dt__error(DT_ERR_INTERNAL, "%s: party %d has no marker", op, i);
    }
    r->waited++;
  }
  atomic_fetch_add(&n_begins, 1);
  *out = r;
  return DT_OK;
}

static dt_status mover_copy(void *run, int dst_device, void *dst, int src_device, const void *src,
                            size_t bytes) {
  (void)run;
  if (atomic_load(&fail_copies) > 0) {
    return dt__error(DT_ERR_INTERNAL, "mirror copy: injected failure (%zu bytes)", bytes);
  }
  if (dst_device != src_device) atomic_fetch_add(&n_cross_device, 1);
  memcpy(dst, src, bytes);
  atomic_fetch_add(&n_copies, 1);
  return DT_OK;
}

static dt_status mover_reduce(void *run, dt_dtype dtype, dt_reduce_op op, int nsrc,
                              const void *const *src, const int *src_devices, int ndst,
                              void *const *dst, const int *dst_devices, int64_t n, int world) {
  const run_state *r = run;
  for (int i = 0; i < nsrc; i++) {
    if (src_devices[i] != r->device) atomic_fetch_add(&n_cross_device, 1);
  }
  (void)dst_devices;
  dt__reduce_buffers(dtype, op, nsrc, src, ndst, dst, n, world, false);
  atomic_fetch_add(&n_reduces, 1);
  return DT_OK;
}

static dt_status mover_end(void *run, dt_status so_far, void **done) {
  run_state *r = run;
  *done = NULL;
  marker *m = so_far == DT_OK ? malloc(sizeof *m) : NULL;
  dt_status status = so_far;
  if (m) {
    *m = (marker){.device = r->device, .done = true};
    atomic_fetch_add(&n_live_markers, 1);
    *done = m;
  } else if (so_far == DT_OK) {
    status = dt__error(DT_ERR_NOMEM, "mirror end");
  }
  free(r);
  return status;
}

static dt_status mover_wait(const char *op, int device, void *done) {
  const marker *m = done;
  if (!m || !m->done)
    return dt__error(DT_ERR_INTERNAL, "%s: waited for a marker that is no end", op);
  (void)device;
  atomic_fetch_add(&n_waits, 1);
  return DT_OK;
}

static void mover_release(void *m) {
  atomic_fetch_sub(&n_live_markers, 1);
  free(m);
}

static const th_device_ops mirror_mover = {.mark = mover_mark,
                                           .begin = mover_begin,
                                           .copy = mover_copy,
                                           .reduce = mover_reduce,
                                           .end = mover_end,
                                           .wait = mover_wait,
                                           .release = mover_release};

static void reset_counts(void) {
  atomic_store(&n_marks, 0);
  atomic_store(&n_begins, 0);
  atomic_store(&n_waits, 0);
  atomic_store(&n_copies, 0);
  atomic_store(&n_reduces, 0);
  atomic_store(&n_cross_device, 0);
  atomic_store(&fail_copies, 0);
}

static void setup(void) {
  cr_assert_eq(dt__device_register_memory(MIRROR, &mirror_memory), DT_OK);
  cr_assert_eq(dt__th_register_device(MIRROR, &mirror_mover), DT_OK);
  /* dt_to_device makes its source contiguous on its own device first: the CPU's kernel works
   * on the stand-in's host memory. */
  dt_op_kernel_fn table[DT_OP_COUNT] = {0};
  table[DT_OP_CONTIGUOUS] = dt__cpu_kernels[DT_OP_CONTIGUOUS];
  cr_assert_eq(dt__kernels_register(MIRROR, table), DT_OK);
  reset_counts();
}

static void teardown(void) {
  cr_assert_eq(atomic_load(&live_blocks), 0, "%d mirror blocks leaked", atomic_load(&live_blocks));
  cr_assert_eq(atomic_load(&n_live_markers), 0, "%d markers leaked", atomic_load(&n_live_markers));
  dt__th_register_device(MIRROR, NULL);
  dt__kernels_register(MIRROR, NULL);
  dt__device_register_memory(MIRROR, NULL);
}

TestSuite(threads_device, .init = setup, .fini = teardown);

/* ---- Helpers on a rank ---------------------------------------------------------------- */

/* A tensor of `rows` x 2 float32 on mirror:device with values v(row, col). */
static dt_status mirror_tensor(int device, int64_t rows, double (*v)(int64_t, int, int), int arg,
                               dt_tensor **out) {
  float values[256];
  if (rows * 2 > 256) return dt__error(DT_ERR_INTERNAL, "test tensor too large");
  for (int64_t i = 0; i < rows; i++) {
    for (int c = 0; c < 2; c++) values[i * 2 + c] = (float)v(i, c, arg);
  }
  dt_tensor_options o = {.device = {(dt_device_kind)MIRROR, device}};
  return dt_from_data_ex(values, 2, (int64_t[]){rows, 2}, DT_F32, &o, out);
}

/* t's values on the host (through dt_to_device). */
static dt_status host_copy(dt_tensor *t, float *out, int64_t n) {
  dt_tensor *h = NULL;
  dt_status st = dt_to_device(t, DT_DEVICE_CPU_VALUE, &h);
  if (st) return st;
  if (dt_tensor_numel(h) != n) {
    dt_tensor_release(h);
    return dt__error(DT_ERR_INTERNAL, "host_copy: %lld elements, expected %lld",
                     (long long)dt_tensor_numel(h), (long long)n);
  }
  memcpy(out, dt_tensor_data(h), sizeof(float) * (size_t)n);
  dt_tensor_release(h);
  return DT_OK;
}

/* Rank r's element (row, col) before a collective. */
static double value_of(int64_t row, int col, int r) { return (double)(r * 100 + row * 10 + col); }
static double zero(int64_t row, int col, int r) {
  (void)row, (void)col, (void)r;
  return 0.0;
}

#define CHECK_VALUES(got, want, n, what)                                                           \
  do {                                                                                             \
    for (int64_t i_ = 0; i_ < (n); i_++) {                                                         \
      RANK_CHECK((got)[i_] == (float)(want)[i_], "%s: element %lld is %g, expected %g", what,      \
                 (long long)i_, (double)(got)[i_], (double)(want)[i_]);                            \
    }                                                                                              \
  } while (0)

/* ---- Every collective on mirror tensors, one device per rank ---------------------------- */

static dt_status all_kinds(dt_comm *w, void *arg) {
  (void)arg;
  int r = dt_comm_rank(w), n = dt_comm_size(w);
  float got[256], want[256];
  dt_tensor *a = NULL, *b = NULL;

  /* all_reduce: sum and avg, in place, then async. */
  RANK_OK(mirror_tensor(r, 2, value_of, r, &a));
  RANK_OK(dt_comm_all_reduce(w, a, DT_REDUCE_SUM));
  RANK_OK(host_copy(a, got, 4));
  for (int64_t i = 0; i < 4; i++) {
    want[i] = 0;
    for (int s = 0; s < n; s++) want[i] += (float)value_of(i / 2, (int)(i % 2), s);
  }
  CHECK_VALUES(got, want, 4, "all_reduce sum");
  dt_work *work = NULL;
  RANK_OK(dt_comm_all_reduce_async(w, a, DT_REDUCE_MAX, &work));
  RANK_OK(dt_work_wait(work));
  dt_work_destroy(work);
  RANK_OK(host_copy(a, got, 4));
  CHECK_VALUES(got, want, 4, "all_reduce max of equal values");
  dt_tensor_release(a);

  /* all_gather, even. */
  RANK_OK(mirror_tensor(r, 2, value_of, r, &a));
  RANK_OK(mirror_tensor(r, 2 * n, zero, 0, &b));
  RANK_OK(dt_comm_all_gather_into_tensor(w, a, b));
  RANK_OK(host_copy(b, got, 4 * n));
  for (int s = 0; s < n; s++) {
    for (int64_t i = 0; i < 4; i++) want[s * 4 + i] = (float)value_of(i / 2, (int)(i % 2), s);
  }
  CHECK_VALUES(got, want, 4 * n, "all_gather");
  dt_tensor_release(a);
  dt_tensor_release(b);

  /* all_gather, uneven: rank s gives s + 1 rows (rank 0 one, ...). */
  int64_t counts[RANKS], total = 0;
  for (int s = 0; s < n; s++) total += counts[s] = s + 1;
  RANK_OK(mirror_tensor(r, counts[r], value_of, r, &a));
  RANK_OK(mirror_tensor(r, total, zero, 0, &b));
  RANK_OK(dt_comm_all_gather_uneven(w, a, b, counts));
  RANK_OK(host_copy(b, got, 2 * total));
  for (int s = 0, row = 0; s < n; s++) {
    for (int64_t i = 0; i < counts[s]; i++, row++) {
      for (int c = 0; c < 2; c++) want[row * 2 + c] = (float)value_of(i, c, s);
    }
  }
  CHECK_VALUES(got, want, 2 * total, "all_gather_uneven");
  dt_tensor_release(a);
  dt_tensor_release(b);

  /* reduce_scatter, uneven, sum: rank r keeps rows [sum(counts[0..r)), + counts[r]). */
  RANK_OK(mirror_tensor(r, total, value_of, r, &a));
  RANK_OK(mirror_tensor(r, counts[r], zero, 0, &b));
  RANK_OK(dt_comm_reduce_scatter_uneven(w, a, b, counts, DT_REDUCE_SUM));
  RANK_OK(host_copy(b, got, 2 * counts[r]));
  int64_t first = 0;
  for (int s = 0; s < r; s++) first += counts[s];
  for (int64_t i = 0; i < counts[r]; i++) {
    for (int c = 0; c < 2; c++) {
      want[i * 2 + c] = 0;
      for (int s = 0; s < n; s++) want[i * 2 + c] += (float)value_of(first + i, c, s);
    }
  }
  CHECK_VALUES(got, want, 2 * counts[r], "reduce_scatter_uneven");
  dt_tensor_release(a);
  dt_tensor_release(b);

  /* all_to_all, uneven: rank s sends d + 1 rows to rank d. */
  int64_t send_counts[RANKS], recv_counts[RANKS], sent = 0, received = 0;
  for (int d = 0; d < n; d++) sent += send_counts[d] = d + 1;
  for (int s = 0; s < n; s++) received += recv_counts[s] = r + 1;
  RANK_OK(mirror_tensor(r, sent, value_of, r, &a));
  RANK_OK(mirror_tensor(r, received, zero, 0, &b));
  RANK_OK(dt_comm_all_to_all(w, a, b, send_counts, recv_counts));
  RANK_OK(host_copy(b, got, 2 * received));
  int64_t offset_in_sender = 0; /* rows before mine in every sender: sum of d + 1 for d < r */
  for (int d = 0; d < r; d++) offset_in_sender += d + 1;
  for (int s = 0, row = 0; s < n; s++) {
    for (int64_t i = 0; i < r + 1; i++, row++) {
      for (int c = 0; c < 2; c++) want[row * 2 + c] = (float)value_of(offset_in_sender + i, c, s);
    }
  }
  CHECK_VALUES(got, want, 2 * received, "all_to_all uneven");
  dt_tensor_release(a);
  dt_tensor_release(b);

  /* broadcast from rank 1, scatter and gather from rank 2. */
  RANK_OK(mirror_tensor(r, 2, value_of, r, &a));
  RANK_OK(dt_comm_broadcast(w, a, 1));
  RANK_OK(host_copy(a, got, 4));
  for (int64_t i = 0; i < 4; i++) want[i] = (float)value_of(i / 2, (int)(i % 2), 1);
  CHECK_VALUES(got, want, 4, "broadcast");
  dt_tensor_release(a);
  RANK_OK(mirror_tensor(r, 2 * n, value_of, r, &a));
  RANK_OK(mirror_tensor(r, 2, zero, 0, &b));
  RANK_OK(dt_comm_scatter(w, r == 2 ? a : NULL, b, 2));
  RANK_OK(host_copy(b, got, 4));
  for (int64_t i = 0; i < 4; i++) want[i] = (float)value_of(2 * r + i / 2, (int)(i % 2), 2);
  CHECK_VALUES(got, want, 4, "scatter");
  RANK_OK(dt_comm_gather(w, b, r == 2 ? a : NULL, 2));
  if (r == 2) {
    RANK_OK(host_copy(a, got, 4 * n));
    for (int64_t i = 0; i < 4 * n; i++) want[i] = (float)value_of(i / 2, (int)(i % 2), 2);
    CHECK_VALUES(got, want, 4 * n, "gather");
  }
  dt_tensor_release(a);
  dt_tensor_release(b);

  /* send/recv around the ring. */
  RANK_OK(mirror_tensor(r, 2, value_of, r, &a));
  RANK_OK(mirror_tensor(r, 2, zero, 0, &b));
  dt_work *sw = NULL;
  RANK_OK(dt_comm_send_async(w, a, (r + 1) % n, &sw));
  RANK_OK(dt_comm_recv(w, b, (r + n - 1) % n));
  RANK_OK(dt_work_wait(sw));
  dt_work_destroy(sw);
  RANK_OK(host_copy(b, got, 4));
  for (int64_t i = 0; i < 4; i++) want[i] = (float)value_of(i / 2, (int)(i % 2), (r + n - 1) % n);
  CHECK_VALUES(got, want, 4, "recv");
  dt_tensor_release(a);
  dt_tensor_release(b);
  return DT_OK;
}

Test(threads_device, every_collective_moves_device_memory_by_markers) {
  SPAWN_OK(RANKS, all_kinds, NULL);
  /* 9 group collectives, one send and one recv per rank: every party marked its queue once
   * per collective and its queue waited once for the collective's end. */
  int per_rank = 9 + 2;
  cr_assert_eq(atomic_load(&n_marks), RANKS * per_rank, "marks %d", atomic_load(&n_marks));
  cr_assert_eq(atomic_load(&n_waits), RANKS * per_rank, "waits %d", atomic_load(&n_waits));
  /* One run (one task) per collective: 9 group collectives and 3 messages. */
  cr_assert_eq(atomic_load(&n_begins), 9 + RANKS, "begins %d", atomic_load(&n_begins));
  cr_assert_gt(atomic_load(&n_reduces), 0);
  cr_assert_gt(atomic_load(&n_cross_device), 0, "one device per rank: copies cross devices");
  cr_assert_eq(atomic_load(&n_live_markers), 0);
}

/* ---- Refusals and failures ------------------------------------------------------------ */

static dt_status mixed_devices(dt_comm *w, void *arg) {
  (void)arg;
  int r = dt_comm_rank(w);
  dt_tensor *t = NULL;
  if (r == 0) {
    RANK_OK(dt_full(2, (int64_t[]){2, 2}, 1.0, DT_F32, &t));
  } else {
    RANK_OK(mirror_tensor(r, 2, value_of, r, &t));
  }
  dt_status st = dt_comm_all_reduce(w, t, DT_REDUCE_SUM);
  RANK_CHECK(st == DT_ERR_MISMATCH, "got %s", dt_status_string(st));
  RANK_CHECK(strstr(dt_last_error(), "rank 0's tensors are on cpu") &&
                 strstr(dt_last_error(), "mirror:1"),
             "%s", dt_last_error());
  /* The group still works after a refused call. */
  dt_tensor *h = NULL;
  RANK_OK(dt_full(2, (int64_t[]){2, 2}, 1.0, DT_F32, &h));
  RANK_OK(dt_comm_all_reduce(w, h, DT_REDUCE_SUM));
  RANK_CHECK(((float *)dt_tensor_data(h))[3] == 2.0f, "sum after a mismatch");
  dt_tensor_release(h);
  dt_tensor_release(t);
  return DT_OK;
}

Test(threads_device, ranks_on_host_and_device_memory_mismatch_on_every_rank) {
  SPAWN_OK(2, mixed_devices, NULL);
}

static dt_status failing_copy(dt_comm *w, void *arg) {
  (void)arg;
  int r = dt_comm_rank(w);
  dt_tensor *a = NULL, *b = NULL;
  RANK_OK(mirror_tensor(r, 1, value_of, r, &a));
  RANK_OK(mirror_tensor(r, 2, zero, 0, &b));
  dt_status st = dt_comm_all_gather_into_tensor(w, a, b);
  RANK_CHECK(st == DT_ERR_INTERNAL, "got %s", dt_status_string(st));
  RANK_CHECK(strstr(dt_last_error(), "all_gather_into_tensor") &&
                 strstr(dt_last_error(), "injected failure"),
             "%s", dt_last_error());
  dt_tensor_release(a);
  dt_tensor_release(b);
  return DT_OK;
}

Test(threads_device, a_movers_error_reaches_every_rank) {
  atomic_store(&fail_copies, 1);
  SPAWN_OK(2, failing_copy, NULL);
  cr_assert_eq(atomic_load(&n_waits), 0, "no queue waits for a failed collective");
}

Test(threads_device, refusals_name_the_devices) {
  dt_comm *world = NULL;
  cr_assert_eq(dt_comm_init(&(dt_comm_options){.backend = "threads"}, &world), DT_OK);
  dt_tensor *m = NULL, *c = NULL;
  cr_assert_eq(mirror_tensor(0, 2, value_of, 0, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_full(2, (int64_t[]){2, 2}, 0.0, DT_F32, &c), DT_OK);
  /* A rank's two tensors of one collective are on one device. */
  cr_assert_eq(dt_comm_all_gather_into_tensor(world, m, c), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "in is on mirror:0 but out is on cpu"), "%s", dt_last_error());
  /* One rank: the all_reduce is queued through the mover and leaves the values. */
  cr_assert_eq(dt_comm_all_reduce(world, m, DT_REDUCE_SUM), DT_OK, "%s", dt_last_error());
  /* Without its mover the kind is refused, naming the device and the backend. */
  cr_assert_eq(dt__th_register_device(MIRROR, NULL), DT_OK);
  cr_assert_eq(dt_comm_all_reduce(world, m, DT_REDUCE_SUM), DT_ERR_UNSUPPORTED);
  cr_assert(strstr(dt_last_error(), "mirror:0") && strstr(dt_last_error(), "threads"), "%s",
            dt_last_error());
  cr_assert_eq(dt__th_register_device(MIRROR, &mirror_mover), DT_OK);
  /* The fake backend moves no device memory at all. */
  dt_comm *fake = NULL;
  cr_assert_eq(
      dt_comm_init(&(dt_comm_options){.backend = "fake", .rank = 0, .world_size = 2}, &fake),
      DT_OK);
  cr_assert_eq(dt_comm_all_reduce(fake, m, DT_REDUCE_SUM), DT_ERR_UNSUPPORTED);
  cr_assert(strstr(dt_last_error(), "fake"), "%s", dt_last_error());
  /* A mesh of device tensors over the threads backend is made (test_dist_device.c runs
   * DTensor programs on such meshes); over the fake backend it is refused. */
  dt_mesh *mesh = NULL;
  cr_assert_eq(dt_mesh_create_on("mirror", world, 1, (int[]){1}, NULL, &mesh), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(dt_mesh_device(mesh).kind, (dt_device_kind)MIRROR);
  dt_mesh_destroy(mesh);
  mesh = NULL;
  cr_assert_eq(dt_mesh_create_on("mirror", fake, 1, (int[]){2}, NULL, &mesh), DT_ERR_UNSUPPORTED);
  cr_assert_null(mesh);
  dt_comm_destroy(fake);
  dt_comm_destroy(world);
  dt_tensor_release(m);
  dt_tensor_release(c);
}
