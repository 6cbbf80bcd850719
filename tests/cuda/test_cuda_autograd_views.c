/*
 * Autograd of an in-place op on a view, on CUDA against the CPU: y = x * 1, v = y[1:3],
 * v *= s, loss = sum(y * w). The view's backward builds zeros of the base's shape on the
 * gradient's device (they were once made on the CPU whatever the device). The gradients of x
 * and s must equal the CPU's (the same float32 operations, summed in a different order).
 */
#include <math.h>

#include "cuda/cuda_test.h"

static const double xv[12] = {1, -2, 3, 0.5, 4, -1, 2, 2, -3, 1.5, 0, 7};
static const double wv[12] = {0.5, 1, -1, 2, 0.25, 3, -2, 1, 1, -0.5, 4, 2};

static void run(dt_device device, double *gx, double *gs) {
  float xf[12], wf[12];
  for (int i = 0; i < 12; i++) xf[i] = (float)xv[i], wf[i] = (float)wv[i];
  dt_tensor_options o = {.device = device};
  dt_tensor *x = NULL, *w = NULL, *s = NULL, *one = NULL, *y = NULL, *v = NULL, *yw = NULL,
            *loss = NULL, *g = NULL, *gcpu = NULL;
  CHECK_OK(dt_from_data_ex(xf, 2, (int64_t[]){4, 3}, DT_F32, &o, &x));
  CHECK_OK(dt_from_data_ex(wf, 2, (int64_t[]){4, 3}, DT_F32, &o, &w));
  CHECK_OK(dt_full_ex(1, (int64_t[]){3}, 1.5, DT_F32, &o, &s));
  CHECK_OK(dt_full_ex(0, NULL, 1.0, DT_F32, &o, &one));
  CHECK_OK(dt_tensor_set_requires_grad(x, true));
  CHECK_OK(dt_tensor_set_requires_grad(s, true));
  CHECK_OK(dt_mul(x, one, &y));
  CHECK_OK(dt_narrow(y, 0, 1, 2, &v));
  CHECK_OK(dt_mul_(v, s));
  CHECK_OK(dt_mul(y, w, &yw));
  CHECK_OK(dt_sum(yw, &loss));
  CHECK_OK(dt_backward(loss, NULL));
  CHECK_OK(dt_tensor_grad(x, &g));
  CHECK_OK(dt_to_device(g, DT_DEVICE_CPU_VALUE, &gcpu));
  CHECK_OK(dt_tensor_to_doubles(gcpu, gx, 12));
  dt_tensor_release(g), dt_tensor_release(gcpu);
  g = gcpu = NULL;
  CHECK_OK(dt_tensor_grad(s, &g));
  CHECK_OK(dt_to_device(g, DT_DEVICE_CPU_VALUE, &gcpu));
  CHECK_OK(dt_tensor_to_doubles(gcpu, gs, 3));
  dt_tensor *all[] = {x, w, s, one, y, v, yw, loss, g, gcpu};
  for (int i = 0; i < 10; i++) dt_tensor_release(all[i]);
}

int main(void) {
  /* The CPU values against the formula first (these run without a GPU too): rows 1-2 of dx
   * are w * s, the others w; ds is the column sums of x * w over rows 1-2. */
  double cpu_x[12], cpu_s[3], gpu_x[12], gpu_s[3];
  run(DT_DEVICE_CPU_VALUE, cpu_x, cpu_s);
  for (int i = 0; i < 12; i++) {
    double want = (i >= 3 && i < 9) ? wv[i] * 1.5 : wv[i];
    CHECK(fabs(cpu_x[i] - want) <= 1e-6, "cpu dx[%d] %g, want %g", i, cpu_x[i], want);
  }
  for (int c = 0; c < 3; c++) {
    double want = xv[3 + c] * wv[3 + c] + xv[6 + c] * wv[6 + c];
    CHECK(fabs(cpu_s[c] - want) <= 1e-5, "cpu ds[%d] %g, want %g", c, cpu_s[c], want);
  }
  if (dt_test_failures) return dt_test_result("test_cuda_autograd_views");
  dt_test_require_gpu("test_cuda_autograd_views");
  run((dt_device){DT_DEVICE_CUDA, 0}, gpu_x, gpu_s);
  for (int i = 0; i < 12; i++)
    CHECK(fabs(cpu_x[i] - gpu_x[i]) <= 1e-6 * (1 + fabs(cpu_x[i])), "dx[%d]: cpu %g, cuda %g", i,
          cpu_x[i], gpu_x[i]);
  for (int i = 0; i < 3; i++)
    CHECK(fabs(cpu_s[i] - gpu_s[i]) <= 1e-5 * (1 + fabs(cpu_s[i])), "ds[%d]: cpu %g, cuda %g", i,
          cpu_s[i], gpu_s[i]);
  return dt_test_result("test_cuda_autograd_views");
}
