/*
 * Symbolic sizes: a pool of hash-consed integer expressions over the symbols of a compiled
 * variant. Sizes are never negative and divisors are positive constants (or expressions a
 * guard keeps positive), so floor and ceil division need no sign cases; a zero divisor
 * evaluates to 0 instead of trapping.
 */
#include <stdio.h>
#include <string.h>

#include "compile/compile_impl.h"

void dt__sx_pool_free(dt_sx_pool *p) {
  dt__free(p->nodes);
  memset(p, 0, sizeof *p);
}

/* The node (kind, a, b, v): an existing equal node or a new one. The linear search keeps the
 * pool canonical; pools hold a few hundred nodes, and this runs at compile time only. */
static int intern(dt_sx_pool *p, dt_sx_kind kind, int a, int b, int64_t v) {
  for (int i = 0; i < p->n; i++) {
    const dt_sx_node *n = &p->nodes[i];
    if (n->kind == kind && n->a == a && n->b == b && n->v == v) return i;
  }
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 64;
    dt_sx_node *nodes = dt__alloc(sizeof *nodes * (size_t)cap);
    if (!nodes) {
      p->oom = true;
      return 0;
    }
    if (p->n) memcpy(nodes, p->nodes, sizeof *nodes * (size_t)p->n);
    dt__free(p->nodes);
    p->nodes = nodes;
    p->cap = cap;
  }
  p->nodes[p->n] = (dt_sx_node){kind, a, b, v};
  return p->n++;
}

bool dt__sx_is_const(const dt_sx_pool *p, int e, int64_t *v) {
  if (e < 0 || e >= p->n || p->nodes[e].kind != DT_SX_CONST) return false;
  if (v) *v = p->nodes[e].v;
  return true;
}

int dt__sx_const(dt_sx_pool *p, int64_t v) { return intern(p, DT_SX_CONST, -1, -1, v); }
int dt__sx_sym(dt_sx_pool *p, int symbol) { return intern(p, DT_SX_SYM, -1, -1, symbol); }

static int64_t floordiv(int64_t a, int64_t b) { return b > 0 ? a / b : 0; }
static int64_t ceildiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

/* Commutative operands in a fixed order: a constant last, otherwise the older node first. */
static void order(const dt_sx_pool *p, int *a, int *b) {
  bool ca = dt__sx_is_const(p, *a, NULL), cb = dt__sx_is_const(p, *b, NULL);
  if ((ca && !cb) || (ca == cb && *a > *b)) {
    int t = *a;
    *a = *b;
    *b = t;
  }
}

int dt__sx_add(dt_sx_pool *p, int a, int b) {
  int64_t x, y;
  order(p, &a, &b);
  if (dt__sx_is_const(p, a, &x) && dt__sx_is_const(p, b, &y)) return dt__sx_const(p, x + y);
  if (dt__sx_is_const(p, b, &y)) {
    if (y == 0) return a;
    /* (e + c1) + c2 = e + (c1 + c2) */
    const dt_sx_node *n = &p->nodes[a];
    int64_t c1;
    if (n->kind == DT_SX_ADD && dt__sx_is_const(p, n->b, &c1)) {
      int inner = n->a;
      return dt__sx_add(p, inner, dt__sx_const(p, c1 + y));
    }
  }
  return intern(p, DT_SX_ADD, a, b, 0);
}

int dt__sx_mul(dt_sx_pool *p, int a, int b) {
  int64_t x, y;
  order(p, &a, &b);
  if (dt__sx_is_const(p, a, &x) && dt__sx_is_const(p, b, &y)) return dt__sx_const(p, x * y);
  if (dt__sx_is_const(p, b, &y)) {
    if (y == 0) return b;
    if (y == 1) return a;
    /* (e * c1) * c2 = e * (c1 * c2) */
    const dt_sx_node *n = &p->nodes[a];
    int64_t c1;
    if (n->kind == DT_SX_MUL && dt__sx_is_const(p, n->b, &c1)) {
      int inner = n->a;
      return dt__sx_mul(p, inner, dt__sx_const(p, c1 * y));
    }
  }
  return intern(p, DT_SX_MUL, a, b, 0);
}

int dt__sx_sub(dt_sx_pool *p, int a, int b) {
  return dt__sx_add(p, a, dt__sx_mul(p, b, dt__sx_const(p, -1)));
}

static int div_node(dt_sx_pool *p, dt_sx_kind kind, int a, int b) {
  int64_t x, y;
  if (dt__sx_is_const(p, a, &x) && dt__sx_is_const(p, b, &y))
    return dt__sx_const(p, kind == DT_SX_FLOORDIV ? floordiv(x, y) : ceildiv(x, y));
  if (dt__sx_is_const(p, b, &y)) {
    if (y == 1) return a;
    /* (e * k) / c = e * (k / c) when c divides k, floor or ceil alike. */
    const dt_sx_node *n = &p->nodes[a];
    int64_t k;
    if (y > 0 && n->kind == DT_SX_MUL && dt__sx_is_const(p, n->b, &k) && k % y == 0) {
      int inner = n->a;
      return dt__sx_mul(p, inner, dt__sx_const(p, k / y));
    }
  }
  /* (x * b) / b = x for a symbolic b, which a guard keeps positive (see the file comment). */
  const dt_sx_node *n = &p->nodes[a];
  if (!dt__sx_is_const(p, b, NULL) && n->kind == DT_SX_MUL && (n->a == b || n->b == b))
    return n->a == b ? n->b : n->a;
  return intern(p, kind, a, b, 0);
}

int dt__sx_floordiv(dt_sx_pool *p, int a, int b) { return div_node(p, DT_SX_FLOORDIV, a, b); }
int dt__sx_ceildiv(dt_sx_pool *p, int a, int b) { return div_node(p, DT_SX_CEILDIV, a, b); }

/* True when e is ceil(s / c) or floor(s / c) with a constant c >= 1: never more than s. */
static bool is_division_of(const dt_sx_pool *p, int e, int s) {
  const dt_sx_node *n = &p->nodes[e];
  int64_t c;
  return (n->kind == DT_SX_CEILDIV || n->kind == DT_SX_FLOORDIV) && n->a == s &&
         dt__sx_is_const(p, n->b, &c) && c >= 1;
}

static int minmax(dt_sx_pool *p, dt_sx_kind kind, int a, int b) {
  int64_t x, y;
  order(p, &a, &b);
  if (a == b) return a;
  /* Sizes are never negative, so s / c (c >= 1) is at most s. */
  if (is_division_of(p, a, b)) return kind == DT_SX_MIN ? a : b;
  if (is_division_of(p, b, a)) return kind == DT_SX_MIN ? b : a;
  if (dt__sx_is_const(p, a, &x) && dt__sx_is_const(p, b, &y))
    return dt__sx_const(p, kind == DT_SX_MIN ? (x < y ? x : y) : (x > y ? x : y));
  return intern(p, kind, a, b, 0);
}

int dt__sx_min(dt_sx_pool *p, int a, int b) { return minmax(p, DT_SX_MIN, a, b); }
int dt__sx_max(dt_sx_pool *p, int a, int b) { return minmax(p, DT_SX_MAX, a, b); }

static inline int64_t apply(const dt_sx_node *n, int64_t x, int64_t y) {
  switch (n->kind) {
  case DT_SX_ADD: return x + y;
  case DT_SX_MUL: return x * y;
  case DT_SX_FLOORDIV: return floordiv(x, y);
  case DT_SX_CEILDIV: return ceildiv(x, y);
  case DT_SX_MIN: return x < y ? x : y;
  case DT_SX_MAX: return x > y ? x : y;
  default: return 0;
  }
}

void dt__sx_eval_all(const dt_sx_pool *p, const int64_t *symbols, int64_t *vals) {
  for (int i = 0; i < p->n; i++) {
    const dt_sx_node *n = &p->nodes[i];
    if (n->kind == DT_SX_CONST)
      vals[i] = n->v;
    else if (n->kind == DT_SX_SYM)
      vals[i] = symbols[n->v];
    else
      vals[i] = apply(n, vals[n->a], vals[n->b]);
  }
}

int64_t dt__sx_eval(const dt_sx_pool *p, int e, const int64_t *symbols) {
  const dt_sx_node *n = &p->nodes[e];
  if (n->kind == DT_SX_CONST) return n->v;
  if (n->kind == DT_SX_SYM) return symbols[n->v];
  return apply(n, dt__sx_eval(p, n->a, symbols), dt__sx_eval(p, n->b, symbols));
}

static size_t format_rec(const dt_sx_pool *p, int e, char *buf, size_t size, bool paren) {
  const dt_sx_node *n = &p->nodes[e];
  char a[192], b[192];
  int len = 0;
  switch (n->kind) {
  case DT_SX_CONST: len = snprintf(buf, size, "%lld", (long long)n->v); break;
  case DT_SX_SYM: len = snprintf(buf, size, "s%lld", (long long)n->v); break;
  case DT_SX_ADD: {
    /* a + x*(-k) reads a - k*x (a - x when k is 1). */
    const dt_sx_node *m = &p->nodes[n->b];
    int64_t k;
    format_rec(p, n->a, a, sizeof a, false);
    if (m->kind == DT_SX_MUL && dt__sx_is_const(p, m->b, &k) && k < 0) {
      format_rec(p, m->a, b, sizeof b, true);
      if (k == -1)
        len = snprintf(buf, size, paren ? "(%s - %s)" : "%s - %s", a, b);
      else
        len = snprintf(buf, size, paren ? "(%s - %lld*%s)" : "%s - %lld*%s", a, (long long)-k, b);
    } else if (dt__sx_is_const(p, n->b, &k) && k < 0) {
      len = snprintf(buf, size, paren ? "(%s - %lld)" : "%s - %lld", a, (long long)-k);
    } else {
      format_rec(p, n->b, b, sizeof b, false);
      len = snprintf(buf, size, paren ? "(%s + %s)" : "%s + %s", a, b);
    }
    break;
  }
  case DT_SX_MUL:
    format_rec(p, n->a, a, sizeof a, true);
    format_rec(p, n->b, b, sizeof b, true);
    len = snprintf(buf, size, "%s*%s", a, b);
    break;
  case DT_SX_FLOORDIV:
  case DT_SX_CEILDIV:
  case DT_SX_MIN:
  case DT_SX_MAX: {
    static const char *const names[] = {[DT_SX_FLOORDIV] = "floor",
                                        [DT_SX_CEILDIV] = "ceil",
                                        [DT_SX_MIN] = "min",
                                        [DT_SX_MAX] = "max"};
    format_rec(p, n->a, a, sizeof a, false);
    format_rec(p, n->b, b, sizeof b, false);
    bool div = n->kind == DT_SX_FLOORDIV || n->kind == DT_SX_CEILDIV;
    len = snprintf(buf, size, div ? "%s(%s/%s)" : "%s(%s, %s)", names[n->kind], a, b);
    break;
  }
  }
  return len < 0 ? 0 : (size_t)len;
}

char *dt__sx_format(const dt_sx_pool *p, int e, char *buf, size_t size) {
  if (size == 0) return buf;
  buf[0] = '\0';
  if (e >= 0 && e < p->n) format_rec(p, e, buf, size, false);
  return buf;
}
