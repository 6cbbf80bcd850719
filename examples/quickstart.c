/* The README's example: y = x @ w^T on local tensors. */
#include <dtensor/dtensor.h>
#include <stdio.h>

int main(void) {
  int64_t shape[] = {2, 3};
  dt_tensor *x = NULL, *w = NULL, *y = NULL;
  if (dt_rand(2, shape, DT_F32, /*seed=*/42, &x) || dt_ones(2, (int64_t[]){4, 3}, DT_F32, &w) ||
      dt_linear(x, w, /*bias=*/NULL, &y)) { /* y = x @ w^T : [2, 4] */
    fprintf(stderr, "error: %s\n", dt_last_error());
    return 1;
  }
  char text[256];
  dt_tensor_format(y, text, sizeof text);
  puts(text);
  dt_tensor_release(x);
  dt_tensor_release(w);
  dt_tensor_release(y);
  return 0;
}
