/* Process groups: creation, handles, work handles and the backend-independent pieces. The
 * collectives' public wrappers live in collectives.c. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "profile/profile_impl.h"
#include "tensor/tensor_impl.h"

const char *dt_reduce_op_name(dt_reduce_op op) {
  switch (op) {
  case DT_REDUCE_SUM: return "sum";
  case DT_REDUCE_AVG: return "avg";
  case DT_REDUCE_MAX: return "max";
  case DT_REDUCE_MIN: return "min";
  case DT_REDUCE_PROD: return "prod";
  }
  return "invalid";
}

uint64_t dt__comm_next_id(void) {
  static atomic_uint_fast64_t next_id = 1;
  return (uint64_t)atomic_fetch_add(&next_id, 1);
}

int64_t dt__env_positive(const char *name, int64_t fallback) {
  const char *text = getenv(name);
  if (!text || !*text) return fallback;
  char *end = NULL;
  long long value = strtoll(text, &end, 10);
  if (*end != '\0' || value <= 0) return fallback;
  return (int64_t)value;
}

dt_comm *dt__comm_new(const dt_comm_backend *backend, int rank, int size, uint64_t id,
                      void *state) {
  dt_comm *comm = dt__calloc(sizeof *comm);
  if (!comm) return NULL;
  comm->backend = backend;
  comm->rank = rank;
  comm->size = size;
  comm->id = id ? id : dt__comm_next_id();
  comm->timeout_ms = dt__env_positive("DT_COMM_TIMEOUT_MS", DT_COMM_DEFAULT_TIMEOUT_MS);
  const char *debug = getenv("DT_DEBUG_COLLECTIVES");
  comm->debug = debug && strcmp(debug, "0") != 0 && *debug;
  snprintf(comm->name, sizeof comm->name, "world");
  comm->state = state;
  return comm;
}

void dt__comm_free(dt_comm *comm) {
  if (!comm) return;
  while (comm->free_works) {
    dt_work *next = comm->free_works->next_free;
    dt__free(comm->free_works);
    comm->free_works = next;
  }
  dt__free(comm);
}

dt_status dt_comm_init(const dt_comm_options *opts, dt_comm **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_comm_init: out is NULL");
  *out = NULL;
  dt_comm_options defaults = {0};
  if (!opts) opts = &defaults;
  const char *backend = opts->backend;
  if (!backend) backend = getenv("DT_BACKEND");
  if (!backend || !*backend) backend = "threads";
  if (opts->timeout_ms < 0) {
    return dt__error(DT_ERR_INVALID,
                     "dt_comm_init: timeout_ms is %lld, expected > 0 (or 0 for the default)",
                     (long long)opts->timeout_ms);
  }

  bool unbuilt = false;
  char names[64];
  dt__comm_backend_names(names, sizeof names);
  dt_comm_backend_init_fn init = dt__comm_backend_find(backend, &unbuilt);
  if (!init && unbuilt) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_comm_init: backend \"%s\" is not built into this libdtensor (CMake "
                     "found no MPI, or DT_WITH_MPI=OFF); install an MPI (e.g. Open MPI) and "
                     "reconfigure, or use one of %s",
                     backend, names);
  }
  if (!init) {
    return dt__error(DT_ERR_INVALID, "dt_comm_init: unknown backend \"%s\" (from %s); expected %s",
                     backend, opts->backend ? "options" : "DT_BACKEND", names);
  }
  dt_status status = init(opts, out);
  if (status != DT_OK) return status;
  if (opts->timeout_ms > 0) (*out)->timeout_ms = opts->timeout_ms;
  return DT_OK;
}

dt_status dt__comm_split_ex(dt_comm *comm, int color, int key, const dt_split_hint *hint,
                            dt_comm **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_comm_split: out is NULL");
  *out = NULL;
  if (!comm) return dt__error(DT_ERR_INVALID, "dt_comm_split: comm is NULL");
  dt_status status = comm->backend->split(comm, color < 0 ? -1 : color, key, hint, out);
  if (status != DT_OK) {
    *out = NULL;
    return status;
  }
  if (*out) {
    (*out)->timeout_ms = comm->timeout_ms;
    (*out)->debug = comm->debug;
    snprintf((*out)->name, sizeof(*out)->name, "%.40s/split(color=%d)", comm->name, color);
  }
  return DT_OK;
}

dt_status dt_comm_split(dt_comm *comm, int color, int key, dt_comm **out) {
  return dt__comm_split_ex(comm, color, key, NULL, out);
}

void dt_comm_destroy(dt_comm *comm) {
  if (!comm || comm->owned_by_spawn) return;
  comm->backend->destroy(comm);
  dt__comm_free(comm);
}

void dt_comm_abort(dt_comm *comm, const char *reason) {
  if (comm) comm->backend->abort(comm, reason);
}

/* Getters answer -1 / 0 / NULL for a NULL group rather than crash. */
int dt_comm_rank(const dt_comm *comm) { return comm ? comm->rank : -1; }
int dt_comm_size(const dt_comm *comm) { return comm ? comm->size : 0; }
const char *dt_comm_backend_name(const dt_comm *comm) { return comm ? comm->backend->name : NULL; }
uint64_t dt_comm_id(const dt_comm *comm) { return comm ? comm->id : 0; }
const char *dt_comm_name(const dt_comm *comm) { return comm ? comm->name : NULL; }

void dt_comm_set_name(dt_comm *comm, const char *name) {
  if (comm) snprintf(comm->name, sizeof comm->name, "%s", name ? name : "");
}

dt_status dt_comm_set_timeout(dt_comm *comm, int64_t timeout_ms) {
  if (!comm) return dt__error(DT_ERR_INVALID, "dt_comm_set_timeout: comm is NULL");
  if (timeout_ms <= 0) {
    return dt__error(DT_ERR_INVALID, "dt_comm_set_timeout: timeout_ms is %lld, expected > 0",
                     (long long)timeout_ms);
  }
  comm->timeout_ms = timeout_ms;
  return DT_OK;
}

int64_t dt_comm_timeout(const dt_comm *comm) { return comm ? comm->timeout_ms : 0; }

/* ---- Work handles ----------------------------------------------------------------------- */

void dt__work_finish(dt_work *work, dt_status status) {
  work->done = true;
  work->status = status;
  if (status != DT_OK) snprintf(work->message, sizeof work->message, "%s", dt_last_error());
}

dt_status dt_work_wait(dt_work *work) {
  if (!work) return dt__error(DT_ERR_INVALID, "dt_work_wait: work is NULL");
  if (!work->done) {
    dt__profile_scope scope;
    dt__profile_begin(&scope, "wait", DT__PROFILE_CAT_WAIT, DT_PROFILE_LANE_COMM);
    dt_status status = work->comm->backend->wait(work->comm, work);
    if (!work->done) dt__work_finish(work, status);
    dt__profile_end_text(&scope, work->args.op_name);
  }
  if (work->status != DT_OK) return dt__error(work->status, "%s", work->message);
  return DT_OK;
}

dt_status dt_work_test(dt_work *work, bool *done) {
  if (!work || !done)
    return dt__error(DT_ERR_INVALID, "dt_work_test: %s is NULL", work ? "done" : "work");
  if (!work->done && work->comm->backend->test) {
    bool finished = false;
    dt_status status = work->comm->backend->test(work->comm, work, &finished);
    if (finished && !work->done) dt__work_finish(work, status);
  }
  *done = work->done;
  return DT_OK;
}

void dt_work_release(dt_work *work) {
  if (!work) return;
  if (!work->done) (void)dt_work_wait(work);
  dt__free(work->owned);
  work->owned = NULL;
  if (work->pooled) {
    work->next_free = work->comm->free_works;
    work->comm->free_works = work;
  }
}

/* ---- Shared helpers for backends ---------------------------------------------------------- */

static const char *kind_name(dt_coll_kind kind) {
  static const char *const names[DT_COLL_KIND_COUNT] = {[DT_COLL_ALL_REDUCE] = "all_reduce",
                                                        [DT_COLL_ALL_GATHER] = "all_gather",
                                                        [DT_COLL_REDUCE_SCATTER] = "reduce_scatter",
                                                        [DT_COLL_ALL_TO_ALL] = "all_to_all",
                                                        [DT_COLL_BROADCAST] = "broadcast",
                                                        [DT_COLL_SCATTER] = "scatter",
                                                        [DT_COLL_GATHER] = "gather",
                                                        [DT_COLL_BARRIER] = "barrier",
                                                        [DT_COLL_SEND] = "send",
                                                        [DT_COLL_RECV] = "recv",
                                                        [DT_COLL_SPLIT] = "split"};
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
