/* The PyTorch training fixtures (../shared/fixtures/training, reached through the
 * DT_FIXTURES_DIR definition every test gets): presence, each run's per-step losses from
 * expected.json, its safetensors files, and a loss's value. Shared by test_train_fixtures.c
 * and test_fsdp.c; the includer defines STEPS (the runs' step count). */
#ifndef DT_TEST_TRAINING_FIXTURES_H
#define DT_TEST_TRAINING_FIXTURES_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Private header: fixture loaders report through dt__error like the library. */
#include "core/core_impl.h"
#include "dtensor/dtensor.h"

static bool fixtures_present(void) {
  FILE *f = fopen(DT_FIXTURES_DIR "/training/expected.json", "r");
  if (f) fclose(f);
  return f != NULL;
}

/* The 20 losses of run `name` from expected.json: the numbers of the "losses" array after
 * the run's key. */
static bool expected_losses(const char *name, double *losses) {
  FILE *f = fopen(DT_FIXTURES_DIR "/training/expected.json", "r");
  if (!f) return false;
  static char text[1 << 16];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = '\0';
  char key[128];
  snprintf(key, sizeof key, "\"%s\"", name);
  const char *p = strstr(text, key);
  if (p) p = strstr(p, "\"losses\"");
  if (p) p = strchr(p, '[');
  if (!p) return false;
  p++;
  for (int i = 0; i < STEPS; i++) {
    char *end = NULL;
    losses[i] = strtod(p, &end);
    if (end == p) return false;
    p = end;
    while (*p == ',' || *p == ' ' || *p == '\n') p++;
  }
  return true;
}

static dt_status open_fixture(const char *run_name, const char *part, dt_safetensors **out) {
  char path[512];
  snprintf(path, sizeof path, "%s/training/%s.%s.safetensors", DT_FIXTURES_DIR, run_name, part);
  return dt_safetensors_open(path, out);
}

/* The value of a one-element loss, local or distributed (any placement). */
static dt_status loss_value(dt_tensor *loss, double *value) {
  bool prev = dt_grad_mode_set(false);
  dt_tensor *full = NULL;
  dt_status st = DT_OK;
  if (dt_tensor_is_distributed(loss)) st = dt_dist_full_tensor(loss, &full);
  if (!st) st = dt_tensor_to_doubles(full ? full : loss, value, 1);
  dt_tensor_release(full);
  dt_grad_mode_set(prev);
  return st;
}

/* Compares the n trained parameters w (local or distributed: gathered) with PyTorch's final
 * weights of run_name: element for element within rtol * |want| + atol, or, with l2, each
 * parameter's relative L2 distance within rtol (mixed precision). DT_ERR_INTERNAL naming the
 * run, the parameter and the first element off. */
static inline dt_status fixture_compare_final(const char *run_name, dt_tensor *const *w,
                                              const char *const *names, int n, double rtol,
                                              double atol, bool l2) {
  dt_safetensors *final = NULL;
  dt_status st = open_fixture(run_name, "final", &final);
  for (int i = 0; i < n && !st; i++) {
    dt_tensor *want = NULL, *got = NULL;
    st = dt_safetensors_load(final, names[i], DT_SAFETENSORS_COPY, &want);
    if (!st)
      st = dt_tensor_is_distributed(w[i]) ? dt_dist_full_tensor(w[i], &got) : dt_clone(w[i], &got);
    int64_t count = want ? dt_tensor_numel(want) : 0;
    if (!st && dt_tensor_numel(got) != count) {
      st = dt__error(DT_ERR_INTERNAL, "%s: %s has %lld elements, PyTorch's %lld", run_name,
                     names[i], (long long)dt_tensor_numel(got), (long long)count);
    }
    double *a = calloc((size_t)count + 1, sizeof *a), *b = calloc((size_t)count + 1, sizeof *b);
    if (!st) st = dt_tensor_to_doubles(got, a, count);
    if (!st) st = dt_tensor_to_doubles(want, b, count);
    double diff = 0, norm = 0;
    for (int64_t k = 0; k < count && !st; k++) {
      diff += (a[k] - b[k]) * (a[k] - b[k]);
      norm += b[k] * b[k];
      if (!l2 && fabs(a[k] - b[k]) > rtol * fabs(b[k]) + atol) {
        st = dt__error(DT_ERR_INTERNAL, "%s: final %s[%lld] is %.9g, PyTorch %.9g", run_name,
                       names[i], (long long)k, a[k], b[k]);
      }
    }
    if (!st && l2 && sqrt(diff) > rtol * sqrt(norm)) {
      st = dt__error(DT_ERR_INTERNAL, "%s: final %s is %.3g away from PyTorch's (relative L2)",
                     run_name, names[i], sqrt(diff / norm));
    }
    free(a);
    free(b);
    dt_tensor_release(want);
    dt_tensor_release(got);
  }
  dt_safetensors_destroy(final);
  return st;
}

#endif /* DT_TEST_TRAINING_FIXTURES_H */
