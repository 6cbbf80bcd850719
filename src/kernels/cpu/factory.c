/* Filling freshly allocated (contiguous) tensors. */
#include <math.h>

#include "kernels/cpu/factory.h"

void dt__cpu_fill_contiguous(dt_tensor *t, double value) {
  int64_t n = dt__tensor_numel(t);
  if (n == 0) return;
  char *p = dt__tensor_base(t);
  size_t es = dt__dtype_sizes[t->dtype];
  /* Every dtype stores +0 as all-zero bytes (-0 has the sign bit set in the float ones). */
  if (value == 0.0 && !signbit(value)) {
    memset(p, 0, (size_t)n * es);
    return;
  }
  dt__store_from_double(t->dtype, p, value);
  /* Double the filled prefix until it covers the tensor: log2(n) memcpy calls. */
  size_t total = (size_t)n * es, done = es;
  while (done < total) {
    size_t chunk = done < total - done ? done : total - done;
    memcpy(p + done, p, chunk);
    done += chunk;
  }
}
