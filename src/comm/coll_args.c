/* Descriptions and cross-rank agreement of collective calls, shared by the backends (which
 * compare what every rank called) and the public wrappers. Lower than both. */
#include <stdio.h>
#include <string.h>

#include "comm/comm_impl.h"

static const char *kind_name(dt_coll_kind kind) {
#define DT_COLL_KIND_NAME(id, name) [DT_COLL_##id] = #name,
  static const char *const names[DT_COLL_KIND_COUNT] = {DT_COLL_KINDS(DT_COLL_KIND_NAME)};
#undef DT_COLL_KIND_NAME
  return (int)kind >= 0 && kind < DT_COLL_KIND_COUNT ? names[kind] : "unknown";
}

char *dt__coll_describe(const dt_coll_args *a, int size, char *buf, size_t bufsize) {
  const char *name = a->op_name ? a->op_name : kind_name(a->kind);
  if (a->kind == DT_COLL_BARRIER) {
    snprintf(buf, bufsize, "%s()", name);
    return buf;
  }
  if (a->kind == DT_COLL_SPLIT) {
    snprintf(buf, bufsize, "%s(color=%d, key=%lld)", name, a->root, (long long)a->count);
    return buf;
  }
  int used = snprintf(buf, bufsize, "%s(%s, count=%lld", name, dt_dtype_name(a->dtype),
                      (long long)a->count);
  const char *extra = NULL;
  char tmp[160];
  tmp[0] = '\0';
  switch (a->kind) {
  case DT_COLL_ALL_REDUCE:
  case DT_COLL_REDUCE_SCATTER:
    snprintf(tmp, sizeof tmp, ", op=%s", dt_reduce_op_name(a->op));
    break;
  case DT_COLL_BROADCAST:
  case DT_COLL_SCATTER:
  case DT_COLL_GATHER: snprintf(tmp, sizeof tmp, ", root=%d", a->root); break;
  case DT_COLL_SEND:
  case DT_COLL_RECV: snprintf(tmp, sizeof tmp, ", peer=%d", a->root); break;
  default: break;
  }
  const int64_t *counts = a->counts ? a->counts : a->send_counts;
  if (counts) {
    char list[128];
    int n = size < 8 ? size : 8;
    dt__format_ints(list, sizeof list, n, counts);
    size_t len = strlen(tmp);
    snprintf(tmp + len, sizeof tmp - len, ", %s=%s%s rows of %lld",
             a->counts ? "counts" : "send_counts", list, size > 8 ? "..." : "",
             (long long)a->row_numel);
  }
  extra = tmp;
  if (used >= 0 && (size_t)used < bufsize)
    snprintf(buf + used, bufsize - (size_t)used, "%s)", extra);
  return buf;
}

static bool same_counts(const dt_coll_args *a, const dt_coll_args *b, const int64_t *ca,
                        const int64_t *cb, int size) {
  if ((ca == NULL) != (cb == NULL)) return false;
  if (!ca) return a->count == b->count;
  return a->row_numel == b->row_numel && memcmp(ca, cb, sizeof *ca * (size_t)size) == 0;
}

bool dt__coll_same_call(const dt_coll_args *a, const dt_coll_args *b, int size) {
  if (a->kind != b->kind) return false;
  if (a->kind == DT_COLL_BARRIER || a->kind == DT_COLL_SPLIT) return true;
  if (a->dtype != b->dtype) return false;
  switch (a->kind) {
  case DT_COLL_ALL_REDUCE: return a->op == b->op && a->count == b->count;
  case DT_COLL_REDUCE_SCATTER:
    return a->op == b->op && same_counts(a, b, a->counts, b->counts, size);
  case DT_COLL_ALL_GATHER: return same_counts(a, b, a->counts, b->counts, size);
  case DT_COLL_BROADCAST:
  case DT_COLL_SCATTER:
  case DT_COLL_GATHER: return a->root == b->root && a->count == b->count;
  case DT_COLL_ALL_TO_ALL:
    if ((a->send_counts == NULL) != (b->send_counts == NULL)) return false;
    return a->send_counts ? a->row_numel == b->row_numel : a->count == b->count;
  default: return a->count == b->count;
  }
}

bool dt__coll_check_all_to_all(const dt_coll_args *const *args, int size, int *bad_src,
                               int *bad_dst) {
  if (!args[0]->send_counts) return true;
  for (int s = 0; s < size; s++) {
    for (int d = 0; d < size; d++) {
      if (args[s]->send_counts[d] != args[d]->recv_counts[s]) {
        *bad_src = s;
        *bad_dst = d;
        return false;
      }
    }
  }
  return true;
}
