/*
 * DLPack with CUDA memory: a CUDA tensor exports as kDLCUDA with its device id and its device
 * pointer (no copy), and that managed tensor imports back as a CUDA tensor over the same
 * memory: a write through the import is seen by the original, the deleter runs once after
 * the last handle, and a transposed view keeps its strides. Device ids beyond the devices
 * present are refused and left to the caller. Skipped (77) without a GPU or without the
 * DLPack header at build time.
 */
#include <string.h>

#include "cuda/cuda_test.h"

#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>

static const dt_device cuda0 = {DT_DEVICE_CUDA, 0};

static int deleted;
static void (*exported_deleter)(DLManagedTensor *);
static void counting_deleter(DLManagedTensor *self) {
  deleted++;
  exported_deleter(self);
}

static void check_values(const char *what, dt_tensor *gpu, const double *want, int64_t n) {
  dt_tensor *h = NULL;
  CHECK_OK(dt_to_device(gpu, DT_DEVICE_CPU_VALUE, &h));
  double got[64];
  CHECK_OK(dt_tensor_to_doubles(h, got, n));
  for (int64_t i = 0; i < n; i++)
    CHECK(got[i] == want[i], "%s: element %lld is %g, expected %g", what, (long long)i, got[i],
          want[i]);
  dt_tensor_release(h);
}

int main(void) {
  dt_test_require_gpu("test_cuda_dlpack");
  if (dt_dlpack_header_version() == 0) {
    printf("test_cuda_dlpack: skipped: the library was built without <dlpack/dlpack.h>\n");
    return DT_TEST_SKIP;
  }
  double values[12];
  for (int i = 0; i < 12; i++) values[i] = i + 0.5;
  dt_tensor *h = NULL, *g = NULL, *gt = NULL;
  CHECK_OK(dt_from_data(values, 2, (int64_t[]){3, 4}, DT_F64, &h));
  CHECK_OK(dt_to_device(h, cuda0, &g));
  CHECK_OK(dt_transpose(g, 0, 1, &gt)); /* [4, 3], strides {1, 4} */

  DLManagedTensor *m = NULL;
  CHECK_OK(dt_dlpack_export(gt, &m));
  CHECK(m->dl_tensor.device.device_type == kDLCUDA && m->dl_tensor.device.device_id == 0,
        "export: device (%d, %d), expected kDLCUDA 0", (int)m->dl_tensor.device.device_type,
        m->dl_tensor.device.device_id);
  CHECK(m->dl_tensor.ndim == 2 && m->dl_tensor.shape[0] == 4 && m->dl_tensor.strides[0] == 1 &&
            m->dl_tensor.strides[1] == 4,
        "export: the transposed view's shape and strides");
  exported_deleter = m->deleter;
  m->deleter = counting_deleter;

  dt_tensor *back = NULL;
  CHECK_OK(dt_dlpack_import(m, &back));
  CHECK(dt_tensor_device(back).kind == DT_DEVICE_CUDA && dt_tensor_device(back).index == 0,
        "import: not on cuda:0");
  double want_t[12];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) want_t[i * 3 + j] = values[j * 4 + i];
  check_values("import of the transposed export", back, want_t, 12);

  /* the same memory: a write through the import shows in the original */
  CHECK_OK(dt_mul_scalar_(back, 2.0));
  double doubled[12];
  for (int i = 0; i < 12; i++) doubled[i] = 2 * values[i];
  check_values("the original after a write through the import", g, doubled, 12);

  CHECK(deleted == 0, "the deleter ran while the import lives");
  dt_tensor_release(back);
  CHECK(deleted == 1, "the deleter ran %d times after the import's release", deleted);

  /* a device id beyond those present: refused, the caller keeps the tensor */
  DLManagedTensor *m2 = NULL;
  CHECK_OK(dt_dlpack_export(g, &m2));
  m2->dl_tensor.device.device_id = 99;
  dt_tensor *none = NULL;
  dt_status st = dt_dlpack_import(m2, &none);
  CHECK(st == DT_ERR_UNSUPPORTED && strstr(dt_last_error(), "cuda:99") && !none,
        "import on cuda:99: %s", dt_last_error());
  m2->deleter(m2);

  dt_tensor_release(h);
  dt_tensor_release(g);
  dt_tensor_release(gt);
  return dt_test_result("test_cuda_dlpack");
}

#else
int main(void) {
  printf("test_cuda_dlpack: skipped: no <dlpack/dlpack.h> at build time\n");
  return DT_TEST_SKIP;
}
#endif
