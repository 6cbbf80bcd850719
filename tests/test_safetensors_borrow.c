/* The safetensors reader under hostile use: an in-place op on a DT_SAFETENSORS_BORROW
 * tensor (dt_fill_, say) killed the process with SIGSEGV, the map being PROT_READ. The map is
 * now private copy-on-write: the write succeeds, stays in the process and never reaches the
 * file. */
#include <criterion/criterion.h>
#include <unistd.h>

#include "comm_helpers.h"

Test(safetensors_borrow, in_place_write_to_borrowed_tensor_does_not_crash) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/dt_review_borrow_%d.safetensors", (int)getpid());
  float v[4] = {1, 2, 3, 4};
  dt_tensor *src = NULL;
  cr_assert_eq(dt_from_data(v, 1, (int64_t[]){4}, DT_F32, &src), DT_OK);
  cr_assert_eq(
      dt_safetensors_save(path, 1, (const char *[]){"w"}, (dt_tensor *[]){src}, 0, NULL, NULL),
      DT_OK, "%s", dt_last_error());
  dt_safetensors *f = NULL;
  cr_assert_eq(dt_safetensors_open(path, &f), DT_OK, "%s", dt_last_error());
  dt_tensor *b = NULL, *c = NULL;
  cr_assert_eq(dt_safetensors_load(f, "w", DT_SAFETENSORS_BORROW, &b), DT_OK, "%s",
               dt_last_error());
  /* Before the fix this faulted. */
  cr_assert_eq(dt_fill_(b, 7.0), DT_OK, "%s", dt_last_error());
  double got[4];
  cr_assert_eq(dt_tensor_to_doubles(b, got, 4), DT_OK);
  for (int i = 0; i < 4; i++) cr_assert_float_eq(got[i], 7.0, 0, "borrowed element %d", i);
  /* The file is unchanged: a COPY through the same handle and a fresh open read 1 2 3 4. */
  cr_assert_eq(dt_safetensors_load(f, "w", DT_SAFETENSORS_COPY, &c), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_to_doubles(c, got, 4), DT_OK);
  for (int i = 0; i < 4; i++) cr_assert_float_eq(got[i], v[i], 0, "copied element %d", i);
  dt_tensor_release(c);
  dt_safetensors_destroy(f);
  dt_tensor_release(b);
  f = NULL;
  cr_assert_eq(dt_safetensors_open(path, &f), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_safetensors_load(f, "w", DT_SAFETENSORS_BORROW, &b), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(dt_tensor_to_doubles(b, got, 4), DT_OK);
  for (int i = 0; i < 4; i++) cr_assert_float_eq(got[i], v[i], 0, "reopened element %d", i);
  dt_tensor_release(b);
  dt_safetensors_destroy(f);
  dt_tensor_release(src);
  cr_assert_eq(unlink(path), 0);
}
