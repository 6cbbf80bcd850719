/*
 * Activation checkpointing misused: the input of a checkpointed module modified in place
 * between the forward and the backward. The plain backward refuses it (the Linear saved its
 * input); the checkpointed one recomputes from that input, so it must refuse it too rather
 * than return gradients of another input.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "dtensor/dtensor.h"

static dt_status requires_grad(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  (void)user;
  return is_buffer ? DT_OK : dt_tensor_set_requires_grad(t, true);
}

/* Linear(4, 3) over x = a * 2 (a non-leaf), x then modified in place, then the backward. */
static dt_status modified_input_backward(bool checkpoint) {
  dt_module *lin = NULL;
  cr_assert_eq(dt_nn_linear(4, 3, true, 7, &lin), DT_OK);
  cr_assert_eq(dt_module_visit_tensors(lin, requires_grad, NULL), DT_OK);
  if (checkpoint) cr_assert_eq(dt_module_set_checkpoint(lin, true), DT_OK);
  float av[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  dt_tensor *a = NULL, *x = NULL, *y = NULL, *loss = NULL;
  cr_assert_eq(dt_from_data(av, 2, (int64_t[]){2, 4}, DT_F32, &a), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(a, true), DT_OK);
  cr_assert_eq(dt_mul_scalar(a, 2.0, &x), DT_OK);
  cr_assert_eq(dt_module_forward(lin, x, &y), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_sum(y, &loss), DT_OK);
  cr_assert_eq(dt_add_scalar_(x, 5.0), DT_OK, "%s", dt_last_error());
  dt_status st = dt_backward(loss, NULL);
  dt_tensor_release(loss);
  dt_tensor_release(y);
  dt_tensor_release(x);
  dt_tensor_release(a);
  dt_module_destroy(lin);
  return st;
}

Test(activation_checkpoint_errors, input_modified_in_place_fails_the_backward) {
  /* The plain backward refuses it ... */
  dt_status st = modified_input_backward(false);
  cr_assert_eq(st, DT_ERR_INVALID, "plain: %s: %s", dt_status_string(st), dt_last_error());
  /* ... and so does the checkpointed one, naming the module. */
  st = modified_input_backward(true);
  cr_assert_eq(st, DT_ERR_INVALID, "checkpointed: %s: %s", dt_status_string(st), dt_last_error());
  cr_assert(strstr(dt_last_error(), "modified in place"), "%s", dt_last_error());
  cr_assert(strstr(dt_last_error(), "Linear"), "%s", dt_last_error());
}
