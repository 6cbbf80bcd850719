/*
 * Bad inputs to the training-side API: the fused backward ops (through their dispatch
 * functions, as the backward formulas call them), context parallelism's layouts, sharding and
 * ring attention, the optimizer's state dict, dtensor/cuda.h in a build without CUDA, and the
 * device functions (a tensor on a device the host cannot read: the "mirror" kind of
 * test_device.c). Each misuse must return its status with a dt_last_error() naming the
 * function and the argument, without a crash, a leak or a hang.
 *
 * Includes ops/op_impl.h (the fused backward ops have no public entry of their own),
 * kernels/kernel_table.h and tensor/device_impl.h (to register the mirror device).
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
#include "dtensor/cuda.h"
#include "dtensor/dtensor.h"
#include "kernels/kernel_table.h"
#include "ops/op_impl.h"
#include "tensor/device_impl.h"

#define MIRROR_DEVICES 1 /* one stand-in device: index 1 is out of range */
#include "mirror_device.h"

#define OK(call) cr_assert_eq((call), DT_OK, "%s: %s", #call, dt_last_error())

/* call returns status and dt_last_error() contains every one of the words. */
#define REFUSED(call, status, ...)                                                                 \
  do {                                                                                             \
    dt_status refused_st_ = (call);                                                                \
    cr_assert_eq(refused_st_, (status), "%s returned %s (expected %s): %s", #call,                 \
                 dt_status_string(refused_st_), dt_status_string(status), dt_last_error());        \
    const char *refused_words_[] = {__VA_ARGS__};                                                  \
    for (size_t i_ = 0; i_ < sizeof refused_words_ / sizeof *refused_words_; i_++)                 \
      cr_assert(strstr(dt_last_error(), refused_words_[i_]) != NULL,                               \
                "%s: the message lacks `%s`: %s", #call, refused_words_[i_], dt_last_error());     \
  } while (0)

static dt_tensor *filled(int ndim, const int64_t *shape, dt_dtype dtype, double value) {
  dt_tensor *t = NULL;
  OK(dt_full(ndim, shape, value, dtype, &t));
  return t;
}

/* ---- The fused backward ops ------------------------------------------------------------------ */

Test(bad_inputs, softmax_backward_refuses_bad_arguments) {
  dt_tensor *g = filled(2, (int64_t[]){3, 4}, DT_F32, 1.0),
            *y = filled(2, (int64_t[]){3, 4}, DT_F32, 0.25);
  dt_tensor *yi = filled(2, (int64_t[]){3, 4}, DT_I64, 1.0),
            *y3 = filled(3, (int64_t[]){3, 4, 1}, DT_F32, 0.25);
  dt_tensor *out = NULL;
  REFUSED(dt__softmax_backward(g, y, 2, false, &out), DT_ERR_INVALID, "softmax_backward", "2");
  REFUSED(dt__softmax_backward(g, y, -3, true, &out), DT_ERR_INVALID, "log_softmax_backward");
  REFUSED(dt__softmax_backward(g, y, INT64_MIN, false, &out), DT_ERR_INVALID, "softmax_backward");
  REFUSED(dt__softmax_backward(yi, yi, 0, false, &out), DT_ERR_DTYPE, "softmax_backward", "output");
  REFUSED(dt__softmax_backward(g, y3, 0, false, &out), DT_ERR_SHAPE, "grad_output", "[3, 4]");
  REFUSED(dt__softmax_backward(NULL, y, 0, false, &out), DT_ERR_INVALID, "softmax_backward");
  REFUSED(dt__softmax_backward(g, NULL, 0, false, &out), DT_ERR_INVALID, "softmax_backward");
  cr_assert_null(out);
  /* Empty lines: a [0, 4] and a [3, 0] gradient are empty gradients, not errors. */
  dt_tensor *e = filled(2, (int64_t[]){0, 4}, DT_F32, 0),
            *f = filled(2, (int64_t[]){3, 0}, DT_F64, 0);
  OK(dt__softmax_backward(e, e, 1, false, &out));
  cr_assert_eq(dt_tensor_numel(out), 0);
  dt_tensor_release(out), out = NULL;
  OK(dt__softmax_backward(f, f, -1, true, &out));
  cr_assert(dt_tensor_size(out, 0) == 3 && dt_tensor_size(out, 1) == 0);
  dt_tensor_release(out);
  dt_tensor_release(g), dt_tensor_release(y), dt_tensor_release(yi), dt_tensor_release(y3);
  dt_tensor_release(e), dt_tensor_release(f);
}

Test(bad_inputs, norm_backward_refuses_bad_arguments) {
  dt_tensor *g = filled(2, (int64_t[]){3, 4}, DT_F32, 1.0),
            *x = filled(2, (int64_t[]){3, 4}, DT_F32, 0.5);
  dt_tensor *w5 = filled(1, (int64_t[]){5}, DT_F32, 1.0),
            *wi = filled(1, (int64_t[]){4}, DT_I32, 1.0);
  dt_tensor *out = NULL, *gw = NULL, *gb = NULL;
  /* normalized_shape: none, NULL, longer than the input, not the input's tail, negative. */
  REFUSED(dt__norm_backward_input(false, g, x, 0, (int64_t[]){4}, NULL, 1e-5, &out), DT_ERR_INVALID,
          "layer_norm_backward", "normalized_shape");
  REFUSED(dt__norm_backward_input(true, g, x, -1, (int64_t[]){4}, NULL, 1e-5, &out), DT_ERR_INVALID,
          "rms_norm_backward", "normalized_shape");
  REFUSED(dt__norm_backward_input(false, g, x, 1, NULL, NULL, 1e-5, &out), DT_ERR_INVALID,
          "layer_norm_backward", "normalized_shape");
  REFUSED(dt__norm_backward_input(false, g, x, 3, (int64_t[]){1, 3, 4}, NULL, 1e-5, &out),
          DT_ERR_SHAPE, "layer_norm_backward", "normalized_shape");
  REFUSED(dt__norm_backward_input(false, g, x, 1, (int64_t[]){-4}, NULL, 1e-5, &out), DT_ERR_SHAPE,
          "layer_norm_backward", "[-4]");
  /* weight: another shape, an integer dtype. */
  REFUSED(dt__norm_backward_input(true, g, x, 1, (int64_t[]){4}, w5, 1e-5, &out), DT_ERR_SHAPE,
          "rms_norm_backward", "weight");
  REFUSED(dt__norm_backward_input(false, g, x, 1, (int64_t[]){4}, wi, 1e-5, &out), DT_ERR_DTYPE,
          "layer_norm_backward", "weight");
  /* The parameters' gradients: the same checks. */
  REFUSED(dt__norm_backward_affine(false, g, x, 1, (int64_t[]){3}, 1e-5, &gw, &gb), DT_ERR_SHAPE,
          "layer_norm_backward_affine", "normalized_shape");
  REFUSED(dt__norm_backward_affine(true, x, wi, 1, (int64_t[]){4}, 1e-5, &gw, NULL), DT_ERR_DTYPE,
          "rms_norm_backward_weight");
  cr_assert(out == NULL && gw == NULL && gb == NULL);
  /* Empty: no rows gives zero parameter gradients of normalized_shape. */
  dt_tensor *e = filled(2, (int64_t[]){0, 4}, DT_F64, 0);
  OK(dt__norm_backward_affine(false, e, e, 1, (int64_t[]){4}, 1e-5, &gw, &gb));
  double v[4];
  OK(dt_tensor_to_doubles(gw, v, 4));
  for (int i = 0; i < 4; i++) cr_assert_eq(v[i], 0.0);
  OK(dt_tensor_to_doubles(gb, v, 4));
  for (int i = 0; i < 4; i++) cr_assert_eq(v[i], 0.0);
  OK(dt__norm_backward_input(true, e, e, 1, (int64_t[]){4}, NULL, 1e-5, &out));
  cr_assert_eq(dt_tensor_numel(out), 0);
  dt_tensor_release(out), dt_tensor_release(gw), dt_tensor_release(gb), dt_tensor_release(e);
  dt_tensor_release(g), dt_tensor_release(x), dt_tensor_release(w5), dt_tensor_release(wi);
}

Test(bad_inputs, embedding_backward_refuses_bad_arguments) {
  dt_tensor *w = filled(2, (int64_t[]){5, 3}, DT_F32, 0),
            *g = filled(2, (int64_t[]){2, 3}, DT_F32, 1);
  int64_t neg[2] = {1, -1}, far[2] = {0, 5}, good[2] = {4, 4};
  dt_tensor *in = NULL, *ifar = NULL, *igood = NULL, *ifl = NULL, *out = NULL;
  OK(dt_from_data(neg, 1, (int64_t[]){2}, DT_I64, &in));
  OK(dt_from_data(far, 1, (int64_t[]){2}, DT_I64, &ifar));
  OK(dt_from_data(good, 1, (int64_t[]){2}, DT_I64, &igood));
  ifl = filled(1, (int64_t[]){2}, DT_F32, 1);
  REFUSED(dt__embedding_backward(w, in, g, &out), DT_ERR_INDEX, "embedding_backward", "-1");
  REFUSED(dt__embedding_backward(w, ifar, g, &out), DT_ERR_INDEX, "embedding_backward", "5");
  REFUSED(dt__embedding_backward(w, ifl, g, &out), DT_ERR_DTYPE, "embedding_backward", "indices");
  dt_tensor *w1 = filled(1, (int64_t[]){5}, DT_F32, 0),
            *wi = filled(2, (int64_t[]){5, 3}, DT_I64, 0);
  REFUSED(dt__embedding_backward(w1, igood, g, &out), DT_ERR_SHAPE, "embedding_backward", "weight");
  REFUSED(dt__embedding_backward(wi, igood, g, &out), DT_ERR_DTYPE, "embedding_backward");
  dt_tensor *g4 = filled(2, (int64_t[]){2, 4}, DT_F32, 1);
  REFUSED(dt__embedding_backward(w, igood, g4, &out), DT_ERR_SHAPE, "grad_output", "[2, 4]");
  REFUSED(dt__embedding_backward(w, NULL, g, &out), DT_ERR_INVALID, "embedding_backward");
  cr_assert_null(out);
  /* No indices: a zero gradient of the weight's shape; a repeated index accumulates. */
  dt_tensor *ie = NULL, *ge = filled(2, (int64_t[]){0, 3}, DT_F32, 1);
  OK(dt_from_data(good, 1, (int64_t[]){0}, DT_I64, &ie));
  OK(dt__embedding_backward(w, ie, ge, &out));
  double v[15];
  OK(dt_tensor_to_doubles(out, v, 15));
  for (int i = 0; i < 15; i++) cr_assert_eq(v[i], 0.0);
  dt_tensor_release(out);
  OK(dt__embedding_backward(w, igood, g, &out));
  OK(dt_tensor_to_doubles(out, v, 15));
  for (int i = 0; i < 15; i++) cr_assert_eq(v[i], i >= 12 ? 2.0 : 0.0);
  dt_tensor_release(out);
  dt_tensor *list[] = {w, g, in, ifar, igood, ifl, w1, wi, g4, ie, ge};
  for (size_t i = 0; i < sizeof list / sizeof *list; i++) dt_tensor_release(list[i]);
}

/* The row window of a vocabulary-parallel lookup (ints {offset, rows of the whole table}, which
 * the CLI's raw ints also set): an offset whose window passes INT64_MAX is refused, not wrapped
 * around into a window that fits. */
Test(bad_inputs, embedding_row_window_does_not_wrap) {
  dt_tensor *w = filled(2, (int64_t[]){5, 3}, DT_F32, 1),
            *g = filled(2, (int64_t[]){2, 3}, DT_F32, 1);
  dt_tensor *idx = filled(1, (int64_t[]){2}, DT_I64, 1), *out = NULL;
  const int64_t bad[][2] = {
      {INT64_MAX, INT64_MAX}, {INT64_MAX - 2, INT64_MAX}, {0, 4}, {-1, 9}, {3, -9},
      {INT64_MAX, INT64_MIN}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    for (int backward = 0; backward < 2; backward++) {
      dt_op_call call = {.op = backward ? DT_OP_EMBEDDING_BACKWARD : DT_OP_EMBEDDING,
                         .n_inputs = backward ? 3 : 2,
                         .inputs = {w, idx, g},
                         .n_ints = 2,
                         .ints = {bad[i][0], bad[i][1]},
                         .n_outputs = 1,
                         .outputs = &out};
      REFUSED(dt__dispatch(&call), DT_ERR_INVALID, backward ? "embedding_backward" : "embedding",
              "row window");
      cr_assert_null(out);
    }
  }
  /* The last rows of the largest table still fit. */
  dt_op_call call = {.op = DT_OP_EMBEDDING,
                     .n_inputs = 2,
                     .inputs = {w, idx},
                     .n_ints = 2,
                     .ints = {INT64_MAX - 5, INT64_MAX},
                     .n_outputs = 1,
                     .outputs = &out};
  OK(dt__dispatch(&call));
  double v[6];
  OK(dt_tensor_to_doubles(out, v, 6));
  for (int i = 0; i < 6; i++) cr_assert_eq(v[i], 0.0); /* index 1 lies outside these rows */
  dt_tensor_release(out), dt_tensor_release(w), dt_tensor_release(g), dt_tensor_release(idx);
}

/* scatter_add's row window (ints {dim, offset, rows of the whole}): the same checks, no wrap. */
Test(bad_inputs, scatter_add_row_window_does_not_wrap) {
  dt_tensor *self = filled(2, (int64_t[]){3, 2}, DT_F32, 0),
            *src = filled(2, (int64_t[]){2, 2}, DT_F32, 1);
  dt_tensor *idx = filled(2, (int64_t[]){2, 2}, DT_I64, 0), *out = NULL;
  const int64_t bad[][2] = {{INT64_MAX - 1, INT64_MAX}, {0, 2}, {-1, 9}, {1, INT64_MIN}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    dt_op_call call = {.op = DT_OP_SCATTER_ADD,
                       .n_inputs = 3,
                       .inputs = {self, idx, src},
                       .n_ints = 3,
                       .ints = {0, bad[i][0], bad[i][1]},
                       .n_outputs = 1,
                       .outputs = &out};
    REFUSED(dt__dispatch(&call), DT_ERR_INVALID, "scatter_add", "row window offset");
    cr_assert_null(out);
  }
  dt_tensor_release(self), dt_tensor_release(src), dt_tensor_release(idx);
}

/* ---- Context parallelism --------------------------------------------------------------------- */

Test(bad_inputs, cp_segments_of_huge_sequences) {
  int64_t st[2], len[2];
  int n = 0;
  /* Lengths near INT64_MAX: the chunk arithmetic must not overflow. */
  OK(dt_parallel_cp_segments(INT64_MAX, 2, 1, DT_CP_LAYOUT_HEAD_TAIL, st, len, &n));
  int64_t chunk = INT64_MAX / 4 + 1;
  cr_assert(n == 2 && st[0] == chunk && len[0] == chunk, "%lld %lld", (long long)st[0],
            (long long)len[0]);
  cr_assert(st[1] == 2 * chunk && len[1] == chunk);
  OK(dt_parallel_cp_segments(INT64_MAX, 2, 0, DT_CP_LAYOUT_HEAD_TAIL, st, len, &n));
  cr_assert(st[1] == 3 * chunk && len[1] == INT64_MAX - 3 * chunk);
  OK(dt_parallel_cp_segments(INT64_MAX - 1, INT_MAX, INT_MAX - 1, DT_CP_LAYOUT_CONTIGUOUS, st, len,
                             &n));
  int64_t size = (INT64_MAX - 1) / INT_MAX + ((INT64_MAX - 1) % INT_MAX != 0);
  cr_assert(n == 1 && st[0] == (int64_t)(INT_MAX - 1) * size);
  cr_assert_eq(st[0] + len[0], INT64_MAX - 1);
  OK(dt_parallel_cp_segments(0, 3, 2, DT_CP_LAYOUT_HEAD_TAIL, st, len, &n));
  cr_assert(len[0] == 0 && len[1] == 0);
  REFUSED(dt_parallel_cp_segments(-1, 2, 0, DT_CP_LAYOUT_HEAD_TAIL, st, len, &n), DT_ERR_INVALID,
          "dt_parallel_cp_segments", "seq_len -1");
  REFUSED(dt_parallel_cp_segments(8, 0, 0, DT_CP_LAYOUT_HEAD_TAIL, st, len, &n), DT_ERR_INVALID,
          "dt_parallel_cp_segments", "cp_size 0");
  REFUSED(dt_parallel_cp_segments(8, 2, -1, DT_CP_LAYOUT_HEAD_TAIL, st, len, &n), DT_ERR_INVALID,
          "cp_rank -1");
  REFUSED(dt_parallel_cp_segments(8, 2, 0, DT_CP_LAYOUT_HEAD_TAIL, st, len, NULL), DT_ERR_INVALID,
          "n_segments");
}

static dt_status cp_misuse_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, (const char *[]){"cp"}, &mesh));
  dt_tensor *x = NULL, *q = NULL, *qi = NULL, *q3 = NULL, *k5 = NULL, *out = NULL, *m = NULL;
  dt_tensor *mi = NULL, *s = NULL;
  RANK_OK(dt_zeros(3, (int64_t[]){2, 6, 3}, DT_F32, &x));
  RANK_OK(dt_zeros(4, (int64_t[]){1, 2, 6, 4}, DT_F32, &q));
  RANK_OK(dt_zeros(4, (int64_t[]){1, 2, 6, 4}, DT_I32, &qi));
  RANK_OK(dt_zeros(3, (int64_t[]){1, 2, 6}, DT_F32, &q3));
  RANK_OK(dt_zeros(4, (int64_t[]){1, 2, 5, 4}, DT_F32, &k5));
  RANK_OK(dt_zeros(2, (int64_t[]){6, 6}, DT_F32, &m));
  RANK_OK(dt_zeros(2, (int64_t[]){6, 6}, DT_I64, &mi));
  RANK_OK(dt_zeros(0, NULL, DT_F32, &s));
  struct {
    dt_status got, want;
    const char *words[2];
  } c[32];
  int n = 0;
#define CASE(call, status, w1, w2)                                                                 \
  c[n++] = (__typeof__(c[0])){(call), (status), {(w1), (w2)}};                                     \
  RANK_CHECK(c[n - 1].got == c[n - 1].want && strstr(dt_last_error(), w1) &&                       \
                 strstr(dt_last_error(), w2),                                                      \
             "%s: %s: %s", #call, dt_status_string(c[n - 1].got), dt_last_error())
  const char *sh = "dt_parallel_cp_shard_sequence", *un = "dt_parallel_cp_unshard_sequence";
  CASE(dt_parallel_cp_shard_sequence(NULL, 0, x, 1, 0, &out), DT_ERR_INVALID, sh, "mesh");
  CASE(dt_parallel_cp_shard_sequence(mesh, 1, x, 1, 0, &out), DT_ERR_INVALID, sh, "cp_dim 1");
  CASE(dt_parallel_cp_shard_sequence(mesh, -1, x, 1, 0, &out), DT_ERR_INVALID, sh, "cp_dim -1");
  CASE(dt_parallel_cp_shard_sequence(mesh, 0, x, 3, 0, &out), DT_ERR_INDEX, sh, "seq_dim 3");
  CASE(dt_parallel_cp_shard_sequence(mesh, 0, x, -4, 0, &out), DT_ERR_INDEX, sh, "seq_dim -4");
  CASE(dt_parallel_cp_shard_sequence(mesh, 0, x, INT64_MIN, 0, &out), DT_ERR_INDEX, sh, "seq_dim");
  CASE(dt_parallel_cp_shard_sequence(mesh, 0, s, 0, 0, &out), DT_ERR_INDEX, sh, "seq_dim 0");
  CASE(dt_parallel_cp_shard_sequence(mesh, 0, x, 1, (dt_cp_layout)5, &out), DT_ERR_INVALID, sh,
       "layout 5");
  CASE(dt_parallel_cp_shard_sequence(mesh, 0, x, 1, 0, NULL), DT_ERR_INVALID, sh, "out");
  CASE(dt_parallel_cp_unshard_sequence(mesh, 0, NULL, 1, 0, &out), DT_ERR_INVALID, un, "local");
  CASE(dt_parallel_cp_unshard_sequence(mesh, 2, x, 1, 0, &out), DT_ERR_INVALID, un, "cp_dim 2");
  const char *fa = "dt_parallel_cp_attention";
  dt_cp_attention_options o = {0};
  CASE(dt_parallel_cp_attention(NULL, 0, q, q, q, NULL, NULL, &out, NULL), DT_ERR_INVALID, fa,
       "mesh");
  CASE(dt_parallel_cp_attention(mesh, 3, q, q, q, NULL, NULL, &out, NULL), DT_ERR_INVALID, fa,
       "cp_dim 3");
  CASE(dt_parallel_cp_attention(mesh, 0, q, NULL, q, NULL, NULL, &out, NULL), DT_ERR_INVALID, fa,
       "k is NULL");
  CASE(dt_parallel_cp_attention(mesh, 0, q, q, q, NULL, NULL, NULL, NULL), DT_ERR_INVALID, fa,
       "out is NULL");
  CASE(dt_parallel_cp_attention(mesh, 0, qi, qi, qi, NULL, NULL, &out, NULL), DT_ERR_DTYPE, fa,
       "int32");
  CASE(dt_parallel_cp_attention(mesh, 0, q3, q3, q3, NULL, NULL, &out, NULL), DT_ERR_SHAPE, fa,
       "3 dims");
  CASE(dt_parallel_cp_attention(mesh, 0, q, q, k5, NULL, NULL, &out, NULL), DT_ERR_SHAPE, fa,
       "[1, 2, 5, 4]");
  o.is_causal = true;
  CASE(dt_parallel_cp_attention(mesh, 0, q, k5, k5, NULL, &o, &out, NULL), DT_ERR_SHAPE, fa,
       "causal");
  o = (dt_cp_attention_options){.scale = NAN};
  CASE(dt_parallel_cp_attention(mesh, 0, q, q, q, NULL, &o, &out, NULL), DT_ERR_INVALID, fa,
       "scale");
  o = (dt_cp_attention_options){.scale = -1};
  CASE(dt_parallel_cp_attention(mesh, 0, q, q, q, NULL, &o, &out, NULL), DT_ERR_INVALID, fa,
       "scale -1");
  o = (dt_cp_attention_options){.scale = INFINITY};
  CASE(dt_parallel_cp_attention(mesh, 0, q, q, q, NULL, &o, &out, NULL), DT_ERR_INVALID, fa,
       "scale inf");
  o = (dt_cp_attention_options){.layout = (dt_cp_layout)-3};
  CASE(dt_parallel_cp_attention(mesh, 0, q, q, q, NULL, &o, &out, NULL), DT_ERR_INVALID, fa,
       "layout -3");
  CASE(dt_parallel_cp_attention(mesh, 0, q, q, q, mi, NULL, &out, NULL), DT_ERR_DTYPE, fa, "mask");
  CASE(dt_parallel_cp_attention(mesh, 0, q, q, q, k5, NULL, &out, NULL), DT_ERR_SHAPE, fa, "mask");
  RANK_CHECK(out == NULL, "an output after a refusal");
  /* A well-formed call still works after the refusals (no collective left half-done). */
  RANK_OK(dt_parallel_cp_attention(mesh, 0, q, q, q, m, NULL, &out, NULL));
  RANK_CHECK(dt_tensor_ndim(out) == 4, "output");
  dt_tensor_release(out);
#undef CASE
  dt_tensor *list[] = {x, q, qi, q3, k5, m, mi, s};
  for (size_t i = 0; i < sizeof list / sizeof *list; i++) dt_tensor_release(list[i]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(bad_inputs, cp_functions_refuse_bad_arguments) { SPAWN_OK(1, cp_misuse_rank, NULL); }

/* ---- dtensor/cuda.h without CUDA ------------------------------------------------------------- */

Test(bad_inputs, cuda_api_without_cuda) {
  int count = 7;
  dt_status st = dt_cuda_device_count(&count);
  if (st == DT_OK && count > 0) cr_skip_test("a GPU is present");
  REFUSED(dt_cuda_device_count(NULL), DT_ERR_INVALID, "dt_cuda_device_count", "out");
  cr_assert_not(dt_cuda_is_available());
  cr_assert_eq(count, 0);
  dt_cuda_allocator_stats stats;
  memset(&stats, 0xff, sizeof stats);
  REFUSED(dt_cuda_memory_stats(0, NULL), DT_ERR_INVALID, "dt_cuda_memory_stats", "out");
  REFUSED(dt_cuda_memory_stats(0, &stats), DT_ERR_UNSUPPORTED, "dt_cuda_memory_stats");
  cr_assert(stats.allocated == 0 && stats.n_ooms == 0);
  REFUSED(dt_cuda_synchronize(-1), DT_ERR_UNSUPPORTED, "dt_cuda_synchronize");
  REFUSED(dt_cuda_synchronize(3), DT_ERR_UNSUPPORTED, "dt_cuda_synchronize");
  REFUSED(dt_cuda_reset_peak_memory_stats(-1), DT_ERR_UNSUPPORTED,
          "dt_cuda_reset_peak_memory_stats");
  REFUSED(dt_cuda_empty_cache(0), DT_ERR_UNSUPPORTED, "dt_cuda_empty_cache");
  REFUSED(dt_cuda_get_allow_tf32(NULL), DT_ERR_INVALID, "dt_cuda_get_allow_tf32", "out");
  if (st == DT_ERR_UNSUPPORTED) {
    /* A build without CUDA says so in every function. */
    REFUSED(dt_cuda_device_count(&count), DT_ERR_UNSUPPORTED, "dt_cuda_device_count",
            "without CUDA");
    REFUSED(dt_cuda_set_allow_tf32(true), DT_ERR_UNSUPPORTED, "dt_cuda_set_allow_tf32");
    bool tf32 = true;
    REFUSED(dt_cuda_get_allow_tf32(&tf32), DT_ERR_UNSUPPORTED, "dt_cuda_get_allow_tf32");
    cr_assert_not(tf32);
  }
}

/* ---- Devices --------------------------------------------------------------------------------- */

static const dt_device mirror0 = {(dt_device_kind)MIRROR, 0};

static void register_mirror(void) {
  static const dt_op ops[] = {DT_OP_CONTIGUOUS, DT_OP_CLONE, DT_OP_DETACH, DT_OP_COPY_};
  dt_op_kernel_fn table[DT_OP_COUNT] = {0};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) table[ops[i]] = dt__cpu_kernels[ops[i]];
  cr_assert_eq(dt__device_register_memory(MIRROR, &mirror_memory), DT_OK);
  cr_assert_eq(dt__kernels_register(MIRROR, table), DT_OK);
}

static void unregister_mirror(void) {
  cr_assert_eq(atomic_load(&live_blocks), 0, "%d mirror blocks leaked", atomic_load(&live_blocks));
  dt__kernels_register(MIRROR, NULL);
  dt__device_register_memory(MIRROR, NULL);
}

TestSuite(bad_devices, .init = register_mirror, .fini = unregister_mirror);

Test(bad_devices, to_device_refuses_bad_devices) {
  dt_tensor *t = filled(1, (int64_t[]){4}, DT_F32, 2.0), *out = NULL;
  REFUSED(dt_to_device(t, (dt_device){(dt_device_kind)97, 0}, &out), DT_ERR_UNSUPPORTED,
          "dt_to_device");
  REFUSED(dt_to_device(t, (dt_device){(dt_device_kind)-1, 0}, &out), DT_ERR_UNSUPPORTED,
          "dt_to_device");
  REFUSED(dt_to_device(t, (dt_device){DT_DEVICE_CPU, 3}, &out), DT_ERR_UNSUPPORTED, "dt_to_device",
          "cpu");
  REFUSED(dt_to_device(t, (dt_device){(dt_device_kind)MIRROR, 1}, &out), DT_ERR_UNSUPPORTED,
          "dt_to_device", "mirror:1");
  REFUSED(dt_to_device(t, (dt_device){(dt_device_kind)MIRROR, -1}, &out), DT_ERR_UNSUPPORTED,
          "dt_to_device");
  if (!dt_cuda_is_available())
    REFUSED(dt_to_device(t, (dt_device){DT_DEVICE_CUDA, 0}, &out), DT_ERR_UNSUPPORTED,
            "dt_to_device", "cuda:0");
  REFUSED(dt_to_device(NULL, mirror0, &out), DT_ERR_INVALID, "dt_to_device");
  REFUSED(dt_to_device(t, mirror0, NULL), DT_ERR_INVALID, "dt_to_device");
  cr_assert_null(out);
  dt_device d;
  /* strtol alone took a space or a sign before the index ("cuda: 1", "cuda:+1"). */
  const char *bad[] = {"",    "cuda:",   "cuda:-1", "cpu:x",   "cuda:99999999999999999999",
                       "gpu", "cuda:1x", "cuda: 1", "cuda:+1", "cpu: 0"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    REFUSED(dt_device_parse(bad[i], &d), DT_ERR_INVALID, "dt_device_parse");
  REFUSED(dt_device_parse(NULL, &d), DT_ERR_INVALID, "dt_device_parse");
  REFUSED(dt_device_parse("cpu", NULL), DT_ERR_INVALID, "dt_device_parse");
  char buf[4] = "xyz";
  cr_assert_str_eq(dt_device_format((dt_device){(dt_device_kind)97, 2}, buf, 0), "");
  cr_assert_eq(buf[0], 'x');
  dt_tensor_release(t);
}

Test(bad_devices, host_reads_of_device_memory_are_refused) {
  dt_tensor *t = filled(1, (int64_t[]){1}, DT_I64, 3.0), *m = NULL;
  OK(dt_to_device(t, mirror0, &m));
  dt_device_parse("nothing", NULL); /* any other last error */
  cr_assert_null(dt_tensor_data(m));
  cr_assert(strstr(dt_last_error(), "dt_tensor_data") != NULL, "%s", dt_last_error());
  double v = 0;
  cr_assert_neq(dt_tensor_get(m, (int64_t[]){0}, &v), DT_OK);
  cr_assert_neq(dt_tensor_to_doubles(m, &v, 1), DT_OK);
  dt_tensor_release(m), dt_tensor_release(t);
}

/* An optimizer state dict whose entries were replaced by tensors on a device the host cannot
 * read: refused, naming the entry, nothing dereferenced and nothing changed. */
Test(bad_devices, optimizer_state_dict_on_another_device) {
  dt_tensor *p = NULL;
  OK(dt_randn(1, (int64_t[]){4}, DT_F32, 3, &p));
  OK(dt_tensor_set_requires_grad(p, true));
  dt_optimizer *opt = NULL;
  OK(dt_optimizer_create_adam(1, &p, NULL, &opt));
  dt_optimizer_state_dict sd = {0};
  OK(dt_optimizer_get_state_dict(opt, (const char *[]){"w"}, NULL, &sd));
  double lr0 = 0, lr = 0;
  OK(dt_optimizer_get_hyperparameter(opt, "lr", &lr0));
  /* The state dict asks for another lr: a refusal must leave the optimizer's as it was. */
  for (int e = 0; e < sd.count; e++)
    if (strcmp(sd.names[e], "optim.hyper.lr") == 0) *(double *)dt_tensor_data(sd.tensors[e]) = 0.5;
  for (int e = 0; e < sd.count; e++) {
    dt_tensor *orig = sd.tensors[e], *moved = NULL;
    dt_tensor *host = NULL;
    OK(dt_clone(orig, &host));
    OK(dt_to_device(host, mirror0, &moved));
    dt_tensor_release(host);
    sd.tensors[e] = moved;
    dt_status st = dt_optimizer_load_state_dict(opt, &sd);
    cr_assert(st == DT_ERR_INVALID || st == DT_ERR_UNSUPPORTED, "entry %s: %s: %s", sd.names[e],
              dt_status_string(st), dt_last_error());
    cr_assert(strstr(dt_last_error(), "dt_optimizer_load_state_dict") &&
                  strstr(dt_last_error(), sd.names[e]),
              "entry %s: %s", sd.names[e], dt_last_error());
    sd.tensors[e] = orig;
    dt_tensor_release(moved);
    OK(dt_optimizer_get_hyperparameter(opt, "lr", &lr));
    cr_assert_eq(lr, lr0, "entry %s: lr %g after a refusal", sd.names[e], lr);
  }
  /* The state dict as it was still loads. */
  OK(dt_optimizer_load_state_dict(opt, &sd));
  OK(dt_optimizer_get_hyperparameter(opt, "lr", &lr));
  cr_assert_eq(lr, 0.5);
  dt_optimizer_state_dict_clear(&sd);
  dt_optimizer_destroy(opt);
  dt_tensor_release(p);
}

Test(bad_devices, mesh_on_an_unavailable_device_kind) {
  dt_mesh *mesh = (dt_mesh *)(uintptr_t)1;
  REFUSED(dt_mesh_create_on("bogus", NULL, 1, (int[]){1}, NULL, &mesh), DT_ERR_INVALID,
          "dt_mesh_create_on");
  cr_assert_null(mesh);
  REFUSED(dt_mesh_create_on(NULL, NULL, 1, (int[]){1}, NULL, &mesh), DT_ERR_INVALID,
          "dt_mesh_create_on");
  REFUSED(dt_mesh_create_on("mirror:0", NULL, 1, (int[]){1}, NULL, &mesh), DT_ERR_INVALID,
          "dt_mesh_create_on", "mirror:0");
  /* An available kind (the stand-in) without a world: the argument is named. */
  REFUSED(dt_mesh_create_on("mirror", NULL, 1, (int[]){1}, NULL, &mesh), DT_ERR_INVALID,
          "dt_mesh_create_on", "world");
  if (!dt_cuda_is_available())
    REFUSED(dt_mesh_create_on("cuda", NULL, 1, (int[]){1}, NULL, &mesh), DT_ERR_UNSUPPORTED,
            "dt_mesh_create_on", "cuda");
  cr_assert_null(mesh);
  REFUSED(dt_mesh_create_on("cpu", NULL, 1, (int[]){1}, NULL, NULL), DT_ERR_INVALID,
          "dt_mesh_create_on", "out");
}

/* A gradient on another device than its tensor's (PyTorch: "assigned grad has data located on
 * a different device"), and parameters the host cannot read: refused, never dereferenced. */
Test(bad_devices, gradients_and_parameters_on_another_device) {
  dt_tensor *p = filled(1, (int64_t[]){4}, DT_F32, 1.0),
            *g = filled(1, (int64_t[]){4}, DT_F32, 1.0);
  dt_tensor *gm = NULL, *pm = NULL;
  OK(dt_tensor_set_requires_grad(p, true));
  OK(dt_to_device(g, mirror0, &gm));
  REFUSED(dt_tensor_set_grad(p, gm), DT_ERR_INVALID, "dt_tensor_set_grad", "mirror:0", "cpu");
  dt_tensor *now = NULL;
  OK(dt_tensor_grad(p, &now));
  cr_assert_null(now);
  OK(dt_to_device(g, mirror0, &pm));
  OK(dt_tensor_set_requires_grad(pm, true));
  dt_optimizer *opt = NULL;
  REFUSED(dt_optimizer_create_sgd(1, &pm, NULL, &opt), DT_ERR_UNSUPPORTED,
          "dt_optimizer_create_sgd", "parameter 0", "mirror:0");
  cr_assert_null(opt);
  double norm = 1;
  REFUSED(dt_clip_grad_norm(1, &pm, 1.0, NULL, &norm), DT_ERR_UNSUPPORTED, "dt_clip_grad_norm",
          "parameter 0", "mirror:0");
  dt_tensor_release(p), dt_tensor_release(g), dt_tensor_release(gm), dt_tensor_release(pm);
}
