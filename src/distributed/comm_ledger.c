/* The comm ledger: a dispatch mode plus a comm observer that count collectives per op. */
#include <inttypes.h>
#include <stdio.h>

#include "comm/comm_impl.h"
#include "distributed/dist_impl.h"
#include "dtensor/mode.h"

#define LEDGER_ROWS 64

typedef struct ledger_row {
  const char *op;         /* static: an op-table name, or "(no op)" */
  const char *collective; /* static: the collective's public name */
  int64_t calls;
  int64_t bytes;
} ledger_row;

struct dt_comm_ledger {
  bool recording;
  const char *current_op;
  int n_rows;
  int64_t dropped; /* collectives past LEDGER_ROWS distinct rows */
  ledger_row rows[LEDGER_ROWS];
};

static void observe(const char *op_name, int64_t bytes, int group_size, void *user) {
  (void)group_size;
  dt_comm_ledger *l = user;
  const char *op = l->current_op ? l->current_op : "(no op)";
  for (int i = 0; i < l->n_rows; i++) {
    ledger_row *r = &l->rows[i];
    if (r->op == op && r->collective == op_name) {
      r->calls++;
      r->bytes += bytes;
      return;
    }
  }
  if (l->n_rows == LEDGER_ROWS) {
    l->dropped++;
    return;
  }
  l->rows[l->n_rows++] = (ledger_row){op, op_name, 1, bytes};
}

/* The mode: remember which op runs, so collectives it issues are attributed to it. */
static dt_status ledger_mode(dt_invocation *inv, void *user) {
  dt_comm_ledger *l = user;
  const char *outer = l->current_op;
  l->current_op = dt_invocation_op_name(inv);
  dt_status st = dt_invocation_run(inv);
  l->current_op = outer;
  return st;
}

dt_status dt_comm_ledger_start(dt_comm_ledger **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_comm_ledger_start: out is NULL");
  *out = NULL;
  if (dt__comm_observer) {
    return dt__error(DT_ERR_INVALID,
                     "dt_comm_ledger_start: another ledger is already recording on this thread");
  }
  dt_comm_ledger *l = dt__calloc(sizeof *l);
  if (!l) return dt__error(DT_ERR_NOMEM, "dt_comm_ledger_start: out of memory");
  dt_status st = dt_mode_push(ledger_mode, l);
  if (st) {
    dt__free(l);
    return st;
  }
  l->recording = true;
  dt__comm_observer = observe;
  dt__comm_observer_user = l;
  *out = l;
  return DT_OK;
}

dt_status dt_comm_ledger_stop(dt_comm_ledger *l) {
  if (!l || !l->recording)
    return dt__error(DT_ERR_INVALID, "dt_comm_ledger_stop: the ledger is not recording");
  dt_status st = dt_mode_pop();
  if (st) return st;
  l->recording = false;
  dt__comm_observer = NULL;
  dt__comm_observer_user = NULL;
  return DT_OK;
}

static bool matches(const ledger_row *r, const char *collective) {
  return !collective || strcmp(r->collective, collective) == 0;
}

int64_t dt_comm_ledger_count(const dt_comm_ledger *l, const char *collective) {
  int64_t n = 0;
  for (int i = 0; l && i < l->n_rows; i++) {
    if (matches(&l->rows[i], collective)) n += l->rows[i].calls;
  }
  return n;
}

int64_t dt_comm_ledger_bytes(const dt_comm_ledger *l, const char *collective) {
  int64_t n = 0;
  for (int i = 0; l && i < l->n_rows; i++) {
    if (matches(&l->rows[i], collective)) n += l->rows[i].bytes;
  }
  return n;
}

dt_status dt_comm_ledger_format(const dt_comm_ledger *l, char *buf, size_t size) {
  if (!l || !buf || size == 0)
    return dt__error(DT_ERR_INVALID, "dt_comm_ledger_format: NULL argument or empty buffer");
  size_t used = 0;
  int n = snprintf(buf, size, "%-24s %-28s %8s %14s\n", "op", "collective", "calls", "bytes");
  used = n > 0 ? (size_t)n : 0;
  for (int i = 0; i < l->n_rows && used < size; i++) {
    const ledger_row *r = &l->rows[i];
    n = snprintf(buf + used, size - used, "%-24s %-28s %8" PRId64 " %14" PRId64 "\n", r->op,
                 r->collective, r->calls, r->bytes);
    if (n < 0) break;
    used += (size_t)n;
  }
  if (used < size) {
    snprintf(buf + used, size - used, "%-24s %-28s %8" PRId64 " %14" PRId64 "\n", "total", "",
             dt_comm_ledger_count(l, NULL), dt_comm_ledger_bytes(l, NULL));
  }
  return DT_OK;
}

void dt_comm_ledger_destroy(dt_comm_ledger *l) {
  if (!l) return;
  if (l->recording) dt_comm_ledger_stop(l);
  dt__free(l);
}
