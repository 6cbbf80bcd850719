/* The MLP the pipeline tests split into stages (threads: test_pipeline.c; MPI processes:
 * mpi/test_mpi_pipeline.c): Linear(IN, HIDDEN), ReLU, (Linear(HIDDEN, HIDDEN), ReLU) x 3,
 * Linear(HIDDEN, OUT): 9 children, 10 parameters, seeded, every parameter requires grad. */
#ifndef DT_TESTS_PIPELINE_MLP_H
#define DT_TESTS_PIPELINE_MLP_H

#include "dtensor/dtensor.h"

#define ROWS 10
#define IN 6
#define HIDDEN 8
#define OUT 3
#define MAX_PARAMS 16

static dt_status pipeline_mlp_requires_grad(const char *fqn, dt_tensor *t, bool is_buffer,
                                            void *user) {
  (void)fqn;
  (void)user;
  return is_buffer ? DT_OK : dt_tensor_set_requires_grad(t, true);
}

static dt_status build_model(dt_module **out) {
  dt_module *c[9];
  int n = 0;
  dt_status st = dt_nn_linear(IN, HIDDEN, true, 11, &c[n++]);
  for (int i = 0; i < 3 && !st; i++) {
    st = dt_nn_relu(&c[n++]);
    if (!st) st = dt_nn_linear(HIDDEN, HIDDEN, true, 12 + (uint64_t)i, &c[n++]);
  }
  if (!st) st = dt_nn_relu(&c[n++]);
  if (!st) st = dt_nn_linear(HIDDEN, OUT, true, 20, &c[n++]);
  if (st) return st;
  st = dt_nn_sequential(n, c, out);
  return st ? st : dt_module_visit_tensors(*out, pipeline_mlp_requires_grad, NULL);
}

#endif /* DT_TESTS_PIPELINE_MLP_H */
