/*
 * The CUDA attention kernel's real head-dim limit (issue 39 item 4): each block keeps
 * 2 E + 2 Ev + 3 x 256 doubles in the 48 KB of shared memory a launch gets without opting in,
 * so E + Ev = 2688 runs (and gives the right output) and 2689 is refused before the launch
 * with DT_ERR_UNSUPPORTED naming the limit. Needs a GPU (skips, 77, without one).
 */
#include <string.h>

#include "cuda/cuda_test.h"

/* A [1, 1, rows, cols] float32 tensor on cuda:0 holding `value` everywhere. */
static dt_tensor *filled(int64_t rows, int64_t cols, double value) {
  int64_t shape[4] = {1, 1, rows, cols};
  dt_tensor_options o = {.device = {DT_DEVICE_CUDA, 0}};
  dt_tensor *empty = NULL, *t = NULL;
  CHECK_OK(dt_empty_ex(4, shape, DT_F32, &o, &empty));
  CHECK_OK(dt_full_like(empty, value, &t));
  dt_tensor_release(empty);
  return t;
}

/* Attention with head dims e and ev: its status; on success *first is out[0, 0, 0, 0]. */
static dt_status attend(int64_t e, int64_t ev, float *first) {
  dt_tensor *q = filled(2, e, 0.0), *k = filled(3, e, 0.5), *v = filled(3, ev, 1.5);
  dt_tensor *out = NULL, *host = NULL;
  dt_status st = dt_scaled_dot_product_attention(q, k, v, NULL, NULL, &out, NULL);
  if (st == DT_OK) {
    CHECK_OK(dt_to_device(out, DT_DEVICE_CPU_VALUE, &host));
    *first = ((const float *)dt_tensor_data(host))[0];
    dt_tensor_release(host);
    dt_tensor_release(out);
  }
  dt_tensor_release(q);
  dt_tensor_release(k);
  dt_tensor_release(v);
  return st;
}

int main(void) {
  dt_test_require_gpu("test_cuda_attention_limits");
  float first = 0;
  /* At the limit: every score equal, so the output is the mean of the values, 1.5. */
  dt_status st = attend(1344, 1344, &first);
  CHECK(st == DT_OK, "E + Ev = 2688: %s: %s", dt_status_string(st), dt_last_error());
  CHECK(st != DT_OK || first == 1.5f, "E + Ev = 2688: out[0] = %g, expected 1.5", first);
  st = attend(2000, 688, &first);
  CHECK(st == DT_OK, "E = 2000, Ev = 688: %s: %s", dt_status_string(st), dt_last_error());
  /* One past it: refused before the launch, naming the sum and the limit. */
  st = attend(1345, 1344, &first);
  CHECK(st == DT_ERR_UNSUPPORTED, "E + Ev = 2689: %s", dt_status_string(st));
  CHECK(strstr(dt_last_error(), "E + Ev = 2689") && strstr(dt_last_error(), "at most 2688"),
        "message: %s", dt_last_error());
  return dt_test_result("test_cuda_attention_limits");
}
