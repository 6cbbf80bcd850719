/*
 * Pipeline schedules: the per-rank action lists of GPipe, 1F1B and interleaved 1F1B, and the
 * validation every schedule passes before it can run (pipeline.h): static rules per rank
 * (stages on the rank, each needed action exactly once, in a usable order), then a simulation
 * of all ranks with the runtime's transfer semantics (sends complete at once up to
 * DT_PP_SEND_WINDOW unreceived transfers per ordered pair, receives wait, FIFO per pair with
 * no tags) that must finish with each receive meeting the send it expects.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "pipeline/pipeline_impl.h"

#define N_KINDS 6

static const char *const kind_tag[N_KINDS] = {"F", "B", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};

const char *dt_pp_action_format(dt_pp_action a, char *buf, size_t size) {
  if (!buf || size == 0) return buf;
  const char *tag = (unsigned)a.kind < N_KINDS ? kind_tag[a.kind] : "?";
  snprintf(buf, size, "%d%s%d", a.stage, tag, a.microbatch);
  return buf;
}

/* ---- Making and freeing --------------------------------------------------------------------- */

void dt_pp_schedule_destroy(dt_pp_schedule *s) {
  if (!s) return;
  for (int r = 0; s->actions && r < s->n_ranks; r++) dt__free(s->actions[r]);
  dt__free(s->actions);
  dt__free(s->counts);
  dt__free(s);
}

static dt_pp_schedule *schedule_new(int n_ranks, int n_stages, int n_microbatches) {
  dt_pp_schedule *s = dt__calloc(sizeof *s);
  if (!s) return NULL;
  s->n_ranks = n_ranks;
  s->n_stages = n_stages;
  s->n_microbatches = n_microbatches;
  s->counts = dt__calloc(sizeof *s->counts * (size_t)n_ranks);
  s->actions = dt__calloc(sizeof *s->actions * (size_t)n_ranks);
  if (!s->counts || !s->actions) {
    dt_pp_schedule_destroy(s);
    return NULL;
  }
  return s;
}

int dt_pp_schedule_ranks(const dt_pp_schedule *s) { return s ? s->n_ranks : 0; }
int dt_pp_schedule_stages(const dt_pp_schedule *s) { return s ? s->n_stages : 0; }
int dt_pp_schedule_microbatches(const dt_pp_schedule *s) { return s ? s->n_microbatches : 0; }

dt_status dt_pp_schedule_actions(const dt_pp_schedule *s, int rank, int *n,
                                 const dt_pp_action **actions) {
  if (!s || !n || !actions)
    return dt__error(DT_ERR_INVALID, "dt_pp_schedule_actions: NULL schedule, n or actions");
  if (rank < 0 || rank >= s->n_ranks) {
    return dt__error(DT_ERR_INVALID, "dt_pp_schedule_actions: rank %d outside 0..%d", rank,
                     s->n_ranks - 1);
  }
  *n = s->counts[rank];
  *actions = s->actions[rank];
  return DT_OK;
}

dt_status dt__pp_schedule_copy(const dt_pp_schedule *s, dt_pp_schedule **out) {
  dt_pp_schedule *c = schedule_new(s->n_ranks, s->n_stages, s->n_microbatches);
  for (int r = 0; c && r < s->n_ranks; r++) {
    c->actions[r] = dt__alloc(sizeof *c->actions[r] * (size_t)(s->counts[r] + 1));
    if (!c->actions[r]) break;
    memcpy(c->actions[r], s->actions[r], sizeof *c->actions[r] * (size_t)s->counts[r]);
    c->counts[r] = s->counts[r];
  }
  if (!c || (s->n_ranks > 0 && !c->actions[s->n_ranks - 1])) {
    dt_pp_schedule_destroy(c);
    return dt__error(DT_ERR_NOMEM, "dt_pipeline_create: out of memory for the schedule");
  }
  *out = c;
  return DT_OK;
}

/* ---- Validation: the rules of one rank's list --------------------------------------------- */

typedef struct checker {
  const dt_pp_schedule *s;
  int *pos; /* [N_KINDS][n_stages][n_microbatches]: index in the rank's list, -1 if absent */
} checker;

static int *pos_at(checker *c, dt_pp_action_kind kind, int stage, int mb) {
  return &c->pos[((size_t)kind * (size_t)c->s->n_stages + (size_t)stage) *
                     (size_t)c->s->n_microbatches +
                 (size_t)mb];
}

/* Whether an action of this kind on stage must cross to another rank (and so exist). */
static bool crosses(const dt_pp_schedule *s, dt_pp_action_kind kind, int stage) {
  int r = dt__pp_stage_rank(s, stage);
  switch (kind) {
  case DT_PP_SEND_ACTIVATION:
  case DT_PP_RECV_GRAD: return stage + 1 < s->n_stages && dt__pp_stage_rank(s, stage + 1) != r;
  case DT_PP_RECV_ACTIVATION:
  case DT_PP_SEND_GRAD: return stage > 0 && dt__pp_stage_rank(s, stage - 1) != r;
  default: return true;
  }
}

#define FAIL(...) return dt__error(DT_ERR_INVALID, __VA_ARGS__)

static dt_status check_action(const checker *c, int r, int i, dt_pp_action a) {
  const dt_pp_schedule *s = c->s;
  char name[48];
  if ((unsigned)a.kind >= N_KINDS) FAIL("pp schedule: rank %d action %d has kind %d", r, i, a.kind);
  dt_pp_action_format(a, name, sizeof name);
  if (a.stage < 0 || a.stage >= s->n_stages)
    FAIL("pp schedule: rank %d action %d (%s): stage outside 0..%d", r, i, name, s->n_stages - 1);
  if (a.microbatch < 0 || a.microbatch >= s->n_microbatches) {
    FAIL("pp schedule: rank %d action %d (%s): microbatch outside 0..%d", r, i, name,
         s->n_microbatches - 1);
  }
  if (dt__pp_stage_rank(s, a.stage) != r) {
    FAIL("pp schedule: rank %d action %d (%s): stage %d lives on rank %d", r, i, name, a.stage,
         dt__pp_stage_rank(s, a.stage));
  }
  if (!crosses(s, a.kind, a.stage)) {
    FAIL("pp schedule: rank %d action %d (%s): stage %d has no %s to another rank", r, i, name,
         a.stage,
         a.kind == DT_PP_SEND_ACTIVATION || a.kind == DT_PP_RECV_GRAD ? "next stage"
                                                                      : "previous stage");
  }
  return DT_OK;
}

/* "a before b" on rank r, both required to exist. */
static dt_status check_order(checker *c, int r, dt_pp_action a, dt_pp_action b, const char *why) {
  int pa = *pos_at(c, a.kind, a.stage, a.microbatch),
      pb = *pos_at(c, b.kind, b.stage, b.microbatch);
  if (pa < pb) return DT_OK;
  char na[48], nb[48];
  FAIL("pp schedule: rank %d runs %s (action %d) before %s (action %d): %s", r,
       dt_pp_action_format(b, nb, sizeof nb), pb, dt_pp_action_format(a, na, sizeof na), pa, why);
}

static dt_status check_rank(checker *c, int r) {
  const dt_pp_schedule *s = c->s;
  size_t cells = (size_t)N_KINDS * (size_t)s->n_stages * (size_t)s->n_microbatches;
  for (size_t k = 0; k < cells; k++) c->pos[k] = -1;
  for (int i = 0; i < s->counts[r]; i++) {
    dt_pp_action a = s->actions[r][i];
    PP_CHECK(check_action(c, r, i, a));
    int *p = pos_at(c, a.kind, a.stage, a.microbatch);
    if (*p >= 0) {
      char name[48];
      FAIL("pp schedule: rank %d runs %s twice (actions %d and %d)", r,
           dt_pp_action_format(a, name, sizeof name), *p, i);
    }
    *p = i;
  }
  for (int st = r; st < s->n_stages; st += s->n_ranks) {
    for (int mb = 0; mb < s->n_microbatches; mb++) {
      for (int k = 0; k < N_KINDS; k++) {
        if (crosses(s, (dt_pp_action_kind)k, st) && *pos_at(c, (dt_pp_action_kind)k, st, mb) < 0) {
          char name[48];
          FAIL(
              "pp schedule: rank %d never runs %s", r,
              dt_pp_action_format((dt_pp_action){(dt_pp_action_kind)k, st, mb}, name, sizeof name));
        }
      }
      dt_pp_action f = {DT_PP_FORWARD, st, mb}, b = {DT_PP_BACKWARD, st, mb};
      PP_CHECK(check_order(c, r, f, b, "every forward comes before its backward"));
      if (crosses(s, DT_PP_RECV_ACTIVATION, st)) {
        PP_CHECK(check_order(c, r, (dt_pp_action){DT_PP_RECV_ACTIVATION, st, mb}, f,
                             "the forward needs the activation it receives"));
      } else if (st > 0) {
        PP_CHECK(check_order(c, r, (dt_pp_action){DT_PP_FORWARD, st - 1, mb}, f,
                             "the forward needs the previous stage's output on this rank"));
      }
      if (crosses(s, DT_PP_SEND_ACTIVATION, st)) {
        PP_CHECK(check_order(c, r, f, (dt_pp_action){DT_PP_SEND_ACTIVATION, st, mb},
                             "an activation is sent after the forward that computes it"));
      }
      if (crosses(s, DT_PP_RECV_GRAD, st)) {
        PP_CHECK(check_order(c, r, (dt_pp_action){DT_PP_RECV_GRAD, st, mb}, b,
                             "the backward needs its output's gradient"));
      } else if (st + 1 < s->n_stages) {
        PP_CHECK(check_order(c, r, (dt_pp_action){DT_PP_BACKWARD, st + 1, mb}, b,
                             "the backward needs the next stage's input gradient on this rank"));
      }
      if (crosses(s, DT_PP_SEND_GRAD, st)) {
        PP_CHECK(check_order(c, r, b, (dt_pp_action){DT_PP_SEND_GRAD, st, mb},
                             "a gradient is sent after the backward that computes it"));
      }
    }
  }
  return DT_OK;
}

/* ---- Validation: the simulation of all ranks --------------------------------------------------
 */

typedef struct channel {
  dt_pp_action *sent; /* the sends from a to b in order */
  int n, head;        /* head: the next one b receives */
} channel;

typedef struct sim {
  const dt_pp_schedule *s;
  int *pc;
  channel *ch; /* [n_ranks * n_ranks], [from * n_ranks + to] */
  double *clock;
  size_t stride; /* entries of times per channel */
  double forward_cost, backward_cost;
  double busy;
} sim;

static int peer_of(const dt_pp_schedule *s, dt_pp_action a) {
  bool to_next = a.kind == DT_PP_SEND_ACTIVATION || a.kind == DT_PP_RECV_GRAD;
  return dt__pp_stage_rank(s, to_next ? a.stage + 1 : a.stage - 1);
}

/* The send a receive expects. */
static dt_pp_action expected_send(dt_pp_action a) {
  if (a.kind == DT_PP_RECV_ACTIVATION)
    return (dt_pp_action){DT_PP_SEND_ACTIVATION, a.stage - 1, a.microbatch};
  return (dt_pp_action){DT_PP_SEND_GRAD, a.stage + 1, a.microbatch};
}

/* Advances rank r by one action if it can: 1 advanced, 0 blocked, an error status < 0. */
static int sim_step(sim *m, int r, double *times) {
  const dt_pp_schedule *s = m->s;
  dt_pp_action a = s->actions[r][m->pc[r]];
  switch (a.kind) {
  case DT_PP_FORWARD:
  case DT_PP_BACKWARD: {
    double cost = a.kind == DT_PP_FORWARD ? m->forward_cost : m->backward_cost;
    m->clock[r] += cost;
    m->busy += cost;
    break;
  }
  case DT_PP_SEND_ACTIVATION:
  case DT_PP_SEND_GRAD: {
    channel *c = &m->ch[r * s->n_ranks + peer_of(s, a)];
    if (c->n - c->head >= DT_PP_SEND_WINDOW) return 0;
    times[(size_t)(r * s->n_ranks + peer_of(s, a)) * m->stride + (size_t)c->n] = m->clock[r];
    c->sent[c->n++] = a;
    break;
  }
  default: {
    int from = peer_of(s, a);
    channel *c = &m->ch[from * s->n_ranks + r];
    if (c->head == c->n) return 0;
    dt_pp_action got = c->sent[c->head], want = expected_send(a);
    if (got.kind != want.kind || got.stage != want.stage || got.microbatch != want.microbatch) {
      char na[48], ng[48], nw[48];
      dt__error(DT_ERR_INVALID,
                "pp schedule: rank %d action %d (%s) would receive rank %d's %s, not %s (messages "
                "between two ranks arrive in the order they are sent)",
                r, m->pc[r], dt_pp_action_format(a, na, sizeof na), from,
                dt_pp_action_format(got, ng, sizeof ng), dt_pp_action_format(want, nw, sizeof nw));
      return -1;
    }
    double sent_at = times[(size_t)(from * s->n_ranks + r) * m->stride + (size_t)c->head];
    if (sent_at > m->clock[r]) m->clock[r] = sent_at;
    c->head++;
    break;
  }
  }
  m->pc[r]++;
  return 1;
}

static dt_status deadlock_error(const sim *m) {
  const dt_pp_schedule *s = m->s;
  char text[512];
  size_t len = 0;
  for (int r = 0; r < s->n_ranks && len + 64 < sizeof text; r++) {
    if (m->pc[r] >= s->counts[r]) continue;
    char name[48];
    len += (size_t)snprintf(text + len, sizeof text - len, "%srank %d at action %d (%s)",
                            len ? ", " : "", r, m->pc[r],
                            dt_pp_action_format(s->actions[r][m->pc[r]], name, sizeof name));
  }
  FAIL("pp schedule: deadlock: no rank can go on: %s", text);
}

/* Runs the simulation; *makespan (may be NULL) receives the last rank's finish time. */
static dt_status simulate(const dt_pp_schedule *s, double forward_cost, double backward_cost,
                          double *makespan, double *busy) {
  int n = s->n_ranks;
  int max_count = 0;
  for (int r = 0; r < n; r++)
    if (s->counts[r] > max_count) max_count = s->counts[r];
  sim m = {.s = s,
           .forward_cost = forward_cost,
           .backward_cost = backward_cost,
           .stride = (size_t)max_count + 1};
  m.pc = dt__calloc(sizeof *m.pc * (size_t)n);
  m.clock = dt__calloc(sizeof *m.clock * (size_t)n);
  m.ch = dt__calloc(sizeof *m.ch * (size_t)n * (size_t)n);
  double *times = dt__calloc(sizeof *times * (size_t)n * (size_t)n * (size_t)(max_count + 1));
  dt_status st = m.pc && m.clock && m.ch && times ? DT_OK : DT_ERR_NOMEM;
  for (int k = 0; k < n * n && !st; k++) {
    m.ch[k].sent = dt__alloc(sizeof *m.ch[k].sent * (size_t)(max_count + 1));
    if (!m.ch[k].sent) st = DT_ERR_NOMEM;
  }
  if (st) {
    st = dt__error(DT_ERR_NOMEM, "pp schedule: out of memory for the simulation");
  }
  bool progress = true;
  while (!st && progress) {
    progress = false;
    for (int r = 0; r < n && !st; r++) {
      while (m.pc[r] < s->counts[r]) {
        int moved = sim_step(&m, r, times);
        if (moved < 0) st = DT_ERR_INVALID;
        if (moved <= 0) break;
        progress = true;
      }
    }
  }
  bool done = true;
  for (int r = 0; r < n; r++) done = done && m.pc[r] >= s->counts[r];
  if (!st && !done) st = deadlock_error(&m);
  double end = 0;
  for (int r = 0; r < n && !st; r++)
    if (m.clock[r] > end) end = m.clock[r];
  if (makespan) *makespan = end;
  if (busy) *busy = m.busy;
  for (int k = 0; m.ch && k < n * n; k++) dt__free(m.ch[k].sent);
  dt__free(m.ch);
  dt__free(m.pc);
  dt__free(m.clock);
  dt__free(times);
  return st;
}

/* The checks below say "pp schedule: ..."; the public function that called them names itself
 * instead. */
static dt_status named(const char *fn, dt_status st) {
  if (!st) return st;
  char message[1024];
  const char *text = dt_last_error();
  if (strncmp(text, "pp schedule: ", 13) == 0) text += 13;
  snprintf(message, sizeof message, "%s", text);
  return dt__error(st, "%s: %s", fn, message);
}

static dt_status validate(const char *fn, const dt_pp_schedule *s) {
  checker c = {.s = s};
  size_t cells = (size_t)N_KINDS * (size_t)s->n_stages * (size_t)s->n_microbatches;
  c.pos = dt__alloc(sizeof *c.pos * cells);
  if (!c.pos) return dt__error(DT_ERR_NOMEM, "%s: out of memory for the validation", fn);
  dt_status st = DT_OK;
  for (int r = 0; r < s->n_ranks && !st; r++) st = check_rank(&c, r);
  dt__free(c.pos);
  if (!st) st = simulate(s, 1.0, 1.0, NULL, NULL);
  return named(fn, st);
}

dt_status dt_pp_schedule_bubble(const dt_pp_schedule *s, double backward_cost, double *bubble) {
  if (!s || !bubble) return dt__error(DT_ERR_INVALID, "dt_pp_schedule_bubble: NULL argument");
  if (!(backward_cost > 0) || !isfinite(backward_cost)) {
    return dt__error(DT_ERR_INVALID,
                     "dt_pp_schedule_bubble: backward_cost %g is not a finite number > 0",
                     backward_cost);
  }
  /* A huge backward_cost summed over the schedule overflowed to inf and the bubble came out
   * NaN: past 1e15 the times are scaled so that a backward takes 1 (the ratio is what counts;
   * below, the times stay as they were, exact for the usual small integer costs). */
  bool scale = backward_cost > 1e15;
  double forward = scale ? 1.0 / backward_cost : 1.0;
  double backward = scale ? 1.0 : backward_cost;
  double makespan = 0, busy = 0;
  PP_CHECK(named("dt_pp_schedule_bubble", simulate(s, forward, backward, &makespan, &busy)));
  *bubble = makespan > 0 ? 1.0 - busy / (makespan * s->n_ranks) : 0.0;
  return DT_OK;
}

/* ---- The custom and built-in schedules ------------------------------------------------------ */

static dt_status check_counts(const char *fn, int n_ranks, int n_stages, int n_microbatches) {
  if (n_ranks < 1 || n_stages < 1 || n_microbatches < 1) {
    FAIL("%s: ranks %d, stages %d and microbatches %d must all be >= 1", fn, n_ranks, n_stages,
         n_microbatches);
  }
  /* The validation simulates every pair of ranks: a bound keeps its indexes in an int and its
   * memory small (pp degrees in use are tens). */
  if (n_ranks > DT_PP_MAX_RANKS) FAIL("%s: %d ranks is more than %d", fn, n_ranks, DT_PP_MAX_RANKS);
  if (n_stages % n_ranks != 0)
    FAIL("%s: %d stages do not divide over %d ranks (stage s lives on rank s %% ranks)", fn,
         n_stages, n_ranks);
  if ((int64_t)n_stages * n_microbatches > (1 << 20))
    FAIL("%s: %d stages x %d microbatches is too many", fn, n_stages, n_microbatches);
  return DT_OK;
}

dt_status dt_pp_schedule_create_custom(int n_ranks, int n_stages, int n_microbatches,
                                       const int *n_actions, const dt_pp_action *const *actions,
                                       dt_pp_schedule **out) {
  static const char fn[] = "dt_pp_schedule_create_custom";
  if (!out) FAIL("%s: out is NULL", fn);
  *out = NULL;
  if (!n_actions || !actions) FAIL("%s: NULL n_actions or actions", fn);
  PP_CHECK(check_counts(fn, n_ranks, n_stages, n_microbatches));
  dt_pp_schedule *s = schedule_new(n_ranks, n_stages, n_microbatches);
  if (!s) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  dt_status st = DT_OK;
  for (int r = 0; r < n_ranks && !st; r++) {
    if (n_actions[r] < 0 || n_actions[r] > (1 << 26) || (n_actions[r] > 0 && !actions[r])) {
      st = dt__error(DT_ERR_INVALID, "%s: rank %d has %d actions at %p", fn, r, n_actions[r],
                     (const void *)actions[r]);
      break;
    }
    s->actions[r] = dt__alloc(sizeof *s->actions[r] * (size_t)(n_actions[r] + 1));
    if (!s->actions[r]) {
      st = dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
      break;
    }
    if (n_actions[r] > 0)
      memcpy(s->actions[r], actions[r], sizeof **actions * (size_t)n_actions[r]);
    s->counts[r] = n_actions[r];
  }
  if (!st) st = validate(fn, s);
  if (st) {
    dt_pp_schedule_destroy(s);
    return st;
  }
  *out = s;
  return DT_OK;
}

typedef struct builder {
  const dt_pp_schedule *s;
  int rank, n, cap;
  dt_pp_action *list;
} builder;

static void emit(builder *b, dt_pp_action_kind kind, int stage, int mb) {
  if (b->n < b->cap) b->list[b->n] = (dt_pp_action){kind, stage, mb};
  b->n++;
}

static void emit_forward(builder *b, int stage, int mb) {
  if (crosses(b->s, DT_PP_RECV_ACTIVATION, stage)) emit(b, DT_PP_RECV_ACTIVATION, stage, mb);
  emit(b, DT_PP_FORWARD, stage, mb);
  if (crosses(b->s, DT_PP_SEND_ACTIVATION, stage)) emit(b, DT_PP_SEND_ACTIVATION, stage, mb);
}

static void emit_backward(builder *b, int stage, int mb) {
  if (crosses(b->s, DT_PP_RECV_GRAD, stage)) emit(b, DT_PP_RECV_GRAD, stage, mb);
  emit(b, DT_PP_BACKWARD, stage, mb);
  if (crosses(b->s, DT_PP_SEND_GRAD, stage)) emit(b, DT_PP_SEND_GRAD, stage, mb);
}

static int min_int(int a, int b) { return a < b ? a : b; }

/* Megatron's interleaved order: the k-th forward of a rank is its local chunk (k / P) % v of
 * microbatch (k / (P v)) P + k % P; backwards walk the chunks from the last. */
static void interleaved_stage(const dt_pp_schedule *s, int rank, int k, bool forward, int *stage,
                              int *mb) {
  int p = s->n_ranks, v = s->n_stages / s->n_ranks;
  int chunk = (k / p) % v;
  if (!forward) chunk = v - 1 - chunk;
  *stage = chunk * p + rank;
  *mb = (k / (p * v)) * p + k % p;
}

static void build_rank(builder *b, dt_pp_schedule_kind kind) {
  const dt_pp_schedule *s = b->s;
  int r = b->rank, m = s->n_microbatches, p = s->n_ranks;
  if (kind == DT_PP_GPIPE) {
    for (int mb = 0; mb < m; mb++) emit_forward(b, r, mb);
    for (int mb = 0; mb < m; mb++) emit_backward(b, r, mb);
    return;
  }
  if (kind == DT_PP_1F1B) {
    int warmup = min_int(p - 1 - r, m);
    for (int i = 0; i < warmup; i++) emit_forward(b, r, i);
    for (int i = 0; i < m - warmup; i++) {
      emit_forward(b, r, warmup + i);
      emit_backward(b, r, i);
    }
    for (int i = m - warmup; i < m; i++) emit_backward(b, r, i);
    return;
  }
  int v = s->n_stages / p, total = m * v;
  int warmup = m == p ? total : min_int((p - r - 1) * 2 + (v - 1) * p, total);
  int stage, mb;
  for (int k = 0; k < warmup; k++) {
    interleaved_stage(s, r, k, true, &stage, &mb);
    emit_forward(b, stage, mb);
  }
  for (int i = 0; i < total - warmup; i++) {
    interleaved_stage(s, r, warmup + i, true, &stage, &mb);
    emit_forward(b, stage, mb);
    interleaved_stage(s, r, i, false, &stage, &mb);
    emit_backward(b, stage, mb);
  }
  for (int k = total - warmup; k < total; k++) {
    interleaved_stage(s, r, k, false, &stage, &mb);
    emit_backward(b, stage, mb);
  }
}

dt_status dt_pp_schedule_create(dt_pp_schedule_kind kind, int n_ranks, int stages_per_rank,
                                int n_microbatches, dt_pp_schedule **out) {
  static const char fn[] = "dt_pp_schedule_create";
  if (!out) FAIL("%s: out is NULL", fn);
  *out = NULL;
  if (kind != DT_PP_GPIPE && kind != DT_PP_1F1B && kind != DT_PP_INTERLEAVED_1F1B)
    FAIL("%s: unknown schedule kind %d", fn, (int)kind);
  if (n_ranks < 1 || stages_per_rank < 1 || stages_per_rank > (1 << 16))
    FAIL("%s: n_ranks %d and stages_per_rank %d must be >= 1 (stages_per_rank at most 65536)", fn,
         n_ranks, stages_per_rank);
  if (kind != DT_PP_INTERLEAVED_1F1B && stages_per_rank != 1) {
    FAIL("%s: %s runs one stage per rank, not %d (use DT_PP_INTERLEAVED_1F1B)", fn,
         kind == DT_PP_GPIPE ? "GPipe" : "1F1B", stages_per_rank);
  }
  if ((int64_t)n_ranks * stages_per_rank > (1 << 16))
    FAIL("%s: %d ranks x %d stages is too many", fn, n_ranks, stages_per_rank);
  PP_CHECK(check_counts(fn, n_ranks, n_ranks * stages_per_rank, n_microbatches));
  if (kind == DT_PP_INTERLEAVED_1F1B && n_microbatches % n_ranks != 0) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: interleaved 1F1B takes microbatches in groups of the %d ranks "
                     "(Megatron's order); %d microbatches is not a multiple",
                     fn, n_ranks, n_microbatches);
  }
  dt_pp_schedule *s = schedule_new(n_ranks, n_ranks * stages_per_rank, n_microbatches);
  if (!s) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  /* Each (stage, microbatch) of a rank gives at most 6 actions. */
  int cap = 6 * stages_per_rank * n_microbatches;
  dt_status st = DT_OK;
  for (int r = 0; r < n_ranks && !st; r++) {
    builder b = {.s = s, .rank = r, .cap = cap};
    b.list = dt__alloc(sizeof *b.list * (size_t)(cap + 1));
    if (!b.list) {
      st = dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
      break;
    }
    build_rank(&b, kind);
    s->actions[r] = b.list;
    s->counts[r] = b.n;
  }
  if (!st) st = validate(fn, s);
  if (st) {
    dt_pp_schedule_destroy(s);
    return st;
  }
  *out = s;
  return DT_OK;
}
