/*
 * The demo's model (tools/demo_model.h): token and positional embeddings, pre-norm decoder
 * blocks (layer_norm, causal self-attention from matmul + softmax, a GELU MLP), a final
 * layer_norm and a colwise LM head into the vocabulary-parallel cross-entropy, with
 * Megatron placements on "tp" and data parallelism on "dp" (see tools/demo_train.c).
 */
#include <math.h>
#include <stdlib.h>

#include "demo_model.h"

#define TAPE_MAX 256

/* The parameters, in one array: per layer LAYER_PARAMS of them, then the global ones. */
enum { P_LN1_W, P_LN1_B, P_WQ, P_WK, P_WV, P_WO, P_LN2_W, P_LN2_B, P_W1, P_W2, LAYER_PARAMS };
enum {
  P_TOK = LAYERS * LAYER_PARAMS,
  P_POS,
  P_LNF_W,
  P_LNF_B,
  P_HEAD,
  N_PARAMS,
};

/* Tensors made during one step, released together at its end. */
typedef struct tape {
  dt_tensor *t[TAPE_MAX];
  int n;
} tape;

static dt_tensor *keep(tape *tp, dt_tensor *t) {
  if (t && tp->n < TAPE_MAX) tp->t[tp->n++] = t;
  return t;
}

static void tape_clear(tape *tp) {
  for (int i = 0; i < tp->n; i++) dt_tensor_release(tp->t[i]);
  tp->n = 0;
}

/* A tiny generator (splitmix64) so that the data is the same on every rank and every run. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The batch of one step: PROMPT random tokens, SEP, the prompt reversed. The model reads the
 * first SEQ tokens and predicts the next one at each position; only the predictions of the
 * reversed part count (the prompt itself is random, so its tokens cannot be learned). */
static void make_batch(int step, int64_t *input, int64_t *target) {
  uint64_t state = 1234567u + (uint64_t)step * 7919u;
  for (int b = 0; b < BATCH; b++) {
    int64_t s[SEQ + 1];
    for (int i = 0; i < PROMPT; i++) s[i] = 1 + (int64_t)(next_random(&state) % (VOCAB - 1));
    s[PROMPT] = SEP;
    for (int i = 0; i < PROMPT; i++) s[PROMPT + 1 + i] = s[PROMPT - 1 - i];
    for (int t = 0; t < SEQ; t++) {
      input[b * SEQ + t] = s[t];
      target[b * SEQ + t] = t >= PROMPT ? s[t + 1] : IGNORE;
    }
  }
}

/* t (a CPU tensor) on the mesh's device of this rank: a new reference to t itself on a CPU
 * mesh, a copy on a CUDA mesh. */
static dt_status on_mesh_device(dt_mesh *mesh, dt_tensor *t, dt_tensor **out) {
  dt_device device = dt_mesh_device(mesh);
  if (device.kind == DT_DEVICE_CPU) {
    *out = dt_tensor_retain(t);
    return DT_OK;
  }
  return dt_to_device(t, device, out);
}

/* One parameter: made full on every rank from a fixed seed (so any world starts from the
 * same weights), distributed with its placements, and marked as a leaf requiring grad. */
static dt_status make_param(dt_mesh *mesh, int ndim, const int64_t *shape, double init,
                            uint64_t seed, dt_placement tp_placement, dt_tensor **out) {
  dt_tensor *full = NULL, *scaled = NULL;
  dt_status st;
  if (init == 1.0 || init == 0.0) {
    st = dt_full(ndim, shape, init, DT_F32, &scaled);
  } else {
    st = dt_randn(ndim, shape, DT_F32, seed, &full);
    if (!st) st = dt_mul_scalar(full, init, &scaled);
  }
  dt_placement pl[2] = {dt_replicate(), tp_placement};
  dt_tensor *placed = NULL;
  if (!st) st = on_mesh_device(mesh, scaled, &placed);
  if (!st) st = dt_dist_distribute_tensor(mesh, placed, 2, pl, out);
  if (!st) st = dt_tensor_set_requires_grad(*out, true);
  dt_tensor_release(full);
  dt_tensor_release(scaled);
  dt_tensor_release(placed);
  return st;
}

static dt_status make_params(dt_mesh *mesh, dt_tensor **p) {
  const double std = 0.02 * 5; /* larger than GPT-2's 0.02: a tiny model learns faster */
  const double out_std = std / sqrt(2.0 * LAYERS);
  dt_placement R = dt_replicate(), COL = dt_shard(0), ROW = dt_shard(1);
  dt_status st = DT_OK;
  for (int l = 0; l < LAYERS && !st; l++) {
    dt_tensor **q = p + l * LAYER_PARAMS;
    uint64_t s = 100 + 10 * (uint64_t)l;
    int64_t d[1] = {DMODEL}, dd[2] = {DMODEL, DMODEL};
    int64_t up[2] = {FFN, DMODEL}, down[2] = {DMODEL, FFN};
    if (!st) st = make_param(mesh, 1, d, 1.0, 0, R, &q[P_LN1_W]);
    if (!st) st = make_param(mesh, 1, d, 0.0, 0, R, &q[P_LN1_B]);
    if (!st) st = make_param(mesh, 2, dd, std, s + 1, COL, &q[P_WQ]);
    if (!st) st = make_param(mesh, 2, dd, std, s + 2, COL, &q[P_WK]);
    if (!st) st = make_param(mesh, 2, dd, std, s + 3, COL, &q[P_WV]);
    if (!st) st = make_param(mesh, 2, dd, out_std, s + 4, ROW, &q[P_WO]);
    if (!st) st = make_param(mesh, 1, d, 1.0, 0, R, &q[P_LN2_W]);
    if (!st) st = make_param(mesh, 1, d, 0.0, 0, R, &q[P_LN2_B]);
    if (!st) st = make_param(mesh, 2, up, std, s + 5, COL, &q[P_W1]);
    if (!st) st = make_param(mesh, 2, down, out_std, s + 6, ROW, &q[P_W2]);
  }
  int64_t d[1] = {DMODEL}, tok[2] = {VOCAB, DMODEL}, pos[2] = {SEQ, DMODEL};
  if (!st) st = make_param(mesh, 2, tok, 1.0 / 3, 1, R, &p[P_TOK]);
  if (!st) st = make_param(mesh, 2, pos, 1.0 / 3, 2, R, &p[P_POS]);
  if (!st) st = make_param(mesh, 1, d, 1.0, 0, R, &p[P_LNF_W]);
  if (!st) st = make_param(mesh, 1, d, 0.0, 0, R, &p[P_LNF_B]);
  if (!st) st = make_param(mesh, 2, tok, std, 3, COL, &p[P_HEAD]);
  return st;
}

/* A [B, T, D] activation Shard(2) on tp as [B, H, T, hd] Shard(1): each tp rank holds its
 * heads (Megatron's split of attention by heads). */
static dt_status to_heads(tape *tp, dt_tensor *x, dt_tensor **out) {
  dt_tensor *v = NULL;
  int64_t rows = dt_dist_global_shape(x)[0]; /* BATCH, or a microbatch's rows */
  dt_status st = dt_view(x, 4, (int64_t[]){rows, SEQ, HEADS, HEAD_DIM}, &v);
  keep(tp, v);
  if (!st) st = dt_transpose(v, 1, 2, out);
  if (!st) keep(tp, *out);
  return st;
}

/* One decoder block: x + attn(ln1(x)), then + mlp(ln2(.)). Returns the new residual. */
static dt_status block(tape *tp, dt_tensor *const *p, dt_tensor *x, dt_tensor *mask,
                       dt_tensor **out) {
  const int64_t norm_shape[1] = {DMODEL};
  dt_tensor *h = NULL, *q = NULL, *k = NULL, *v = NULL, *qh = NULL, *kh = NULL, *vh = NULL;
  dt_tensor *kt = NULL, *s = NULL, *ss = NULL, *sm = NULL, *pr = NULL, *a = NULL, *at = NULL;
  dt_tensor *ar = NULL, *o = NULL, *x1 = NULL, *h2 = NULL, *u = NULL, *g = NULL, *m = NULL;
  dt_status st = dt_layer_norm(x, 1, norm_shape, p[P_LN1_W], p[P_LN1_B], 1e-5, &h);
  keep(tp, h);
  if (!st) st = dt_linear(h, p[P_WQ], NULL, &q), keep(tp, q);
  if (!st) st = dt_linear(h, p[P_WK], NULL, &k), keep(tp, k);
  if (!st) st = dt_linear(h, p[P_WV], NULL, &v), keep(tp, v);
  if (!st) st = to_heads(tp, q, &qh);
  if (!st) st = to_heads(tp, k, &kh);
  if (!st) st = to_heads(tp, v, &vh);
  if (!st) st = dt_transpose(kh, 2, 3, &kt), keep(tp, kt);
  if (!st) st = dt_matmul(qh, kt, &s), keep(tp, s);
  if (!st) st = dt_mul_scalar(s, 1.0 / sqrt((double)HEAD_DIM), &ss), keep(tp, ss);
  if (!st) st = dt_masked_fill(ss, mask, -1e9, &sm), keep(tp, sm);
  if (!st) st = dt_softmax(sm, -1, &pr), keep(tp, pr);
  if (!st) st = dt_matmul(pr, vh, &a), keep(tp, a);
  if (!st) st = dt_transpose(a, 1, 2, &at), keep(tp, at);
  int64_t rows = dt_dist_global_shape(x)[0];
  if (!st) st = dt_reshape(at, 3, (int64_t[]){rows, SEQ, DMODEL}, &ar), keep(tp, ar);
  /* Rowwise: the output is Partial(sum) on tp; the residual add reduces it (all_reduce). */
  if (!st) st = dt_linear(ar, p[P_WO], NULL, &o), keep(tp, o);
  if (!st) st = dt_add(x, o, &x1), keep(tp, x1);
  if (!st) st = dt_layer_norm(x1, 1, norm_shape, p[P_LN2_W], p[P_LN2_B], 1e-5, &h2), keep(tp, h2);
  if (!st) st = dt_linear(h2, p[P_W1], NULL, &u), keep(tp, u);
  if (!st) st = dt_gelu(u, &g), keep(tp, g);
  if (!st) st = dt_linear(g, p[P_W2], NULL, &m), keep(tp, m);
  if (!st) st = dt_add(x1, m, out), keep(tp, *out);
  return st;
}

/* The embeddings and blocks [0, last) on tokens idx: the residual stream in *out (kept). */
static dt_status embed_and_blocks(tape *tp, dt_tensor *const *p, dt_tensor *idx, dt_tensor *mask,
                                  int last, dt_tensor **out) {
  dt_tensor *e = NULL, *x = NULL;
  dt_status st = dt_embedding(p[P_TOK], idx, &e);
  keep(tp, e);
  if (!st) st = dt_add(e, p[P_POS], &x), keep(tp, x);
  for (int l = 0; l < last && !st; l++) {
    dt_tensor *next = NULL;
    st = block(tp, p + l * LAYER_PARAMS, x, mask, &next);
    x = next;
  }
  *out = x;
  return st;
}

/* Blocks [first, LAYERS), the final norm and the LM head on the residual stream x: the logits
 * as [rows * SEQ, VOCAB] in *out (kept), Shard(-1) on tp. */
static dt_status blocks_and_head(tape *tp, dt_tensor *const *p, dt_tensor *x, dt_tensor *mask,
                                 int first, dt_tensor **out) {
  const int64_t norm_shape[1] = {DMODEL};
  dt_tensor *h = NULL, *logits = NULL;
  dt_status st = DT_OK;
  for (int l = first; l < LAYERS && !st; l++) {
    dt_tensor *next = NULL;
    st = block(tp, p + l * LAYER_PARAMS, x, mask, &next);
    x = next;
  }
  if (!st) st = dt_layer_norm(x, 1, norm_shape, p[P_LNF_W], p[P_LNF_B], 1e-5, &h), keep(tp, h);
  /* Colwise LM head: logits Shard(-1) on tp, never gathered; the loss is vocabulary-parallel. */
  if (!st) st = dt_linear(h, p[P_HEAD], NULL, &logits), keep(tp, logits);
  int64_t rows = st ? 0 : dt_dist_global_shape(x)[0];
  if (!st) st = dt_reshape(logits, 2, (int64_t[]){rows * SEQ, VOCAB}, out), keep(tp, *out);
  return st;
}

static dt_status demo_loss(dt_tensor *flat, dt_tensor *target, dt_tensor **loss) {
  dt_cross_entropy_options co = {.ignore_index = &(int64_t){IGNORE}};
  return dt_cross_entropy_ex(flat, target, &co, loss);
}

/* The forward pass and the loss (a one-element distributed tensor, kept on the tape). */
static dt_status forward(tape *tp, dt_tensor *const *p, dt_tensor *idx, dt_tensor *target,
                         dt_tensor *mask, dt_tensor **loss) {
  dt_tensor *x = NULL, *flat = NULL;
  dt_status st = embed_and_blocks(tp, p, idx, mask, LAYERS, &x);
  if (!st) st = blocks_and_head(tp, p, x, mask, LAYERS, &flat);
  if (!st) st = demo_loss(flat, target, loss), keep(tp, *loss);
  return st;
}

/* A full tensor every rank holds, as a distributed tensor with `placements`. */
static dt_status distribute_data(dt_mesh *mesh, const void *data, int ndim, const int64_t *shape,
                                 dt_dtype dtype, dt_placement dp, dt_tensor **out) {
  dt_tensor *full = NULL, *placed = NULL;
  dt_status st = dt_from_data(data, ndim, shape, dtype, &full);
  if (!st) st = on_mesh_device(mesh, full, &placed);
  if (!st)
    st = dt_dist_distribute_tensor(mesh, placed, 2, (dt_placement[]){dp, dt_replicate()}, out);
  dt_tensor_release(full);
  dt_tensor_release(placed);
  return st;
}

static dt_status scalar_value(dt_tensor *t, double *value) {
  dt_tensor *full = NULL;
  dt_status st = dt_dist_full_tensor(t, &full);
  if (!st) st = dt_tensor_to_doubles(full, value, 1);
  dt_tensor_release(full);
  return st;
}

struct demo_model {
  dt_mesh *mesh;          /* the caller's; pipelined: the stage mesh ("dp", "tp") */
  dt_tensor *p[N_PARAMS]; /* pipelined: NULL where another stage holds the parameter */
  dt_tensor *mask;
  dt_optimizer *opt;
  tape tp;
  /* Pipelined (demo_model_create_pipelined): this pp rank's stage and the pipeline. */
  int pp_rank;
  dt_module *stage;
  dt_pp_schedule *schedule;
  dt_pipeline *pipe;
};

/* The causal mask: true above the diagonal (a position must not see later ones). */
static dt_status make_mask(demo_model *m) {
  bool causal[SEQ * SEQ];
  for (int i = 0; i < SEQ; i++)
    for (int j = 0; j < SEQ; j++) causal[i * SEQ + j] = j > i;
  return distribute_data(m->mesh, causal, 2, (int64_t[]){SEQ, SEQ}, DT_BOOL, dt_replicate(),
                         &m->mask);
}

void demo_model_destroy(demo_model *m) {
  if (!m) return;
  dt_pipeline_destroy(m->pipe);
  dt_pp_schedule_destroy(m->schedule);
  dt_module_destroy(m->stage);
  tape_clear(&m->tp);
  dt_optimizer_destroy(m->opt);
  for (int i = 0; i < N_PARAMS; i++) dt_tensor_release(m->p[i]);
  dt_tensor_release(m->mask);
  free(m);
}

dt_status demo_model_create(dt_mesh *mesh, demo_model **out) {
  *out = NULL;
  demo_model *m = calloc(1, sizeof *m);
  if (!m) return DT_ERR_NOMEM;
  m->mesh = mesh;
  dt_status st = make_params(mesh, m->p);
  if (!st) st = make_mask(m);
  dt_adam_options ao = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-8, .weight_decay = 0.01};
  if (!st) st = dt_optimizer_create_adamw(N_PARAMS, m->p, &ao, &m->opt);
  if (st) {
    demo_model_destroy(m);
    return st;
  }
  *out = m;
  return DT_OK;
}

/* ---- Two pipeline stages ------------------------------------------------------------------- */

/* The first half of the blocks run on pp rank 0 (with the embeddings), the rest on pp rank 1
 * (with the final norm and the LM head). */
#define SPLIT (LAYERS / 2)

static bool on_stage(int i, int pp_rank) {
  bool first = i < P_TOK ? i / LAYER_PARAMS < SPLIT : i == P_TOK || i == P_POS;
  return pp_rank == 0 ? first : !first;
}

static dt_status first_stage(dt_module *self, dt_tensor *idx, dt_tensor **out) {
  demo_model *m = dt_module_user(self);
  dt_tensor *x = NULL;
  dt_status st = embed_and_blocks(&m->tp, m->p, idx, m->mask, SPLIT, &x);
  *out = st ? NULL : dt_tensor_retain(x);
  return st;
}

static dt_status last_stage(dt_module *self, dt_tensor *x, dt_tensor **out) {
  demo_model *m = dt_module_user(self);
  dt_tensor *flat = NULL;
  dt_status st = blocks_and_head(&m->tp, m->p, x, m->mask, SPLIT, &flat);
  *out = st ? NULL : dt_tensor_retain(flat);
  return st;
}

static dt_status pipeline_loss(dt_tensor *flat, dt_tensor *target, void *user, dt_tensor **loss) {
  (void)user;
  return demo_loss(flat, target, loss);
}

dt_status demo_model_create_pipelined(dt_pp_mesh *pm, int microbatches, demo_model **out) {
  *out = NULL;
  dt_comm *pp = dt_pp_mesh_group(pm);
  dt_mesh *mesh = dt_pp_mesh_stage_mesh(pm);
  if (!pp || !mesh || dt_comm_size(pp) != 2 || dt_mesh_ndim(mesh) != 2) {
    return DT_ERR_INVALID; /* the demo checks its --mesh first: 2 pp ranks, a (dp, tp) mesh */
  }
  demo_model *m = calloc(1, sizeof *m);
  if (!m) return DT_ERR_NOMEM;
  m->mesh = mesh;
  m->pp_rank = dt_comm_rank(pp);
  /* Every parameter from its seed (the same initial weights as on one rank), then only this
   * stage's kept. */
  dt_status st = make_params(mesh, m->p);
  dt_tensor *mine[N_PARAMS];
  int n = 0;
  for (int i = 0; i < N_PARAMS && !st; i++) {
    if (on_stage(i, m->pp_rank)) {
      mine[n++] = m->p[i];
    } else {
      dt_tensor_release(m->p[i]);
      m->p[i] = NULL;
    }
  }
  if (!st) st = make_mask(m);
  dt_adam_options ao = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-8, .weight_decay = 0.01};
  if (!st) st = dt_optimizer_create_adamw(n, mine, &ao, &m->opt);
  if (!st)
    st = dt_module_create("DemoStage", m->pp_rank == 0 ? first_stage : last_stage, m, &m->stage);
  if (!st) st = dt_pp_schedule_create(DT_PP_1F1B, 2, 1, microbatches, &m->schedule);
  dt_pipeline_options po = {.stage_mesh = mesh, .profile_actions = true};
  if (!st)
    st = dt_pipeline_create(pp, m->schedule, 1, &m->stage, pipeline_loss, NULL, &po, &m->pipe);
  if (st) {
    demo_model_destroy(m);
    return st;
  }
  *out = m;
  return DT_OK;
}

dt_status demo_model_step(demo_model *m, int step, double *loss_value) {
  tape *tp = &m->tp;
  int64_t input[BATCH * SEQ], target[BATCH * SEQ];
  make_batch(step, input, target);
  dt_tensor *idx = NULL, *tgt = NULL, *loss = NULL;
  dt_profiler_range_push("train_step");
  dt_status st =
      distribute_data(m->mesh, input, 2, (int64_t[]){BATCH, SEQ}, DT_I64, dt_shard(0), &idx);
  keep(tp, idx);
  if (!st)
    st = distribute_data(m->mesh, target, 1, (int64_t[]){BATCH * SEQ}, DT_I64, dt_shard(0), &tgt);
  keep(tp, tgt);
  if (!st) st = dt_optimizer_zero_grad(m->opt, true);
  double value = NAN;
  if (m->pipe) {
    /* Microbatches through the two stages; the loss comes back on every pp rank. */
    if (!st) st = dt_pipeline_step(m->pipe, idx, tgt, &value);
  } else {
    if (!st) st = forward(tp, m->p, idx, tgt, m->mask, &loss);
    if (!st) st = scalar_value(loss, &value);
    if (!st) st = dt_backward(loss, NULL);
  }
  if (!st) st = dt_optimizer_step(m->opt);
  dt_profiler_range_pop();
  tape_clear(tp);
  if (loss_value) *loss_value = value;
  return st;
}
