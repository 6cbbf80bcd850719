/*
 * Patterns in tensor-parallel plans (PyTorch's parallelize_module with "layers.*.attn.q_proj"):
 * a '*' matches any run of characters within one dotted segment of a module's FQN, so that an
 * architecture's plan is one table however many layers the model has. The eager path expands a
 * plan into the FQNs of the modules each pattern matches before applying it.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "parallel/parallel_impl.h"

/* Whether fqn matches pattern, '*' standing for any characters except '.'. */
static bool match(const char *p, const char *s) {
  for (; *p; p++, s++) {
    if (*p == '*') {
      for (;;) {
        if (match(p + 1, s)) return true;
        if (!*s || *s == '.') return false;
        s++;
      }
    }
    if (*p != *s) return false;
  }
  return *s == '\0';
}

bool dt__tp_pattern_match(const char *pattern, const char *fqn) { return match(pattern, fqn); }

typedef struct expansion {
  const dt_tp_plan *plan;
  const dt_tp_style_options *options;
  dt__tp_plan_owned *out;
  int *matched; /* [plan->n] */
  dt_status st;
} expansion;

static dt_status add_entry(expansion *x, const char *fqn, int k) {
  dt__tp_plan_owned *o = x->out;
  void *arrays[3] = {&o->entries, &o->options, &o->names};
  size_t sizes[3] = {sizeof *o->entries, sizeof *o->options, sizeof *o->names};
  if (!dt__reserve_arrays(o->plan.n, &o->cap, 16, 3, arrays, sizes))
    return dt__error(DT_ERR_NOMEM, "dt_parallel_tp_module: out of memory");
  o->plan.entries = o->entries;
  char *name = dt__strdup(fqn);
  if (!name) return dt__error(DT_ERR_NOMEM, "dt_parallel_tp_module: out of memory");
  int n = o->plan.n++;
  o->names[n] = name;
  o->entries[n] = (dt_tp_plan_entry){.fqn = name, .style = x->plan->entries[k].style};
  o->options[n] = x->options ? x->options[k] : (dt_tp_style_options){0};
  x->matched[k]++;
  return DT_OK;
}

static dt_status visit(const char *fqn, dt_module *m, void *user) {
  (void)m;
  expansion *x = user;
  for (int k = 0; k < x->plan->n; k++) {
    const char *p = x->plan->entries[k].fqn;
    if (!strchr(p, '*') || !match(p, fqn)) continue;
    dt_status st = add_entry(x, fqn, k);
    if (st) return st;
  }
  return DT_OK;
}

void dt__tp_plan_owned_clear(dt__tp_plan_owned *o) {
  dt__free_strings(o->names, o->plan.n);
  DT__FREE_EACH(o->entries, o->options);
  memset(o, 0, sizeof *o);
}

dt_status dt__tp_plan_expand(dt_module *model, const dt_tp_plan *plan,
                             const dt_tp_style_options *options, dt__tp_plan_owned *out) {
  static const char fn[] = "dt_parallel_tp_module";
  memset(out, 0, sizeof *out);
  for (int k = 0; k < plan->n; k++)
    if (!plan->entries[k].fqn)
      return dt__error(DT_ERR_INVALID, "%s: plan entry %d has no FQN", fn, k);
  expansion x = {plan, options, out, dt__calloc(sizeof(int) * (size_t)(plan->n ? plan->n : 1)),
                 DT_OK};
  if (!x.matched) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  /* Literal FQNs keep their place and are checked (found, named once) by the caller; patterns
   * are expanded in the tree's order after them. */
  dt_status st = DT_OK;
  for (int k = 0; k < plan->n && !st; k++)
    if (!strchr(plan->entries[k].fqn, '*')) st = add_entry(&x, plan->entries[k].fqn, k);
  if (!st) st = dt_module_visit(model, visit, &x);
  for (int k = 0; k < plan->n && !st; k++)
    if (!x.matched[k])
      st = dt__error(DT_ERR_INVALID, "%s: plan pattern '%s' matches no module of the model", fn,
                     plan->entries[k].fqn);
  dt__free(x.matched);
  if (st) dt__tp_plan_owned_clear(out);
  return st;
}
