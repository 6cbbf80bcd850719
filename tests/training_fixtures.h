/* The PyTorch training fixtures (../shared/fixtures/training, reached through the
 * DT_FIXTURES_DIR definition every test gets): presence, each run's per-step losses from
 * expected.json, its safetensors files, and a loss's value. Shared by test_train_fixtures.c
 * and test_fsdp.c; the includer defines STEPS (the runs' step count). */
#ifndef DT_TEST_TRAINING_FIXTURES_H
#define DT_TEST_TRAINING_FIXTURES_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#endif /* DT_TEST_TRAINING_FIXTURES_H */
