/* embedding_backward, the weight's gradient of embedding in one pass: against a plain
 * accumulation loop in double (repeated indices, float32 and float64, int32 indices, a strided
 * gradient), through dt_backward of dt_embedding, and its argument errors. Includes
 * ops/op_impl.h: dt__embedding_backward is the op's internal dispatch function (the public path
 * to it is dt_backward through embedding). */
#include <criterion/criterion.h>
#include <math.h>

#include "dtensor/dtensor.h"
#include "ops/op_impl.h"
#include "reference.h"

#define V 9
#define D 5
#define B 3
#define T 4

static const int64_t idx_values[B * T] = {2, 7, 2, 0, 8, 7, 7, 1, 2, 5, 0, 7};

/* want[v, :] = the sum of g's rows whose index is v. */
static void reference(const double *g, double *want) {
  memset(want, 0, sizeof(double) * V * D);
  for (int r = 0; r < B * T; r++)
    for (int j = 0; j < D; j++) want[idx_values[r] * D + j] += g[r * D + j];
}

static dt_tensor *indices(dt_dtype dtype) {
  double v[B * T];
  for (int i = 0; i < B * T; i++) v[i] = (double)idx_values[i];
  return ref_tensor(2, (int64_t[]){B, T}, dtype, v);
}

Test(embedding_backward, matches_a_plain_accumulation) {
  const dt_dtype dtypes[] = {DT_F32, DT_F64};
  for (int k = 0; k < 2; k++) {
    for (int strided = 0; strided < 2; strided++) {
      dt_dtype dt = dtypes[k];
      dt_tensor *w = ref_random(2, (int64_t[]){V, D}, dt, -1, 1, 3);
      dt_tensor *idx = indices(strided ? DT_I32 : DT_I64);
      int64_t gshape[3] = {B, T, D};
      dt_tensor *g = strided ? ref_random_strided(3, gshape, dt, -2, 2, 4)
                             : ref_random(3, gshape, dt, -2, 2, 4);
      double *gv = ref_values(g), want[V * D];
      reference(gv, want);
      dt_tensor *out = NULL;
      cr_assert_eq(dt__embedding_backward(w, idx, g, &out), DT_OK, "%s", dt_last_error());
      ref_assert_close(out, 2, (int64_t[]){V, D}, dt, want, dt == DT_F32 ? 1e-6 : 1e-15, 1e-6);
      free(gv);
      dt_tensor_release(w);
      dt_tensor_release(idx);
      dt_tensor_release(g);
      dt_tensor_release(out);
    }
  }
}

Test(embedding_backward, autograd_of_embedding) {
  dt_tensor *w = ref_random(2, (int64_t[]){V, D}, DT_F32, -1, 1, 3), *idx = indices(DT_I64);
  dt_tensor *g = ref_random(3, (int64_t[]){B, T, D}, DT_F32, -2, 2, 5), *y = NULL, *gw = NULL;
  cr_assert_eq(dt_tensor_set_requires_grad(w, true), DT_OK);
  cr_assert_eq(dt_embedding(w, idx, &y), DT_OK);
  cr_assert_eq(dt_backward(y, g), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_grad(w, &gw), DT_OK);
  double *gv = ref_values(g), want[V * D];
  reference(gv, want);
  ref_assert_close(gw, 2, (int64_t[]){V, D}, DT_F32, want, 1e-6, 1e-6);
  free(gv);
  dt_tensor *all[] = {w, idx, g, y, gw};
  for (int i = 0; i < 5; i++) dt_tensor_release(all[i]);
}

Test(embedding_backward, argument_errors) {
  dt_tensor *w = ref_random(2, (int64_t[]){V, D}, DT_F32, -1, 1, 3), *idx = indices(DT_I64);
  dt_tensor *g_bad = ref_random(3, (int64_t[]){B, T, D + 1}, DT_F32, -2, 2, 5);
  dt_tensor *g64 = ref_random(3, (int64_t[]){B, T, D}, DT_F64, -2, 2, 5), *out = NULL;
  cr_assert_eq(dt__embedding_backward(w, idx, g_bad, &out), DT_ERR_SHAPE);
  ref_assert_error_mentions("embedding_backward", "[3, 4, 6]");
  cr_assert_eq(dt__embedding_backward(w, idx, g64, &out), DT_ERR_DTYPE);
  ref_assert_error_mentions("embedding_backward", "float64");
  double big[B * T];
  for (int i = 0; i < B * T; i++) big[i] = i == 5 ? V : 0;
  dt_tensor *bad_idx = ref_tensor(2, (int64_t[]){B, T}, DT_I64, big);
  dt_tensor *g = ref_random(3, (int64_t[]){B, T, D}, DT_F32, -2, 2, 5);
  cr_assert_eq(dt__embedding_backward(w, bad_idx, g, &out), DT_ERR_INDEX);
  ref_assert_error_mentions("embedding_backward", "index 9");
  cr_assert_null(out);
  dt_tensor *all[] = {w, idx, g_bad, g64, bad_idx, g};
  for (int i = 0; i < 6; i++) dt_tensor_release(all[i]);
}
