/*
 * dt_compile: traces a function over tensors into variants (a graph, symbolic shapes and
 * guards each) and runs the first variant whose guards hold. See include/dtensor/compile.h.
 *
 * This file holds the handle, its cache of variants and the guard check that picks one;
 * tracing is in compile/trace.c and running a variant in compile/execute.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile_impl.h"
#include "core/core_impl.h"
#include "tensor/device_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/dist.h"
#include "dtensor/ops.h"

#define DEFAULT_CACHE_LIMIT 8

/* ---- Guards ------------------------------------------------------------------------------- */

/* True when the variant takes these inputs; otherwise why (when why is not NULL). */
static bool guards_hold(dt_compile_variant *v, int n_in, dt_tensor *const *in, char *why,
                        size_t size) {
  for (int i = 0; i < n_in; i++) {
    const dt_tensor *x = in[i];
    const dt_compile_input *d = &v->inputs[i];
    const dt_dist_spec *spec = x->spec;
    int ndim = spec ? spec->ndim : x->ndim;
    const int64_t *shape = spec ? spec->shape : x->shape;
    if (x->dtype != d->dtype) {
      if (why)
        snprintf(why, size, "input %d: dtype is %s, the trace had %s", i, dt_dtype_name(x->dtype),
                 dt_dtype_name(d->dtype));
      return false;
    }
    if ((spec != NULL) != d->dist) {
      if (why)
        snprintf(why, size, "input %d: %s, the trace had a %s tensor", i,
                 spec ? "distributed" : "local", d->dist ? "distributed" : "local");
      return false;
    }
    if (ndim != d->ndim) {
      if (why) snprintf(why, size, "input %d: %d dims, the trace had %d", i, ndim, d->ndim);
      return false;
    }
    if (v->joint && (x->autograd && dt_tensor_requires_grad(x)) != d->requires_grad) {
      if (why)
        snprintf(why, size, "input %d: requires_grad is %s, the trace had %s", i,
                 d->requires_grad ? "false" : "true", d->requires_grad ? "true" : "false");
      return false;
    }
    if (spec) {
      if (spec->mesh_id != d->mesh_id || spec->mesh_ndim != d->mesh_ndim) {
        if (why) snprintf(why, size, "input %d: another mesh than the trace's", i);
        return false;
      }
      for (int m = 0; m < d->mesh_ndim; m++) {
        dt_placement a = spec->placements[m], b = d->placements[m];
        if (a.kind != b.kind || (a.kind == DT_SHARD && a.dim != b.dim) ||
            (a.kind == DT_PARTIAL && a.op != b.op)) {
          if (why) {
            char pa[32], pb[32];
            snprintf(why, size, "input %d: placement %s on mesh dim %d, the trace had %s", i,
                     dt_placement_format(a, pa, sizeof pa), m,
                     dt_placement_format(b, pb, sizeof pb));
          }
          return false;
        }
      }
    }
    for (int k = 0; k < ndim; k++) {
      if (d->sym[k] >= 0) {
        v->symvals[d->sym[k]] = shape[k];
      } else if (shape[k] != d->shape[k]) {
        if (why)
          snprintf(why, size, "input %d: dim %d is %lld, static in the trace at %lld", i, k,
                   (long long)shape[k], (long long)d->shape[k]);
        return false;
      }
    }
  }
  dt__sx_eval_all(&v->pool, v->symvals, v->exprvals);
  const int64_t *e = v->exprvals;
  for (int g = 0; g < v->n_guards; g++) {
    const dt_guard *gd = &v->guards[g];
    bool ok = gd->kind == DT_GUARD_EQ          ? e[gd->a] == e[gd->b]
              : gd->kind == DT_GUARD_DIVISIBLE ? e[gd->a] % gd->c == 0
                                               : e[gd->a] >= gd->c;
    if (ok) continue;
    if (why) {
      char a[128], b[128];
      dt__sx_format(&v->pool, gd->a, a, sizeof a);
      if (gd->kind == DT_GUARD_EQ) {
        dt__sx_format(&v->pool, gd->b, b, sizeof b);
        snprintf(why, size, "guard %s == %s (%s) failed: %lld != %lld", a, b, gd->why,
                 (long long)e[gd->a], (long long)e[gd->b]);
      } else {
        snprintf(why, size, "guard %s %s %lld (%s) failed: %s = %lld", a,
                 gd->kind == DT_GUARD_DIVISIBLE ? "divisible by" : ">=", (long long)gd->c, gd->why,
                 a, (long long)e[gd->a]);
      }
    }
    return false;
  }
  return true;
}

/* ---- Public API --------------------------------------------------------------------------- */

dt_status dt_compile(dt_compile_fn fn, void *user, int n_in, int n_out,
                     const dt_compile_options *options, dt_compiled **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_compile: out is NULL");
  *out = NULL;
  if (!fn) return dt__error(DT_ERR_INVALID, "dt_compile: fn is NULL");
  if (n_in < 0 || n_in > DT_COMPILE_MAX_ARGS || n_out < 0 || n_out > DT_COMPILE_MAX_ARGS) {
    return dt__error(DT_ERR_INVALID, "dt_compile: n_in %d and n_out %d must be in [0, %d]", n_in,
                     n_out, DT_COMPILE_MAX_ARGS);
  }
  dt_compile_options o = options ? *options : (dt_compile_options){0};
  if (o.cache_limit < 0 || o.cache_limit > 64) {
    return dt__error(DT_ERR_INVALID, "dt_compile: cache_limit %d must be in [0, 64]",
                     o.cache_limit);
  }
  if (o.backward && n_out < 1)
    return dt__error(DT_ERR_INVALID, "dt_compile: options.backward needs an output (the loss)");
  if (o.n_marks < 0 || (o.n_marks > 0 && !o.marks)) {
    return dt__error(DT_ERR_INVALID, "dt_compile: %d marks with marks %s", o.n_marks,
                     o.marks ? "given" : "NULL");
  }
  for (int m = 0; m < o.n_marks; m++) {
    if (o.marks[m].input < 0 || o.marks[m].input >= n_in || o.marks[m].dim < 0 ||
        o.marks[m].dim >= DT_MAX_DIMS) {
      return dt__error(DT_ERR_INVALID, "dt_compile: mark %d names input %d dim %d (%d inputs)", m,
                       o.marks[m].input, o.marks[m].dim, n_in);
    }
  }
  dt_compiled *c = dt__calloc(sizeof *c);
  if (!c) return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  if (o.n_marks) {
    c->marks = dt__alloc(sizeof *c->marks * (size_t)o.n_marks);
    if (!c->marks) {
      dt__free(c);
      return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
    }
    memcpy(c->marks, o.marks, sizeof *c->marks * (size_t)o.n_marks);
  }
  c->fn = fn;
  c->user = user;
  c->n_in = n_in;
  c->n_out = n_out;
  c->all_dynamic = o.dynamic;
  c->backward = o.backward;
  c->shape_cache = !o.no_shape_cache;
  c->n_marks = o.n_marks;
  c->cache_limit = o.cache_limit ? o.cache_limit : DEFAULT_CACHE_LIMIT;
  /* Exactly the documented word (a substring match took "norecompiles" for it); another
   * value is reported once through the log callback. */
  static const char *const log_words[] = {"recompiles"};
  c->log_recompiles =
      dt__env_choice("DT_COMPILE_LOG", log_words, 1, "no log of the recompiles") == 0;
  *out = c;
  return DT_OK;
}

void dt_compiled_destroy(dt_compiled *c) {
  if (!c) return;
  for (int i = 0; i < c->n_variants; i++) dt__compile_variant_destroy(c->variants[i]);
  dt__free_strings(c->reasons, c->n_reasons);
  dt__free(c->marks);
  dt__free(c);
}

static dt_status note_recompile(dt_compiled *c, const char *why) {
  char *copy = dt__strdup(why);
  char **reasons = dt__alloc(sizeof *reasons * (size_t)(c->n_reasons + 1));
  if (!copy || !reasons) {
    dt__free(copy);
    dt__free(reasons);
    return dt__error(DT_ERR_NOMEM, "dt_compile: out of memory");
  }
  if (c->n_reasons) memcpy(reasons, c->reasons, sizeof *reasons * (size_t)c->n_reasons);
  dt__free(c->reasons);
  c->reasons = reasons;
  c->reasons[c->n_reasons++] = copy;
  if (c->log_recompiles) fprintf(stderr, "dtensor compile: recompile %d: %s\n", c->n_reasons, why);
  return DT_OK;
}

/* A call of a backward handle run eagerly: the backward of out[0], then the outputs detached,
 * as a compiled call returns them. */
static dt_status eager_backward(int n_out, dt_tensor **out) {
  dt_status st = dt_backward(out[0], NULL);
  if (!st) st = dt__compile_detach_outputs(n_out, out);
  if (st) dt__tensors_clear(out, n_out);
  return st;
}

static dt_status call_variants(dt_compiled *c, int n_in, dt_tensor *const *in, int n_out,
                               dt_tensor **out, bool grad, const dt_compile_variant **ran);

/* Without options.backward under grad mode: the compiled forward runs with recording off, and
 * when an input or a constant it read requires grad, the call is recorded for autograd
 * (compile/grad_call.c). At the cache limit fn runs eagerly with recording on instead. */
static dt_status call_recorded(dt_compiled *c, int n_in, dt_tensor *const *in, int n_out,
                               dt_tensor **out) {
  bool needs = false;
  for (int i = 0; i < n_in; i++) needs |= in[i]->autograd && dt_tensor_requires_grad(in[i]);
  bool prev = dt_grad_mode_set(false);
  const dt_compile_variant *v = NULL;
  dt_status st = call_variants(c, n_in, in, n_out, out, false, &v);
  dt_grad_mode_set(prev);
  if (st || !v) return st; /* an eager run (the cache limit) recorded itself */
  for (int i = 0; v && i < v->g->n_nodes && !needs; i++) {
    const dt_tensor *k = v->constants[i];
    needs = k && k->autograd && dt_tensor_requires_grad(k);
  }
  if (needs) st = dt__compile_record_call(c, n_in, in, n_out, out);
  if (st) dt__tensors_clear(out, n_out);
  return st;
}

dt_status dt_compiled_call(dt_compiled *c, int n_in, dt_tensor *const *in, int n_out,
                           dt_tensor **out) {
  if (!c) return dt__error(DT_ERR_INVALID, "dt_compiled_call: compiled is NULL");
  if (n_out > 0 && !out) return dt__error(DT_ERR_INVALID, "dt_compiled_call: out is NULL");
  for (int k = 0; k < n_out; k++) out[k] = NULL;
  if (n_in != c->n_in || n_out != c->n_out) {
    return dt__error(
        DT_ERR_INVALID,
        "dt_compiled_call: %d inputs and %d outputs given, the function takes %d and %d", n_in,
        n_out, c->n_in, c->n_out);
  }
  if (n_in > 0 && !in) return dt__error(DT_ERR_INVALID, "dt_compiled_call: in is NULL");
  /* While no tensor carries autograd state none requires grad: one load, as dispatch does. */
  bool grad =
      atomic_load_explicit(&dt__autograd_live, memory_order_relaxed) != 0 && dt_grad_mode_enabled();
  for (int i = 0; i < n_in; i++) {
    if (!in[i]) return dt__error(DT_ERR_INVALID, "dt_compiled_call: input %d is NULL", i);
    if (DT_UNLIKELY(in[i]->storage->device != 0)) {
      char name[48];
      return dt__error(DT_ERR_UNSUPPORTED,
                       "dt_compiled_call: input %d is on %s; compiled schedules run on the CPU "
                       "only (planned buffers are host memory)",
                       i, dt__device_key_format(in[i]->storage->device, name, sizeof name));
    }
    int ndim = in[i]->spec ? in[i]->spec->ndim : in[i]->ndim;
    for (int m = 0; m < c->n_marks; m++) {
      if (c->marks[m].input == i && c->marks[m].dim >= ndim) {
        return dt__error(DT_ERR_INVALID,
                         "dt_compiled_call: a mark names dim %d of input %d (%d dims)",
                         c->marks[m].dim, i, ndim);
      }
    }
  }
  if (c->backward && !dt_grad_mode_enabled()) {
    return dt__error(DT_ERR_INVALID,
                     "dt_compiled_call: compiled with options.backward, called with grad mode off "
                     "(the backward needs it on)");
  }
  if (grad && !c->backward) return call_recorded(c, n_in, in, n_out, out);
  return call_variants(c, n_in, in, n_out, out, grad, NULL);
}

/* Runs the first variant whose guards hold, or traces a new one, or (at the cache limit) fn
 * eagerly. grad: recording is on (options.backward only; a call without it comes here with
 * recording off). ran is not NULL when call_recorded calls: *ran gets the variant that ran, NULL
 * after an eager run, which then records (grad mode on). */
static dt_status call_variants(dt_compiled *c, int n_in, dt_tensor *const *in, int n_out,
                               dt_tensor **out, bool grad, const dt_compile_variant **ran) {
  if (ran) *ran = NULL;
  c->stats.calls++;
  char why[512];
  why[0] = '\0'; /* written only when a guard fails */
  for (int k = 0; k < c->n_variants; k++) {
    dt_compile_variant *v = c->variants[k];
    if (!guards_hold(v, n_in, in, why, sizeof why)) continue;
    if (grad) { /* a constant set to require grad after the trace */
      for (int i = 0; i < v->g->n_nodes; i++) {
        if (v->constants[i] && !v->const_grad[i] && v->constants[i]->autograd &&
            dt_tensor_requires_grad(v->constants[i]))
          return dt__error(DT_ERR_UNSUPPORTED,
                           "dt_compiled_call: constant %%%s requires grad: it did not when traced",
                           v->g->nodes[i].name);
      }
    }
    if (ran) *ran = v;
    if (!v->joint) return dt__compile_run(v, in, n_out, out, NULL);
    dt_tensor *grads_storage[16] = {0};
    dt_tensor **grads =
        v->n_grads <= 16 ? grads_storage : dt__calloc(sizeof(dt_tensor *) * (size_t)v->n_grads);
    if (!grads) return dt__error(DT_ERR_NOMEM, "dt_compiled_call: out of memory");
    dt_status st = dt__compile_run(v, in, n_out, out, grads);
    if (!st) st = dt__compile_apply_grads(v, in, grads);
    if (grads != grads_storage) dt__free(grads);
    if (st) dt__tensors_clear(out, n_out);
    return st;
  }
  if (c->n_variants >= c->cache_limit) {
    if (!c->warned_eager) {
      c->warned_eager = true;
      snprintf(c->eager_reason, sizeof c->eager_reason,
               "%d variants (the cache limit) and none takes these inputs: %.400s", c->n_variants,
               why);
      fprintf(stderr, "dtensor compile: warning: %s; running eagerly from now on for such inputs\n",
              c->eager_reason);
      dt__log(DT_LOG_WARN,
              "dt_compile: %d variants (the cache limit) and none takes these inputs (%s); running "
              "eagerly from now on for such inputs",
              c->n_variants, why);
    }
    c->stats.eager_calls++;
    /* Called by call_recorded (ran set, recording off for the variants): fn records itself. */
    bool prev = ran && !c->backward ? dt_grad_mode_set(true) : dt_grad_mode_enabled();
    dt_status st = c->fn(c->user, n_in, in, n_out, out);
    dt_grad_mode_set(prev);
    if (!st && c->backward) st = eager_backward(n_out, out);
    return st;
  }
  dt_compile_variant *v = NULL;
  dt_status st = dt__compile_trace(c, in, out, &v);
  if (st) return st;
  if (c->n_variants > 0) {
    st = note_recompile(c, why);
    if (st) {
      dt__compile_variant_destroy(v);
      dt__tensors_clear(out, n_out);
      return st;
    }
    c->stats.recompiles++;
  }
  c->stats.compiles++;
  if (ran) *ran = v;
  c->variants[c->n_variants++] = v;
  c->stats.variants = c->n_variants;
  return DT_OK;
}

int dt__compiled_find_variant(dt_compiled *c, int n_in, dt_tensor *const *in) {
  for (int k = 0; k < c->n_variants; k++) {
    if (guards_hold(c->variants[k], n_in, in, NULL, 0)) return k;
  }
  return -1;
}

dt_status dt_compiled_stats(const dt_compiled *c, dt_compile_stats *out) {
  if (!c || !out) return dt__error(DT_ERR_INVALID, "dt_compiled_stats: NULL compiled or out");
  *out = c->stats;
  return DT_OK;
}

const char *dt_compiled_recompile_reason(const dt_compiled *c, int i) {
  return c && i >= 0 && i < c->n_reasons ? c->reasons[i] : NULL;
}

const char *dt_compiled_eager_reason(const dt_compiled *c) {
  return c && c->warned_eager ? c->eager_reason : NULL;
}

/* A growing string for dt_compiled_to_string. */
typedef struct text {
  char *buf;
  size_t len, cap;
  bool oom;
} text;

DT_PRINTF(2, 3) static void put(text *t, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || t->oom) {
    va_end(ap2);
    return;
  }
  if (t->len + (size_t)n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 1024;
    while (cap < t->len + (size_t)n + 1) cap *= 2;
    char *b = dt__alloc(cap);
    if (!b) {
      t->oom = true;
      va_end(ap2);
      return;
    }
    if (t->len) memcpy(b, t->buf, t->len);
    dt__free(t->buf);
    t->buf = b;
    t->cap = cap;
  }
  vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap2);
  va_end(ap2);
  t->len += (size_t)n;
}

dt_status dt_compiled_to_string(const dt_compiled *c, int i, char **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_compiled_to_string: out is NULL");
  *out = NULL;
  if (!c || i < 0 || i >= c->n_variants) {
    return dt__error(DT_ERR_INVALID, "dt_compiled_to_string: variant %d of %d", i,
                     c ? c->n_variants : 0);
  }
  const dt_compile_variant *v = c->variants[i];
  char *graph = dt_graph_to_string(v->g);
  if (!graph) return dt__error(DT_ERR_NOMEM, "dt_compiled_to_string: out of memory");
  text t = {0};
  put(&t, "%s", graph);
  dt_free(graph);
  put(&t, "symbolic shapes {\n");
  for (int j = 0; j < v->g->n_nodes; j++) {
    const dt_node *n = &v->g->nodes[j];
    for (int k = 0; k < n->n_out && v->dims[j]; k++) {
      put(&t, "  %%%s%s", n->name, n->is_tuple ? "" : "");
      if (n->is_tuple) put(&t, "[%d]", k);
      put(&t, " : [");
      for (int d = 0; d < n->types[k].ndim; d++) {
        char e[256];
        put(&t, "%s%s", d ? ", " : "",
            dt__sx_format(&v->pool, v->dims[j][k * DT_MAX_DIMS + d], e, sizeof e));
      }
      put(&t, "]");
      if (v->fused && v->fused[j].same_as > 0)
        put(&t, " = %%%s (%s)", v->g->nodes[v->fused[j].same_as - 1].name,
            v->fused[j].identity ? "a reshape to its own dims" : "common subexpression");
      if (v->placements[j] && k == 0) {
        if (n->kind == DT_NODE_CALL)
          put(&t, v->dist_plain[j] ? " on the shards" : " planned per call");
        if (n->kind == DT_NODE_REDISTRIBUTE) {
          char steps[512];
          put(&t, " by %s", dt__compile_format_redistribute(v, j, steps, sizeof steps));
        }
        put(&t, " (");
        for (int m = 0; m < v->mesh_ndim[j]; m++) {
          char p[32];
          put(&t, "%s%s", m ? ", " : "", dt_placement_format(v->placements[j][m], p, sizeof p));
        }
        put(&t, ")");
        if (v->local_dims[j]) {
          put(&t, " local [");
          for (int d = 0; d < n->types[0].ndim; d++) {
            char e[256];
            put(&t, "%s%s", d ? ", " : "",
                dt__sx_format(&v->pool, v->local_dims[j][d], e, sizeof e));
          }
          put(&t, "]");
        }
      }
      put(&t, "\n");
    }
  }
  put(&t, "}\nguards {\n");
  for (int k = 0; k < v->n_guards; k++) {
    const dt_guard *gd = &v->guards[k];
    char a[256], b[256];
    dt__sx_format(&v->pool, gd->a, a, sizeof a);
    if (gd->kind == DT_GUARD_EQ)
      put(&t, "  %s == %s  # %s\n", a, dt__sx_format(&v->pool, gd->b, b, sizeof b), gd->why);
    else
      put(&t, "  %s %s %lld  # %s\n", a,
          gd->kind == DT_GUARD_DIVISIBLE ? "divisible by" : ">=", (long long)gd->c, gd->why);
  }
  put(&t, "}\n");
  if (t.oom) {
    dt__free(t.buf);
    return dt__error(DT_ERR_NOMEM, "dt_compiled_to_string: out of memory");
  }
  *out = t.buf;
  return DT_OK;
}
