/* dt_compiled_to_string (was dt_compiled_format; docs/api.md "Naming": _to_string returns a
 * new string freed with dt_free): the text of a variant, and errors that name the function,
 * the argument and the offending values. */
#include <criterion/criterion.h>
#include <string.h>

#include "dtensor/compile.h"
#include "dtensor/dtensor.h"

static dt_status relu_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user;
  (void)n_in;
  (void)n_out;
  return dt_relu(in[0], &out[0]);
}

Test(compile_to_string, text_and_errors) {
  dt_compiled *c = NULL;
  cr_assert_eq(dt_compile(relu_fn, NULL, 1, 1, &(dt_compile_options){.dynamic = true}, &c), DT_OK);
  char *text = (char *)"untouched";
  /* No variant yet: index 0 is out of range, and out is reset to NULL. */
  cr_assert_eq(dt_compiled_to_string(c, 0, &text), DT_ERR_INVALID);
  cr_assert_null(text);
  cr_assert_str_eq(dt_last_error(), "dt_compiled_to_string: variant 0 of 0");

  dt_tensor *x = NULL, *y = NULL;
  cr_assert_eq(dt_ones(2, (int64_t[]){3, 5}, DT_F32, &x), DT_OK);
  cr_assert_eq(dt_compiled_call(c, 1, &x, 1, &y), DT_OK);
  cr_assert_eq(dt_compiled_to_string(c, 0, &text), DT_OK);
  cr_assert(strstr(text, "placeholder()"), "%s", text);
  cr_assert(strstr(text, "symbolic shapes {"), "%s", text);
  cr_assert(strstr(text, "%in0 : [s0, s1]"), "%s", text);
  cr_assert(strstr(text, "guards {"), "%s", text);
  dt_free(text);

  cr_assert_eq(dt_compiled_to_string(c, 1, &text), DT_ERR_INVALID);
  cr_assert_str_eq(dt_last_error(), "dt_compiled_to_string: variant 1 of 1");
  cr_assert_eq(dt_compiled_to_string(c, -1, &text), DT_ERR_INVALID);
  cr_assert_str_eq(dt_last_error(), "dt_compiled_to_string: variant -1 of 1");
  cr_assert_eq(dt_compiled_to_string(NULL, 0, &text), DT_ERR_INVALID);
  cr_assert_str_eq(dt_last_error(), "dt_compiled_to_string: variant 0 of 0");
  cr_assert_eq(dt_compiled_to_string(c, 0, NULL), DT_ERR_INVALID);
  cr_assert_str_eq(dt_last_error(), "dt_compiled_to_string: out is NULL");

  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_compiled_destroy(c);
}
