/*
 * Splitting a model into pipeline stages (dt_pp_split_model): consecutive children of the model
 * move into "PipelineStage" modules that chain them and keep their names, so parameter FQNs
 * stay the model's (as TorchTitan's manual split, which deletes the other stages' layers from
 * a copy of the whole model).
 */
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "pipeline/pipeline_impl.h"

static dt_status stage_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor *cur = dt_tensor_retain(x);
  for (int i = 0; i < dt_module_child_count(m); i++) {
    dt_tensor *next = NULL;
    dt_status st = dt_module_forward(dt_module_child(m, i), cur, &next);
    dt_tensor_release(cur);
    if (st) return st;
    cur = next;
  }
  *out = cur;
  return DT_OK;
}

/* The default sizes: n children over s stages, extras to the middle stages first. */
static void even_sizes(int n, int s, int *sizes) {
  for (int k = 0; k < s; k++) sizes[k] = n / s;
  int extra = n % s;
  for (int k = 1; k + 1 < s && extra > 0; k++, extra--) sizes[k]++;
  if (extra > 0) {
    sizes[0]++;
    extra--;
  }
  if (extra > 0) sizes[s - 1]++;
}

dt_status dt_pp_split_model(dt_module *model, int n_stages, const int *sizes, dt_module **stages) {
  static const char fn[] = "dt_pp_split_model";
  if (!model || !stages) return dt__error(DT_ERR_INVALID, "%s: NULL model or stages", fn);
  int n = dt_module_child_count(model);
  if (n_stages < 1 || n_stages > n) {
    return dt__error(DT_ERR_INVALID, "%s: %d stages for a model of %d children", fn, n_stages, n);
  }
  int *count = dt__alloc(sizeof *count * (size_t)n_stages);
  if (!count) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  if (sizes) {
    int64_t sum = 0;
    for (int k = 0; k < n_stages; k++) {
      if (sizes[k] < 1 || sizes[k] > n) {
        dt__free(count);
        return dt__error(DT_ERR_INVALID, "%s: sizes[%d] = %d is outside 1..%d (the children)", fn,
                         k, sizes[k], n);
      }
      sum += sizes[k];
      count[k] = sizes[k];
    }
    if (sum != n) {
      dt__free(count);
      return dt__error(DT_ERR_INVALID, "%s: sizes add up to %lld, the model has %d children", fn,
                       (long long)sum, n);
    }
  } else {
    even_sizes(n, n_stages, count);
  }
  dt_status st = DT_OK;
  int made = 0;
  for (; made < n_stages && !st; made++) {
    st = dt_module_create("PipelineStage", stage_forward, NULL, &stages[made]);
    if (st) break;
  }
  for (int k = 0; k < n_stages && !st; k++) {
    for (int i = 0; i < count[k] && !st; i++) {
      char name[64];
      snprintf(name, sizeof name, "%s", dt_module_child_name(model, 0));
      dt_module *child = NULL;
      st = dt_module_take_child(model, 0, &child);
      if (!st) st = dt_module_add_child(stages[k], name, child);
    }
  }
  dt__free(count);
  if (st) {
    for (int k = 0; k < made; k++) {
      dt_module_destroy(stages[k]);
      stages[k] = NULL;
    }
  }
  return st;
}
