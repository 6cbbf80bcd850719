/* Checks of a loaded Hugging Face model against what transformers computed on the fixtures of
 * ../shared/fixtures/hf (each folder's io.safetensors): logits within 1e-4 of the largest,
 * greedy generation id for id, five fine-tuning losses within 1e-4. Shared by
 * tests/test_models.c and tests/test_models_families.c; the checks run on a rank (RANK_OK,
 * comm_helpers.h) and return DT_OK or the failure. */
#ifndef DT_TESTS_HF_FIXTURE_CHECKS_H
#define DT_TESTS_HF_FIXTURE_CHECKS_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"

#define HF DT_FIXTURES_DIR "/hf"

static inline bool hf_present(void) {
  FILE *f = fopen(HF "/expected.json", "r");
  if (f) fclose(f);
  return f != NULL;
}

#define SKIP_WITHOUT_FIXTURES()                                                                    \
  do {                                                                                             \
    if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);                        \
  } while (0)

/* Tensor `name` of model's io.safetensors. */
static inline dt_status io_tensor(const char *model, const char *name, dt_tensor **out) {
  char path[512];
  snprintf(path, sizeof path, HF "/%s/io.safetensors", model);
  dt_safetensors *f = NULL;
  dt_status st = dt_safetensors_open(path, &f);
  if (!st) st = dt_safetensors_load(f, name, DT_SAFETENSORS_COPY, out);
  dt_safetensors_destroy(f);
  return st;
}

/* max |a - b| / max |b| over two tensors of the same numel. */
static inline dt_status rel_diff(dt_tensor *a, dt_tensor *b, double *rel) {
  int64_t n = dt_tensor_numel(b);
  if (dt_tensor_numel(a) != n) return dt__error(DT_ERR_SHAPE, "rel_diff: numel differs");
  double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
  dt_tensor *ca = NULL, *cb = NULL;
  dt_status st = dt_contiguous(a, &ca);
  if (!st) st = dt_contiguous(b, &cb);
  if (!st) st = dt_tensor_to_doubles(ca, x, n);
  if (!st) st = dt_tensor_to_doubles(cb, y, n);
  double md = 0, mb = 0;
  for (int64_t i = 0; i < n && !st; i++) {
    md = fmax(md, fabs(x[i] - y[i]));
    mb = fmax(mb, fabs(y[i]));
  }
  *rel = md / (mb > 0 ? mb : 1);
  free(x), free(y);
  dt_tensor_release(ca), dt_tensor_release(cb);
  return st;
}

/* The loaded model's logits of io's input_ids against transformers', on this rank; *rel (may
 * be NULL) receives max |difference| / max |transformers'|. */
static inline dt_status check_logits_rel(dt_hf_model *m, const char *model, double *rel_out) {
  dt_tensor *ids = NULL, *want = NULL, *logits = NULL, *full = NULL;
  RANK_OK(io_tensor(model, "input_ids", &ids));
  RANK_OK(io_tensor(model, "logits", &want));
  RANK_OK(dt_hf_model_forward(m, ids, NULL, &logits));
  if (dt_tensor_is_distributed(logits)) {
    RANK_OK(dt_dist_full_tensor(logits, &full));
  } else {
    full = dt_tensor_retain(logits);
  }
  double rel = 1;
  RANK_OK(rel_diff(full, want, &rel));
  if (rel_out) *rel_out = rel;
  RANK_CHECK(rel <= 1e-4, "%s logits differ from transformers' by %.3g of the largest", model, rel);
  dt_tensor_release(ids), dt_tensor_release(want), dt_tensor_release(logits),
      dt_tensor_release(full);
  return DT_OK;
}

static inline dt_status check_logits(dt_hf_model *m, const char *model) {
  return check_logits_rel(m, model, NULL);
}

/* Greedy generation of 12 tokens after the 5-token prompt equals transformers', id for id. */
static inline dt_status check_greedy(dt_hf_model *m, const char *model) {
  dt_tensor *prompt = NULL, *want = NULL;
  RANK_OK(io_tensor(model, "prompt_ids", &prompt));
  RANK_OK(io_tensor(model, "greedy_ids", &want));
  int64_t np = dt_tensor_numel(prompt), nw = dt_tensor_numel(want);
  int64_t p[64], w[64], out[64], n = 0;
  double d[64];
  RANK_OK(dt_tensor_to_doubles(prompt, d, np));
  for (int64_t i = 0; i < np; i++) p[i] = (int64_t)d[i];
  RANK_OK(dt_tensor_to_doubles(want, d, nw));
  for (int64_t i = 0; i < nw; i++) w[i] = (int64_t)d[i];
  RANK_OK(dt_hf_generate(m, p, np, nw - np, NULL, out, &n, NULL, NULL));
  RANK_CHECK(n == nw, "%s generated %lld ids, transformers %lld", model, (long long)n,
             (long long)nw);
  for (int64_t i = 0; i < nw; i++)
    RANK_CHECK(out[i] == w[i], "%s token %lld: %lld, transformers %lld", model, (long long)i,
               (long long)out[i], (long long)w[i]);
  dt_tensor_release(prompt), dt_tensor_release(want);
  return DT_OK;
}

/* Five fine-tuning steps (AdamW lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.1,
 * clip_grad_norm 1.0) give transformers' losses; *worst (may be NULL) receives the largest
 * |loss - transformers'| / |transformers'|. */
static inline dt_status check_finetune_rel(dt_hf_model *m, const char *model, double *worst) {
  dt_tensor *ids = NULL, *want = NULL;
  RANK_OK(io_tensor(model, "ft_input_ids", &ids));
  RANK_OK(io_tensor(model, "ft_losses", &want));
  double losses[5];
  RANK_OK(dt_tensor_to_doubles(want, losses, 5));
  RANK_OK(dt_hf_model_set_trainable(m, true));
  int n = dt_hf_model_param_count(m);
  dt_tensor *params[2048];
  for (int i = 0; i < n; i++) params[i] = dt_hf_model_param(m, i, NULL);
  dt_optimizer *opt = NULL;
  dt_adam_options o = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  RANK_OK(dt_optimizer_create_adamw(n, params, &o, &opt));
  for (int step = 0; step < 5; step++) {
    dt_tensor *loss = NULL, *full = NULL;
    RANK_OK(dt_optimizer_zero_grad(opt, true));
    RANK_OK(dt_hf_model_loss(m, ids, &loss));
    RANK_OK(dt_backward(loss, NULL));
    double v = 0;
    if (dt_tensor_is_distributed(loss)) {
      RANK_OK(dt_dist_full_tensor(loss, &full));
    } else {
      full = dt_tensor_retain(loss);
    }
    RANK_OK(dt_tensor_to_doubles(full, &v, 1));
    if (worst) *worst = fmax(*worst, fabs(v - losses[step]) / fabs(losses[step]));
    RANK_CHECK(fabs(v - losses[step]) <= 1e-4 * fabs(losses[step]),
               "%s step %d: loss %.7f, transformers %.7f", model, step + 1, v, losses[step]);
    RANK_OK(dt_clip_grad_norm(n, params, 1.0, NULL, NULL));
    RANK_OK(dt_optimizer_step(opt));
    dt_tensor_release(loss), dt_tensor_release(full);
  }
  dt_optimizer_destroy(opt);
  dt_tensor_release(ids), dt_tensor_release(want);
  return DT_OK;
}

static inline dt_status check_finetune(dt_hf_model *m, const char *model) {
  return check_finetune_rel(m, model, NULL);
}

#endif /* DT_TESTS_HF_FIXTURE_CHECKS_H */
