/*
 * `dtensor bench train --size S --tp N | --fsdp N`: the GPT-2-like step of bench/bench_gpt.c on
 * N rank threads (dt_comm_spawn, threads backend, one kernel/BLAS thread per rank), from the
 * same initial weights and data as the 1-rank run (each rank builds the 1-rank model from the
 * same seed and takes its tensors).
 *
 * The model is a module tree with PyTorch's layout, so that the library's parallel APIs apply
 * to it as to any model: a root "GPT" (parameter "pos"; children "tok" Embedding, "h" a
 * ModuleList of blocks, "ln_f" LayerNorm, "head" Linear without bias) and "Block"s (children
 * "ln_1", "q", "k", "v", "out", "ln_2", "fc1", "fc2"). The 1-rank model's fused qkv weight
 * [3 d, d] is split into the q, k and v Linears (the same rows: the same model).
 *
 *   --tp N    dt_parallel_tp_module with Megatron's plan: q, k, v colwise (each rank holds
 *             heads / N whole heads: the weights' rows are head-major), out rowwise, fc1
 *             colwise, fc2 rowwise, the LM head colwise with its output kept distributed
 *             (Shard(-1) logits, never gathered) into the vocabulary-parallel cross_entropy.
 *             Embeddings and LayerNorms replicated; the sequence is not split.
 *   --fsdp N  dt_parallel_fsdp over the tree: every module holding parameters is a unit (each
 *             Linear, LayerNorm, the embedding, the root for "pos"), its parameters Shard(0);
 *             the batch is split over the ranks (Shard(0) token ids and targets), the loss is
 *             the mean over the global batch.
 *
 * Per rank: the rank thread's CPU time and the wall time of each timed step (barriers between
 * steps), the bytes and calls of its collectives in one step (the comm ledger, on the warm-up
 * step), and every step's loss (the full loss, the same on every rank).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpt.h"
#include "bench_machine.h"
#include "bench_util.h"
#include "dtensor/dtensor.h"
#include "dtensor/parallel.h"
#include "kernels/cpu/blas.h"

#define MAX_STEPS 64
#define MAX_RANKS 8

enum { MODE_TP, MODE_FSDP };

/* What a block's and the root's forwards read (dt_module_user). */
typedef struct dist_ctx {
  gpt_sizes s;
  dt_tensor *mask; /* [T, T] bool, true above the diagonal: local (TP), Replicate (FSDP) */
} dist_ctx;

/* ---- The module tree ------------------------------------------------------------------------ */

/* A [B, T, W] activation (local or distributed) as [B, H', T, hd] with H' = W / hd heads: all
 * of them, or this rank's heads after a colwise q/k/v (local). */
static dt_status to_heads(const gpt_sizes *s, dt_tensor *x, dt_tensor **out) {
  const int64_t *shape = dt_tensor_is_distributed(x) ? dt_dist_global_shape(x) : dt_tensor_shape(x);
  int64_t hd = s->dmodel / s->heads;
  dt_tensor *v = NULL;
  dt_status st = dt_reshape(x, 4, (int64_t[]){shape[0], shape[1], shape[2] / hd, hd}, &v);
  if (!st) st = dt_transpose(v, 1, 2, out);
  dt_tensor_release(v);
  return st;
}

static dt_status child(dt_module *m, const char *name, dt_tensor *x, dt_tensor **out) {
  return dt_module_forward(dt_module_find(m, name), x, out);
}

#define BLOCK_TEMPS 20

/* Causal attention on h, as the 1-rank model computes it (matmul, scale, masked_fill with
 * -inf, softmax, matmul), then the out projection. */
static dt_status attention(dt_module *self, const dist_ctx *c, dt_tensor *h, dt_tensor **out) {
  dt_tensor *t[BLOCK_TEMPS] = {0};
  enum { Q, K, V, QH, KH, VH, KT, SC, SS, SM, PR, A, AT, AR };
  dt_status st = child(self, "q", h, &t[Q]);
  if (!st) st = child(self, "k", h, &t[K]);
  if (!st) st = child(self, "v", h, &t[V]);
  if (!st) st = to_heads(&c->s, t[Q], &t[QH]);
  if (!st) st = to_heads(&c->s, t[K], &t[KH]);
  if (!st) st = to_heads(&c->s, t[V], &t[VH]);
  if (!st) st = dt_transpose(t[KH], 2, 3, &t[KT]);
  if (!st) st = dt_matmul(t[QH], t[KT], &t[SC]);
  double scale = 1.0 / sqrt((double)(c->s.dmodel / c->s.heads));
  if (!st) st = dt_mul_scalar(t[SC], scale, &t[SS]);
  if (!st) st = dt_masked_fill(t[SS], c->mask, -INFINITY, &t[SM]);
  if (!st) st = dt_softmax(t[SM], -1, &t[PR]);
  if (!st) st = dt_matmul(t[PR], t[VH], &t[A]);
  if (!st) st = dt_transpose(t[A], 1, 2, &t[AT]);
  if (!st) {
    const int64_t *qs =
        dt_tensor_is_distributed(t[Q]) ? dt_dist_global_shape(t[Q]) : dt_tensor_shape(t[Q]);
    st = dt_reshape(t[AT], 3, (int64_t[]){qs[0], qs[1], qs[2]}, &t[AR]);
  }
  if (!st) st = child(self, "out", t[AR], out);
  for (int i = 0; i < BLOCK_TEMPS; i++) dt_tensor_release(t[i]);
  return st;
}

/* x + attn(ln_1(x)), then + fc2(gelu(fc1(ln_2(.)))). */
static dt_status block_forward(dt_module *self, dt_tensor *x, dt_tensor **out) {
  const dist_ctx *c = dt_module_user(self);
  dt_tensor *h = NULL, *o = NULL, *x1 = NULL, *h2 = NULL, *u = NULL, *g = NULL, *f = NULL;
  dt_status st = child(self, "ln_1", x, &h);
  if (!st) st = attention(self, c, h, &o);
  if (!st) st = dt_add(x, o, &x1);
  if (!st) st = child(self, "ln_2", x1, &h2);
  if (!st) st = child(self, "fc1", h2, &u);
  if (!st) st = dt_gelu(u, &g);
  if (!st) st = child(self, "fc2", g, &f);
  if (!st) st = dt_add(x1, f, out);
  dt_tensor *temps[] = {h, o, x1, h2, u, g, f};
  for (size_t i = 0; i < sizeof temps / sizeof *temps; i++) dt_tensor_release(temps[i]);
  return st;
}

/* Token ids [B, T] -> logits [B T, vocab]. */
static dt_status gpt_forward(dt_module *self, dt_tensor *idx, dt_tensor **out) {
  const dist_ctx *c = dt_module_user(self);
  dt_tensor *e = NULL, *x = NULL, *h = NULL, *logits = NULL;
  dt_status st = child(self, "tok", idx, &e);
  if (!st) st = dt_add(e, dt_module_parameter(self, "pos"), &x);
  dt_module *blocks = dt_module_find(self, "h");
  for (int l = 0; l < dt_module_child_count(blocks) && !st; l++) {
    dt_tensor *next = NULL;
    st = dt_module_forward(dt_module_child(blocks, l), x, &next);
    dt_tensor_release(x);
    x = next;
  }
  if (!st) st = child(self, "ln_f", x, &h);
  if (!st) st = child(self, "head", h, &logits);
  if (!st) st = dt_reshape(logits, 2, (int64_t[]){c->s.batch * c->s.seq, c->s.vocab}, out);
  dt_tensor_release(e);
  dt_tensor_release(x);
  dt_tensor_release(h);
  dt_tensor_release(logits);
  return st;
}

/* A copy of t outside autograd (the 1-rank model's tensors stay its own). */
static dt_status detached_copy(dt_tensor *t, dt_tensor **out) {
  dt_tensor *d = NULL;
  dt_status st = dt_detach(t, &d);
  if (!st) st = dt_clone(d, out);
  dt_tensor_release(d);
  return st;
}

/* Adds child `name` to parent, its parameters replaced by copies of the given tensors. */
static dt_status add_part(dt_module *parent, const char *name, dt_module *part, dt_tensor *weight,
                          dt_tensor *bias) {
  dt_status st = dt_module_add_child(parent, name, part);
  dt_tensor *const values[2] = {weight, bias};
  static const char *const names[2] = {"weight", "bias"};
  for (int i = 0; i < 2 && !st && values[i]; i++) {
    dt_tensor *copy = NULL;
    st = detached_copy(values[i], &copy);
    if (!st) st = dt_module_set_tensor(part, names[i], copy);
    dt_tensor_release(copy);
  }
  return st;
}

static dt_status add_linear(dt_module *parent, const char *name, dt_tensor *weight,
                            dt_tensor *bias) {
  const int64_t *shape = dt_tensor_shape(weight);
  dt_module *lin = NULL;
  dt_status st = dt_nn_linear(shape[1], shape[0], bias != NULL, 0, &lin);
  return st ? st : add_part(parent, name, lin, weight, bias);
}

static dt_status add_layer_norm(dt_module *parent, const char *name, dt_tensor *weight,
                                dt_tensor *bias) {
  dt_module *ln = NULL;
  dt_status st = dt_nn_layer_norm(dt_tensor_shape(weight)[0], 1e-5, &ln);
  return st ? st : add_part(parent, name, ln, weight, bias);
}

/* One block from the 1-rank model's parameters q (GPT_BLOCK_PARAMS of them). */
static dt_status make_block(dist_ctx *c, dt_tensor *const *q, dt_module **out) {
  int64_t d = c->s.dmodel;
  dt_tensor *w[3] = {NULL, NULL, NULL}, *b[3] = {NULL, NULL, NULL};
  int nw = 0, nb = 0;
  dt_status st = dt_module_create("Block", block_forward, c, out);
  if (!st) st = add_layer_norm(*out, "ln_1", q[GPT_LN1_W], q[GPT_LN1_B]);
  if (!st) st = dt_split(q[GPT_QKV_W], d, 0, w, 3, &nw);
  if (!st) st = dt_split(q[GPT_QKV_B], d, 0, b, 3, &nb);
  static const char *const qkv[3] = {"q", "k", "v"};
  for (int i = 0; i < 3 && !st; i++) st = add_linear(*out, qkv[i], w[i], b[i]);
  for (int i = 0; i < 3; i++) dt_tensor_release(w[i]), dt_tensor_release(b[i]);
  if (!st) st = add_linear(*out, "out", q[GPT_OUT_W], q[GPT_OUT_B]);
  if (!st) st = add_layer_norm(*out, "ln_2", q[GPT_LN2_W], q[GPT_LN2_B]);
  if (!st) st = add_linear(*out, "fc1", q[GPT_FC1_W], q[GPT_FC1_B]);
  if (!st) st = add_linear(*out, "fc2", q[GPT_FC2_W], q[GPT_FC2_B]);
  return st;
}

/* The module tree of the 1-rank model `src` (its weights copied). */
static dt_status make_tree(dist_ctx *c, const gpt_model *src, dt_module **out) {
  dt_tensor *const *p = NULL;
  gpt_model_params(src, &p);
  const gpt_sizes *s = &c->s;
  dt_module *root = NULL, *tok = NULL, *list = NULL;
  dt_module **blocks = calloc((size_t)s->layers, sizeof *blocks);
  dt_status st = blocks ? dt_module_create("GPT", gpt_forward, c, &root) : DT_ERR_NOMEM;
  if (!st) st = dt_nn_embedding(s->vocab, s->dmodel, 0, &tok);
  if (!st) st = add_part(root, "tok", tok, p[GPT_TOK], NULL);
  dt_tensor *pos = NULL;
  if (!st) st = detached_copy(p[GPT_POS], &pos);
  if (!st) st = dt_module_add_parameter(root, "pos", pos);
  dt_tensor_release(pos);
  int made = 0;
  for (int64_t l = 0; l < s->layers && !st; l++) {
    st = make_block(c, p + GPT_GLOBAL_PARAMS + l * GPT_BLOCK_PARAMS, &blocks[l]);
    made = (int)l + 1; /* a failed block is destroyed with the others */
  }
  if (!st) {
    st = dt_nn_module_list(made, blocks, &list);
    made = 0; /* the list owns them now */
  }
  for (int i = 0; i < made; i++) dt_module_destroy(blocks[i]);
  free(blocks);
  if (!st) st = dt_module_add_child(root, "h", list);
  if (!st) st = add_layer_norm(root, "ln_f", p[GPT_LNF_W], p[GPT_LNF_B]);
  if (!st) st = add_linear(root, "head", p[GPT_HEAD], NULL);
  if (st) {
    dt_module_destroy(root);
    return st;
  }
  *out = root;
  return DT_OK;
}

/* Megatron's plan over the tree (see the top of the file). */
static dt_status apply_tp(dt_module *root, dt_mesh *mesh, int64_t layers) {
  int n = (int)layers * 6 + 1;
  dt_tp_plan_entry *entries = calloc((size_t)n, sizeof *entries);
  dt_tp_style_options *opts = calloc((size_t)n, sizeof *opts);
  char(*names)[48] = calloc((size_t)n, sizeof *names);
  if (!entries || !opts || !names) {
    free(entries), free(opts), free(names);
    return DT_ERR_NOMEM;
  }
  static const char *const parts[6] = {"q", "k", "v", "out", "fc1", "fc2"};
  static const dt_tp_style styles[6] = {DT_TP_COLWISE, DT_TP_COLWISE, DT_TP_COLWISE,
                                        DT_TP_ROWWISE, DT_TP_COLWISE, DT_TP_ROWWISE};
  for (int64_t l = 0; l < layers; l++)
    for (int k = 0; k < 6; k++) {
      int i = (int)l * 6 + k;
      snprintf(names[i], sizeof names[i], "h.%lld.%s", (long long)l, parts[k]);
      entries[i] = (dt_tp_plan_entry){names[i], styles[k]};
    }
  entries[n - 1] = (dt_tp_plan_entry){"head", DT_TP_COLWISE};
  opts[n - 1].keep_distributed_output = true; /* Shard(-1) logits into the vocab-parallel loss */
  dt_tp_plan plan = {n, entries};
  dt_status st = dt_parallel_tp_module(root, mesh, &plan, opts);
  free(entries), free(opts), free(names);
  return st;
}

/* ---- One rank ----------------------------------------------------------------------------- */

typedef struct rank_result {
  double cpu_ms[MAX_STEPS], wall_ms[MAX_STEPS];
  double losses[MAX_STEPS + 1];
  int64_t bytes, calls; /* of one step's collectives */
  int n_params;
} rank_result;

typedef struct dist_arg {
  gpt_sizes s;
  int mode, steps;
  rank_result r[MAX_RANKS];
} dist_arg;

typedef struct dist_model {
  dt_module *root;
  /* AdamW over every parameter: the distributed ones and, under TP, the local ones its plan
   * does not name (one optimizer takes a mix). */
  dt_optimizer *opt;
  dt_tensor **params; /* in the tree's order */
  int n_params, capacity;
  dt_tensor *idx, *target; /* the root's input and the loss's targets, as the mode wants */
} dist_model;

static dt_status collect(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  dist_model *m = user;
  if (is_buffer) return DT_OK;
  if (m->n_params == m->capacity) {
    int cap = m->capacity ? 2 * m->capacity : 64;
    dt_tensor **grown = realloc(m->params, (size_t)cap * sizeof *grown);
    if (!grown) return DT_ERR_NOMEM;
    m->params = grown, m->capacity = cap;
  }
  m->params[m->n_params++] = t; /* borrowed: the tree holds it */
  return DT_OK;
}

static void dist_model_destroy(dist_model *m) {
  dt_optimizer_destroy(m->opt);
  free(m->params);
  dt_module_destroy(m->root);
  dt_tensor_release(m->idx);
  dt_tensor_release(m->target);
}

/* The full tensor t on the mesh with one placement. */
static dt_status place(dt_mesh *mesh, dt_tensor *t, dt_placement p, dt_tensor **out) {
  return dt_dist_distribute_tensor(mesh, t, 1, &p, out);
}

static dt_status dist_model_create(dist_ctx *c, dt_mesh *mesh, int mode, dist_model *m) {
  gpt_model *src = NULL;
  dt_status st = gpt_model_create(&c->s, 1234, &src); /* bench_gpt_train's seed */
  if (!st) st = make_tree(c, src, &m->root);
  if (!st && mode == MODE_TP) st = apply_tp(m->root, mesh, c->s.layers);
  if (!st && mode == MODE_FSDP) st = dt_parallel_fsdp(m->root, mesh, &(dt_fsdp_options){0});
  if (!st) st = dt_module_visit_tensors(m->root, collect, m);
  dt_adam_options ao = {.lr = 3e-4}; /* as the 1-rank model */
  if (!st) st = dt_optimizer_create_adamw(m->n_params, m->params, &ao, &m->opt);
  dt_tensor *idx = NULL, *target = NULL;
  if (src) gpt_model_data(src, &idx, &target);
  if (!st && mode == MODE_TP) { /* ids local (the same on every rank), targets Replicate */
    m->idx = dt_tensor_retain(idx);
    st = place(mesh, target, dt_replicate(), &m->target);
  }
  if (!st && mode == MODE_FSDP) { /* the batch split over the ranks */
    st = place(mesh, idx, dt_shard(0), &m->idx);
    if (!st) st = place(mesh, target, dt_shard(0), &m->target);
  }
  gpt_model_destroy(src);
  return st;
}

static dt_status dist_step(dist_model *m, double *loss_value) {
  dt_tensor *logits = NULL, *loss = NULL, *full = NULL;
  dt_status st = dt_optimizer_zero_grad(m->opt, true);
  if (!st) st = dt_module_forward(m->root, m->idx, &logits);
  if (!st) st = dt_cross_entropy(logits, m->target, &loss);
  if (!st) st = dt_dist_full_tensor(loss, &full);
  if (!st) st = dt_tensor_to_doubles(full, loss_value, 1);
  if (!st) st = dt_backward(loss, NULL);
  if (!st) st = dt_optimizer_step(m->opt);
  dt_tensor_release(logits);
  dt_tensor_release(loss);
  dt_tensor_release(full);
  return st;
}

static dt_status causal_mask(dt_mesh *mesh, int mode, int64_t seq, dt_tensor **out) {
  bool *causal = malloc((size_t)(seq * seq));
  if (!causal) return DT_ERR_NOMEM;
  for (int64_t i = 0; i < seq; i++)
    for (int64_t j = 0; j < seq; j++) causal[i * seq + j] = j > i;
  dt_tensor *local = NULL;
  dt_status st = dt_from_data(causal, 2, (int64_t[]){seq, seq}, DT_BOOL, &local);
  free(causal);
  if (!st && mode == MODE_FSDP) {
    st = place(mesh, local, dt_replicate(), out);
    dt_tensor_release(local);
  } else if (!st) {
    *out = local;
  }
  return st;
}

static dt_status rank_main(dt_comm *world, void *arg) {
  dist_arg *a = arg;
  int rank = dt_comm_rank(world);
  rank_result *r = &a->r[rank];
  dt_mesh *mesh = NULL;
  dist_ctx c = {.s = a->s};
  dist_model m = {0};
  const char *dim = a->mode == MODE_TP ? "tp" : "dp";
  dt_status st = dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, &dim, &mesh);
  if (!st) st = causal_mask(mesh, a->mode, a->s.seq, &c.mask);
  if (!st) st = dist_model_create(&c, mesh, a->mode, &m);
  r->n_params = m.n_params;
  /* Warm-up step (first-step paths, optimizer state), its collectives counted. */
  dt_comm_ledger *ledger = NULL;
  if (!st) st = dt_comm_ledger_start(&ledger);
  if (!st) st = dist_step(&m, &r->losses[0]);
  if (ledger) {
    dt_status s2 = dt_comm_ledger_stop(ledger);
    if (!st) st = s2;
    r->bytes = dt_comm_ledger_bytes(ledger, NULL);
    r->calls = dt_comm_ledger_count(ledger, NULL);
    dt_comm_ledger_destroy(ledger);
  }
  for (int k = 0; k < a->steps && !st; k++) {
    st = dt_comm_barrier(world);
    double w0 = bench_now_us(), c0 = bench_thread_cpu_us();
    if (!st) st = dist_step(&m, &r->losses[k + 1]);
    r->cpu_ms[k] = (bench_thread_cpu_us() - c0) / 1e3;
    r->wall_ms[k] = (bench_now_us() - w0) / 1e3;
  }
  dist_model_destroy(&m);
  dt_tensor_release(c.mask);
  dt_mesh_destroy(mesh);
  return st;
}

/* ---- The command ---------------------------------------------------------------------------- */

static void print_rank(const dist_arg *a, const char *mode, int ranks, int rank, bool json) {
  const gpt_sizes *s = &a->s;
  const rank_result *r = &a->r[rank];
  double cpu[MAX_STEPS], wall[MAX_STEPS];
  memcpy(cpu, r->cpu_ms, sizeof cpu);
  memcpy(wall, r->wall_ms, sizeof wall);
  bench_stats c = bench_stats_of(cpu, a->steps), w = bench_stats_of(wall, a->steps);
  double tokens = (double)(s->batch * s->seq);
  if (json) {
    printf("{\"name\":\"gpt_step\",\"pass\":\"step\",\"parallel\":\"%s\",\"ranks\":%d,"
           "\"rank\":%d,\"vocab\":%lld,\"dmodel\":%lld,\"heads\":%lld,\"layers\":%lld,"
           "\"seq\":%lld,\"batch\":%lld,\"params\":%lld,\"gflop_per_step\":%.2f,"
           "\"ms_per_step\":%.1f,\"ms_min\":%.1f,\"ms_max\":%.1f,\"wall_ms\":%.1f,"
           "\"wall_min\":%.1f,\"wall_max\":%.1f,\"tokens_per_s\":%.0f,\"comm_bytes\":%lld,"
           "\"comm_calls\":%lld,\"param_tensors\":%d,\"first_loss\":%.5f,\"loss\":%.5f,"
           "\"steps\":%d,\"blas\":\"%s\",\"clock\":\"thread_cpu\",\"threads\":1,\"losses\":",
           mode, ranks, rank, (long long)s->vocab, (long long)s->dmodel, (long long)s->heads,
           (long long)s->layers, (long long)s->seq, (long long)s->batch,
           (long long)gpt_param_count(s), gpt_step_flops(s) / 1e9, c.median, c.min, c.max, w.median,
           w.min, w.max, tokens / (c.median * 1e-3), (long long)r->bytes, (long long)r->calls,
           r->n_params, r->losses[0], r->losses[a->steps], a->steps, dt__blas_name());
    gpt_print_losses(r->losses, a->steps + 1);
  } else {
    printf("gpt step %s %d ranks, rank %d (vocab %lld, d_model %lld, %lld heads, %lld layers, "
           "seq %lld, batch %lld): %.1f ms/step of the rank thread's CPU (%.1f..%.1f), wall "
           "%.1f ms (%.1f..%.1f), %.0f tokens/s of CPU time; collectives %lld calls, %.1f MB "
           "per step; loss %.5f -> %.5f\n",
           mode, ranks, rank, (long long)s->vocab, (long long)s->dmodel, (long long)s->heads,
           (long long)s->layers, (long long)s->seq, (long long)s->batch, c.median, c.min, c.max,
           w.median, w.min, w.max, tokens / (c.median * 1e-3), (long long)r->calls,
           (double)r->bytes / 1e6, r->losses[0], r->losses[a->steps]);
  }
}

int bench_gpt_train_dist(const gpt_sizes *s, const char *mode, int ranks, int steps, bool json) {
  int m = strcmp(mode, "tp") == 0 ? MODE_TP : MODE_FSDP;
  if (steps > MAX_STEPS || ranks > MAX_RANKS) return 2;
  if (m == MODE_TP && s->heads % ranks) {
    fprintf(stderr, "bench train: --tp %d needs the heads (%lld) to divide over the ranks\n", ranks,
            (long long)s->heads);
    return 2;
  }
  if (m == MODE_FSDP && s->batch % ranks) {
    fprintf(stderr, "bench train: --fsdp %d needs the batch (%lld) to divide over the ranks\n",
            ranks, (long long)s->batch);
    return 2;
  }
  dt_set_num_threads(1); /* one kernel and BLAS thread per rank */
  bench_machine_print(json);
  dist_arg *a = calloc(1, sizeof *a);
  if (!a) return 1;
  *a = (dist_arg){.s = *s, .mode = m, .steps = steps};
  dt_status st = dt_comm_spawn(ranks, rank_main, a);
  if (st) {
    fprintf(stderr, "bench train --%s %d: %s\n", mode, ranks, dt_last_error());
    free(a);
    return 1;
  }
  for (int r = 0; r < ranks; r++) print_rank(a, mode, ranks, r, json);
  free(a);
  return 0;
}
