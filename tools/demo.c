/* dtensor demo: a short tour of the local tensor library. */
#include <stdio.h>

#include "dtensor/dtensor.h"
#include "tools.h"

static int check(dt_status st, const char *what) {
  if (st == DT_OK) return 0;
  fprintf(stderr, "demo: %s failed: %s (%s)\n", what, dt_status_string(st), dt_last_error());
  return 1;
}

static void show(const char *label, const dt_tensor *t) {
  char buf[512];
  dt_tensor_format(t, buf, sizeof buf);
  printf("%-28s %s\n", label, buf);
}

int dt_tool_demo(int argc, char **argv) {
  (void)argc;
  (void)argv;
  int64_t shape[] = {2, 3};
  dt_tensor *a = NULL, *b = NULL, *sum = NULL, *t = NULL;
  int rc = 0;
  rc |= check(dt_arange(0, 6, 1, DT_F32, &a), "arange");
  if (!rc) {
    dt_tensor *a2 = NULL;
    rc |= check(dt_from_data((float[]){0, 1, 2, 3, 4, 5}, 2, shape, DT_F32, &a2), "from_data");
    dt_tensor_release(a);
    a = a2;
  }
  if (!rc) rc |= check(dt_rand(2, shape, DT_F32, 42, &b), "rand");
  if (!rc) rc |= check(dt_add(a, b, &sum), "add");
  if (!rc) rc |= check(dt_transpose(sum, 0, 1, &t), "transpose");
  if (!rc) {
    printf("libdtensor %s demo\n", dt_version_string());
    show("a", a);
    show("b = rand(seed=42)", b);
    show("a + b", sum);
    show("(a + b).transpose(0, 1)", t);
  }
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(sum);
  dt_tensor_release(t);
  return rc;
}
