/*
 * dt_optimizer_create given hostile hyperparameters: one name twice (the second silently won
 * before) is refused naming both entries, an infinite learning rate is refused by every
 * optimizer; distinct names still apply exactly as given.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "dtensor/dtensor.h"

Test(optim_errors, a_hyperparameter_given_twice_is_refused) {
  float v[4] = {1, 2, 3, 4};
  dt_tensor *w = NULL;
  cr_assert_eq(dt_from_data(v, 1, (int64_t[]){4}, DT_F32, &w), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(w, true), DT_OK);
  dt_optimizer *o = NULL;
  dt_optimizer_hyperparameter twice[3] = {{"lr", 0.5}, {"beta1", 0.8}, {"lr", 0.25}};
  cr_assert_eq(dt_optimizer_create("lion", 1, &w, 3, twice, &o), DT_ERR_INVALID);
  cr_assert_null(o);
  cr_assert(strstr(dt_last_error(), "dt_optimizer_create"), "%s", dt_last_error());
  cr_assert(strstr(dt_last_error(), "\"lr\" given twice (entries 0 and 2)"), "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_create("lion", 1, &w, 2, twice, &o), DT_OK, "%s", dt_last_error());
  double lr = 0, beta1 = 0, beta2 = 0;
  cr_assert_eq(dt_optimizer_get_hyperparameter(o, "lr", &lr), DT_OK);
  cr_assert_eq(dt_optimizer_get_hyperparameter(o, "beta1", &beta1), DT_OK);
  cr_assert_eq(dt_optimizer_get_hyperparameter(o, "beta2", &beta2), DT_OK);
  cr_assert_eq(lr, 0.5);
  cr_assert_eq(beta1, 0.8);
  cr_assert_eq(beta2, 0.99); /* Lion's default */
  dt_optimizer_destroy(o);
  dt_tensor_release(w);
}

/* An infinite learning rate makes every parameter NaN after one step: refused by every
 * optimizer (Lion refused it; SGD, Adam and AdamW took it), at creation and when set. */
Test(optim_errors, an_infinite_learning_rate_is_refused) {
  float v[4] = {1, 2, 3, 4};
  dt_tensor *w = NULL;
  cr_assert_eq(dt_from_data(v, 1, (int64_t[]){4}, DT_F32, &w), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(w, true), DT_OK);
  const char *names[4] = {"sgd", "adam", "adamw", "lion"};
  for (int k = 0; k < 4; k++) {
    dt_optimizer *o = NULL;
    dt_optimizer_hyperparameter lr = {"lr", INFINITY};
    cr_assert_eq(dt_optimizer_create(names[k], 1, &w, 1, &lr, &o), DT_ERR_INVALID, "%s", names[k]);
    cr_assert_null(o);
    cr_assert(strstr(dt_last_error(), "lr inf (expected a finite number >= 0)"), "%s: %s", names[k],
              dt_last_error());
    cr_assert_eq(dt_optimizer_create(names[k], 1, &w, 0, NULL, &o), DT_OK, "%s", dt_last_error());
    cr_assert_eq(dt_optimizer_set_hyperparameter(o, "lr", INFINITY), DT_ERR_INVALID, "%s",
                 names[k]);
    double got = 0;
    cr_assert_eq(dt_optimizer_get_hyperparameter(o, "lr", &got), DT_OK);
    cr_assert(isfinite(got), "%s: lr became %g", names[k], got);
    dt_optimizer_destroy(o);
  }
  dt_adam_options ao = {.lr = INFINITY};
  dt_optimizer *o = NULL;
  cr_assert_eq(dt_optimizer_create_adamw(1, &w, &ao, &o), DT_ERR_INVALID);
  dt_sgd_options so = {.lr = INFINITY};
  cr_assert_eq(dt_optimizer_create_sgd(1, &w, &so, &o), DT_ERR_INVALID);
  cr_assert_null(o);
  dt_tensor_release(w);
}

/* A module's parameters start without requires_grad (nn.h): the refusal says so and names the
 * call that fixes it; a parameter that is an op's result is refused as not a leaf. */
Test(optim_errors, a_parameter_without_requires_grad_names_the_fix) {
  dt_module *m = NULL;
  cr_assert_eq(dt_nn_linear(3, 2, true, 1, &m), DT_OK);
  dt_tensor *params[2] = {dt_module_parameter(m, "weight"), dt_module_parameter(m, "bias")};
  dt_optimizer *o = NULL;
  cr_assert_eq(dt_optimizer_create("adamw", 2, params, 0, NULL, &o), DT_ERR_INVALID);
  cr_assert_null(o);
  cr_assert(strstr(dt_last_error(), "dt_optimizer_create: parameter 0 does not require grad"), "%s",
            dt_last_error());
  cr_assert(strstr(dt_last_error(), "dt_tensor_set_requires_grad"), "%s", dt_last_error());
  cr_assert_eq(dt_tensor_set_requires_grad(params[0], true), DT_OK);
  cr_assert_eq(dt_optimizer_create("adamw", 2, params, 0, NULL, &o), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "parameter 1 does not require grad"), "%s", dt_last_error());
  dt_tensor *doubled = NULL;
  cr_assert_eq(dt_mul_scalar(params[0], 2.0, &doubled), DT_OK);
  cr_assert_eq(dt_optimizer_create("sgd", 1, &doubled, 0, NULL, &o), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_optimizer_create: parameter 0 is not a leaf"), "%s",
            dt_last_error());
  cr_assert_eq(dt_tensor_set_requires_grad(params[1], true), DT_OK);
  cr_assert_eq(dt_optimizer_create("adamw", 2, params, 0, NULL, &o), DT_OK, "%s", dt_last_error());
  dt_optimizer_destroy(o);
  dt_tensor_release(doubled);
  dt_module_destroy(m);
}

/* A misspelt hyperparameter ("learning_rate", PyTorch's keyword being "lr") is refused with the
 * names the optimizer takes, at creation and by get/set, so the caller sees the spelling. */
Test(optim_errors, an_unknown_hyperparameter_lists_the_known_names) {
  float v[4] = {1, 2, 3, 4};
  dt_tensor *w = NULL;
  cr_assert_eq(dt_from_data(v, 1, (int64_t[]){4}, DT_F32, &w), DT_OK);
  cr_assert_eq(dt_tensor_set_requires_grad(w, true), DT_OK);
  dt_optimizer *o = NULL;
  dt_optimizer_hyperparameter h[2] = {{"lr", 0.5}, {"learning_rate", 0.1}};
  cr_assert_eq(dt_optimizer_create("adamw", 1, &w, 2, h, &o), DT_ERR_INVALID);
  cr_assert_null(o);
  cr_assert_str_eq(dt_last_error(),
                   "dt_optimizer_create: adamw has no hyperparameter \"learning_rate\" (entry 1); "
                   "it takes: lr, beta1, beta2, eps, weight_decay");
  cr_assert_eq(dt_optimizer_create("sgd", 1, &w, 1, h, &o), DT_OK, "%s", dt_last_error());
  double got = 0;
  cr_assert_eq(dt_optimizer_get_hyperparameter(o, "betas", &got), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_optimizer_get_hyperparameter: sgd has no hyperparameter "
                                    "\"betas\"; it takes: lr, "),
            "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_set_hyperparameter(o, "learning_rate", 0.1), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_optimizer_set_hyperparameter: sgd has no hyperparameter "
                                    "\"learning_rate\"; it takes: lr, "),
            "%s", dt_last_error());
  cr_assert_eq(dt_optimizer_get_hyperparameter(o, "lr", &got), DT_OK);
  cr_assert_eq(got, 0.5); /* the refused set changed nothing */
  dt_optimizer_destroy(o);
  dt_tensor_release(w);
}
