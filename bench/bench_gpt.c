/* The GPT-2-like decoder of bench_gpt.h: the model, its training step, and
 * `dtensor bench train --size ...`, which times that step. */
#include "bench_gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "kernels/cpu/blas.h"
#include "tools.h"

#include <cblas.h>

/* ---- Sizes ------------------------------------------------------------------------------ */

bool gpt_sizes_named(const char *name, gpt_sizes *out) {
  if (strcmp(name, "gpt2-like") == 0) {
    *out =
        (gpt_sizes){.vocab = 8192, .dmodel = 512, .heads = 8, .layers = 4, .seq = 256, .batch = 8};
    return true;
  }
  if (strcmp(name, "small") == 0) {
    *out =
        (gpt_sizes){.vocab = 1024, .dmodel = 128, .heads = 4, .layers = 2, .seq = 64, .batch = 4};
    return true;
  }
  return false;
}

void gpt_sizes_start(int argc, char **argv, gpt_sizes *s) {
  gpt_sizes_named("gpt2-like", s);
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--size") == 0) gpt_sizes_named(argv[i + 1], s);
}

int gpt_sizes_option(int argc, char **argv, int *i, gpt_sizes *s) {
  static const char *const names[] = {"--vocab",  "--dmodel", "--heads",
                                      "--layers", "--seq",    "--batch"};
  int64_t *fields[] = {&s->vocab, &s->dmodel, &s->heads, &s->layers, &s->seq, &s->batch};
  const char *arg = argv[*i];
  bool is_size = strcmp(arg, "--size") == 0;
  int which = -1;
  for (int k = 0; k < 6; k++)
    if (strcmp(arg, names[k]) == 0) which = k;
  if (!is_size && which < 0) return 0;
  if (*i + 1 >= argc) return -1;
  const char *value = argv[++*i];
  if (is_size) { /* applied before the other options, wherever it stands */
    gpt_sizes ignored;
    return gpt_sizes_named(value, &ignored) ? 1 : -1;
  }
  char *end = NULL;
  long long v = strtoll(value, &end, 10);
  if (!*value || *end || v < 1 || v > (1LL << 30)) return -1;
  *fields[which] = v;
  return 1;
}

bool gpt_sizes_valid(const gpt_sizes *s) {
  if (!(s->vocab >= 1 && s->dmodel >= 1 && s->heads >= 1 && s->layers >= 1 && s->seq >= 1 &&
        s->batch >= 1 && s->dmodel % s->heads == 0))
    return false;
  /* Counted in double first: each size may be 2^30, and the int64 counts below (the
   * parameters, the logits, the attention scores) must not overflow. */
  double d = (double)s->dmodel, rows = (double)s->batch * (double)s->seq;
  double params = 2 * (double)s->vocab * d + (double)s->seq * d + (double)s->layers * 13 * d * d;
  double logits = rows * (double)s->vocab, scores = rows * (double)s->seq * (double)s->heads;
  const double most = (double)GPT_MAX_ELEMENTS;
  return params <= most && logits <= most && scores <= most && rows * 4 * d <= most;
}

int64_t gpt_param_count(const gpt_sizes *s) {
  int64_t d = s->dmodel;
  int64_t block =
      2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d);
  return 2 * s->vocab * d + s->seq * d + s->layers * block + 2 * d;
}

double gpt_step_flops(const gpt_sizes *s) {
  double n = (double)(s->batch * s->seq), d = (double)s->dmodel, t = (double)s->seq;
  /* Per block: the four linears (qkv 3 d^2, out d^2, MLP 8 d^2) and the two attention
   * products (q k^T and p v, each 2 b t^2 d over the heads); then the LM head. */
  double block = 2 * n * 12 * d * d + 2 * 2 * (double)s->batch * t * t * d;
  double forward = (double)s->layers * block + 2 * n * d * (double)s->vocab;
  return 3 * forward;
}

/* ---- The model ---------------------------------------------------------------------------- */

#define TAPE_MAX 512

struct gpt_model {
  gpt_sizes s;
  int n_params;
  dt_tensor **params; /* GPT_GLOBAL_PARAMS, then GPT_BLOCK_PARAMS per layer */
  dt_tensor *mask;    /* [T, T] bool, true above the diagonal */
  dt_tensor *idx;     /* [B, T] int64 */
  dt_tensor *target;  /* [B T] int64 */
  dt_optimizer *opt;
  dt_tensor *tape[TAPE_MAX]; /* the step's intermediate tensors, released after it */
  int taped;
  bool sdpa; /* attention through dt_scaled_dot_product_attention (causal) */
};

static dt_tensor *keep(gpt_model *m, dt_tensor *t) {
  if (t && m->taped < TAPE_MAX) {
    m->tape[m->taped++] = t;
  } else {
    dt_tensor_release(t); /* never reached at these sizes: 36 tensors per block */
  }
  return t;
}

static void tape_clear(gpt_model *m) {
  while (m->taped > 0) dt_tensor_release(m->tape[--m->taped]);
}

/* N(0, std) (std 0: zeros, std < 0: ones), a leaf requiring grad. */
static dt_status make_param(int ndim, const int64_t *shape, double std, uint64_t seed,
                            dt_tensor **out) {
  dt_status st;
  if (std > 0) {
    st = dt_randn(ndim, shape, DT_F32, seed, out);
    if (!st) st = dt_mul_scalar_(*out, std);
  } else {
    st = std < 0 ? dt_ones(ndim, shape, DT_F32, out) : dt_zeros(ndim, shape, DT_F32, out);
  }
  if (!st) st = dt_tensor_set_requires_grad(*out, true);
  return st;
}

static dt_status make_params(gpt_model *m, uint64_t seed) {
  const gpt_sizes *s = &m->s;
  int64_t d = s->dmodel;
  const double one = -1.0, zero = 0.0; /* make_param: ones, zeros */
  double std = 0.02, res_std = 0.02 / sqrt(2.0 * (double)s->layers);
  dt_tensor **p = m->params;
  dt_status st = make_param(2, (int64_t[]){s->vocab, d}, std, seed + 1, &p[GPT_TOK]);
  if (!st) st = make_param(2, (int64_t[]){s->seq, d}, std, seed + 2, &p[GPT_POS]);
  if (!st) st = make_param(1, &d, one, 0, &p[GPT_LNF_W]);
  if (!st) st = make_param(1, &d, zero, 0, &p[GPT_LNF_B]);
  if (!st) st = make_param(2, (int64_t[]){s->vocab, d}, std, seed + 3, &p[GPT_HEAD]);
  for (int64_t l = 0; l < s->layers && !st; l++) {
    dt_tensor **q = p + GPT_GLOBAL_PARAMS + l * GPT_BLOCK_PARAMS;
    uint64_t ls = seed + 16 * (uint64_t)(l + 1);
    st = make_param(1, &d, one, 0, &q[GPT_LN1_W]);
    if (!st) st = make_param(1, &d, zero, 0, &q[GPT_LN1_B]);
    if (!st) st = make_param(2, (int64_t[]){3 * d, d}, std, ls + 1, &q[GPT_QKV_W]);
    if (!st) st = make_param(1, (int64_t[]){3 * d}, zero, 0, &q[GPT_QKV_B]);
    if (!st) st = make_param(2, (int64_t[]){d, d}, res_std, ls + 2, &q[GPT_OUT_W]);
    if (!st) st = make_param(1, &d, zero, 0, &q[GPT_OUT_B]);
    if (!st) st = make_param(1, &d, one, 0, &q[GPT_LN2_W]);
    if (!st) st = make_param(1, &d, zero, 0, &q[GPT_LN2_B]);
    if (!st) st = make_param(2, (int64_t[]){4 * d, d}, std, ls + 3, &q[GPT_FC1_W]);
    if (!st) st = make_param(1, (int64_t[]){4 * d}, zero, 0, &q[GPT_FC1_B]);
    if (!st) st = make_param(2, (int64_t[]){d, 4 * d}, res_std, ls + 4, &q[GPT_FC2_W]);
    if (!st) st = make_param(1, &d, zero, 0, &q[GPT_FC2_B]);
  }
  return st;
}

/* [B, T, D] (a view of qkv's third) as [B, H, T, hd]: no copy, the matmuls read the strides. */
static dt_status to_heads(gpt_model *m, dt_tensor *x, dt_tensor **out) {
  const gpt_sizes *s = &m->s;
  dt_tensor *v = NULL;
  int64_t shape[4] = {s->batch, s->seq, s->heads, s->dmodel / s->heads};
  dt_status st = dt_reshape(x, 4, shape, &v);
  keep(m, v);
  if (!st) st = dt_transpose(v, 1, 2, out), keep(m, *out);
  return st;
}

static dt_status attention(gpt_model *m, dt_tensor *const *q, dt_tensor *h, dt_tensor **out) {
  const gpt_sizes *s = &m->s;
  dt_tensor *qkv = NULL, *parts[3] = {NULL, NULL, NULL}, *qh = NULL, *kh = NULL, *vh = NULL;
  dt_tensor *kt = NULL, *sc = NULL, *ss = NULL, *sm = NULL, *pr = NULL, *a = NULL, *at = NULL;
  dt_tensor *ar = NULL;
  int n_parts = 0;
  dt_status st = dt_linear(h, q[GPT_QKV_W], q[GPT_QKV_B], &qkv);
  keep(m, qkv);
  if (!st) st = dt_split(qkv, s->dmodel, 2, parts, 3, &n_parts);
  for (int k = 0; k < n_parts; k++) keep(m, parts[k]);
  if (!st) st = to_heads(m, parts[0], &qh);
  if (!st) st = to_heads(m, parts[1], &kh);
  if (!st) st = to_heads(m, parts[2], &vh);
  double scale = 1.0 / sqrt((double)(s->dmodel / s->heads));
  if (m->sdpa) {
    dt_attention_options ao = {.is_causal = true, .scale = scale};
    if (!st) st = dt_scaled_dot_product_attention(qh, kh, vh, NULL, &ao, &a, NULL), keep(m, a);
  } else {
    if (!st) st = dt_transpose(kh, 2, 3, &kt), keep(m, kt);
    if (!st) st = dt_matmul(qh, kt, &sc), keep(m, sc);
    if (!st) st = dt_mul_scalar(sc, scale, &ss), keep(m, ss);
    if (!st) st = dt_masked_fill(ss, m->mask, -INFINITY, &sm), keep(m, sm);
    if (!st) st = dt_softmax(sm, -1, &pr), keep(m, pr);
    if (!st) st = dt_matmul(pr, vh, &a), keep(m, a);
  }
  if (!st) st = dt_transpose(a, 1, 2, &at), keep(m, at);
  if (!st) st = dt_reshape(at, 3, (int64_t[]){s->batch, s->seq, s->dmodel}, &ar), keep(m, ar);
  if (!st) st = dt_linear(ar, q[GPT_OUT_W], q[GPT_OUT_B], out), keep(m, *out);
  return st;
}

/* x + attn(ln1(x)), then + mlp(ln2(.)). */
static dt_status block(gpt_model *m, dt_tensor *const *q, dt_tensor *x, dt_tensor **out) {
  const int64_t norm[1] = {m->s.dmodel};
  dt_tensor *h = NULL, *o = NULL, *x1 = NULL, *h2 = NULL, *u = NULL, *g = NULL, *f = NULL;
  dt_status st = dt_layer_norm(x, 1, norm, q[GPT_LN1_W], q[GPT_LN1_B], 1e-5, &h);
  keep(m, h);
  if (!st) st = attention(m, q, h, &o);
  if (!st) st = dt_add(x, o, &x1), keep(m, x1);
  if (!st) st = dt_layer_norm(x1, 1, norm, q[GPT_LN2_W], q[GPT_LN2_B], 1e-5, &h2), keep(m, h2);
  if (!st) st = dt_linear(h2, q[GPT_FC1_W], q[GPT_FC1_B], &u), keep(m, u);
  if (!st) st = dt_gelu(u, &g), keep(m, g);
  if (!st) st = dt_linear(g, q[GPT_FC2_W], q[GPT_FC2_B], &f), keep(m, f);
  if (!st) st = dt_add(x1, f, out), keep(m, *out);
  return st;
}

static dt_status forward(gpt_model *m, dt_tensor **loss) {
  const gpt_sizes *s = &m->s;
  const int64_t norm[1] = {s->dmodel};
  dt_tensor *const *p = m->params;
  dt_tensor *e = NULL, *x = NULL, *h = NULL, *logits = NULL, *flat = NULL;
  dt_status st = dt_embedding(p[GPT_TOK], m->idx, &e);
  keep(m, e);
  if (!st) st = dt_add(e, p[GPT_POS], &x), keep(m, x);
  for (int64_t l = 0; l < s->layers && !st; l++) {
    dt_tensor *next = NULL;
    st = block(m, p + GPT_GLOBAL_PARAMS + l * GPT_BLOCK_PARAMS, x, &next);
    x = next;
  }
  if (!st) st = dt_layer_norm(x, 1, norm, p[GPT_LNF_W], p[GPT_LNF_B], 1e-5, &h), keep(m, h);
  if (!st) st = dt_linear(h, p[GPT_HEAD], NULL, &logits), keep(m, logits);
  if (!st) st = dt_reshape(logits, 2, (int64_t[]){s->batch * s->seq, s->vocab}, &flat);
  keep(m, flat);
  if (!st) st = dt_cross_entropy(flat, m->target, loss), keep(m, *loss);
  return st;
}

void gpt_model_destroy(gpt_model *m) {
  if (!m) return;
  tape_clear(m);
  dt_optimizer_destroy(m->opt);
  for (int i = 0; i < m->n_params; i++) dt_tensor_release(m->params[i]);
  free(m->params);
  dt_tensor_release(m->mask);
  dt_tensor_release(m->idx);
  dt_tensor_release(m->target);
  free(m);
}

dt_status gpt_model_create(const gpt_sizes *s, uint64_t seed, gpt_model **out) {
  *out = NULL;
  gpt_model *m = calloc(1, sizeof *m);
  if (!m) return DT_ERR_NOMEM;
  m->s = *s;
  m->n_params = GPT_GLOBAL_PARAMS + (int)s->layers * GPT_BLOCK_PARAMS;
  m->params = calloc((size_t)m->n_params, sizeof *m->params);
  dt_status st = m->params ? make_params(m, seed) : DT_ERR_NOMEM;
  bool *causal = st ? NULL : malloc((size_t)(s->seq * s->seq));
  if (!st && !causal) st = DT_ERR_NOMEM;
  for (int64_t i = 0; i < s->seq && causal; i++)
    for (int64_t j = 0; j < s->seq; j++) causal[i * s->seq + j] = j > i;
  if (!st) st = dt_from_data(causal, 2, (int64_t[]){s->seq, s->seq}, DT_BOOL, &m->mask);
  free(causal);
  int64_t bt[2] = {s->batch, s->seq}, n = s->batch * s->seq;
  if (!st) st = dt_randint(0, s->vocab, 2, bt, DT_I64, seed + 5, &m->idx);
  if (!st) st = dt_randint(0, s->vocab, 1, &n, DT_I64, seed + 6, &m->target);
  dt_adam_options ao = {.lr = 3e-4};
  if (!st) st = dt_optimizer_create_adamw(m->n_params, m->params, &ao, &m->opt);
  if (st) {
    gpt_model_destroy(m);
    return st;
  }
  *out = m;
  return DT_OK;
}

dt_status gpt_model_step(gpt_model *m, double *loss_value) {
  dt_tensor *loss = NULL;
  dt_status st = dt_optimizer_zero_grad(m->opt, true);
  if (!st) st = forward(m, &loss);
  double value = NAN;
  if (!st) st = dt_tensor_to_doubles(loss, &value, 1);
  if (!st) st = dt_backward(loss, NULL);
  if (!st) st = dt_optimizer_step(m->opt);
  tape_clear(m);
  if (loss_value) *loss_value = value;
  return st;
}

dt_status gpt_model_forward(gpt_model *m, double *loss_value) {
  bool prev = dt_grad_mode_set(false);
  dt_tensor *loss = NULL;
  dt_status st = forward(m, &loss);
  double value = NAN;
  if (!st) st = dt_tensor_to_doubles(loss, &value, 1);
  dt_grad_mode_set(prev);
  tape_clear(m);
  if (loss_value) *loss_value = value;
  return st;
}

void gpt_model_set_sdpa(gpt_model *m, bool on) { m->sdpa = on; }

int gpt_model_params(const gpt_model *m, dt_tensor *const **params) {
  *params = m->params;
  return m->n_params;
}

void gpt_model_data(const gpt_model *m, dt_tensor **idx, dt_tensor **target) {
  *idx = m->idx;
  *target = m->target;
}

/* ---- The machine's sgemm rate at the step's shapes ---------------------------------------- */

/* GFLOP/s of cblas_sgemm alone over the forward linears of the step (x W^T, as dt_linear
 * calls it: [B T, in] x [out, in]^T), each shape weighted by its FLOPs in the step: the rate
 * the step's GEMMs could reach. Best of 3 per shape. */
static double sgemm_rate(const gpt_sizes *s) {
  int64_t n = s->batch * s->seq, d = s->dmodel;
  const int64_t shapes[5][3] = {
      {n, 3 * d, d}, {n, d, d}, {n, 4 * d, d}, {n, d, 4 * d}, {n, s->vocab, d}};
  const double count[5] = {(double)s->layers, (double)s->layers, (double)s->layers,
                           (double)s->layers, 1};
  double flops = 0, seconds = 0;
  for (int k = 0; k < 5; k++) {
    int64_t M = shapes[k][0], N = shapes[k][1], K = shapes[k][2];
    float *a = calloc((size_t)(M * K), sizeof(float)), *b = calloc((size_t)(N * K), sizeof(float));
    float *c = calloc((size_t)(M * N), sizeof(float));
    if (!a || !b || !c) {
      free(a), free(b), free(c);
      return 0;
    }
    for (int64_t i = 0; i < M * K; i++) a[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < N * K; i++) b[i] = (float)(i % 5) * 0.1f;
    double best = INFINITY;
    dt__blas_use_own_threads();   /* the BLAS alone, on the step's thread count */
    for (int r = 0; r < 4; r++) { /* the first warms the BLAS's buffers */
      double t0 = bench_clock();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, a, (int)K,
                  b, (int)K, 0.0f, c, (int)N);
      double t1 = bench_clock();
      if (r > 0 && t1 - t0 < best) best = t1 - t0;
    }
    free(a), free(b), free(c);
    flops += count[k] * 2.0 * (double)M * (double)N * (double)K;
    seconds += count[k] * best * 1e-6;
  }
  return flops / seconds / 1e9;
}

/* ---- dtensor bench train --size ... ------------------------------------------------------ */

void gpt_print_losses(const double *losses, int n) {
  printf("[");
  for (int i = 0; i < n; i++) printf("%s%.9g", i ? "," : "", losses[i]);
  printf("]}\n");
}

int bench_gpt_train(int argc, char **argv) {
  bool json = false, forward_only = false, sdpa = false;
  int steps = 3, threads = 0, ranks = 0;
  const char *parallel = NULL; /* "tp" or "fsdp" on `ranks` rank threads */
  gpt_sizes s;
  gpt_sizes_start(argc, argv, &s);
  long long v = 0;
  for (int i = 1; i < argc; i++) {
    int took = gpt_sizes_option(argc, argv, &i, &s);
    if (!took) took = bench_clock_option(argc, argv, &i);
    if (took < 0) goto usage;
    if (took) continue;
    if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--forward") == 0) {
      forward_only = true;
    } else if (strcmp(argv[i], "--attention") == 0 && i + 1 < argc) {
      const char *a = argv[++i];
      if (strcmp(a, "sdpa") != 0 && strcmp(a, "explicit") != 0) goto usage;
      sdpa = strcmp(a, "sdpa") == 0;
    } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      if (!bench_int_option(argv[i], argv[i + 1], 1, 64, &v)) goto usage;
      steps = (int)v, i++;
    } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      if (!bench_int_option(argv[i], argv[i + 1], 1, 4096, &v)) goto usage;
      threads = (int)v, i++;
    } else if ((strcmp(argv[i], "--tp") == 0 || strcmp(argv[i], "--fsdp") == 0) && i + 1 < argc &&
               !parallel) {
      parallel = argv[i] + 2;
      if (!bench_int_option(argv[i], argv[i + 1], 1, 8, &v)) goto usage;
      ranks = (int)v, i++;
    } else {
      goto usage;
    }
  }
  if (!gpt_sizes_valid(&s) || steps < 1 || steps > 64) goto usage;
  if (parallel) {
    if (sdpa) {
      fprintf(stderr, "bench train: --%s runs the explicit attention only (no --attention sdpa)\n",
              parallel);
      return 2;
    }
    if (forward_only || threads > 1) {
      fprintf(stderr,
              "bench train: --%s runs the training step with 1 thread per rank (no "
              "--forward, no --threads above 1)\n",
              parallel);
      return 2;
    }
    return bench_gpt_train_dist(&s, parallel, ranks, steps, json);
  }
  /* The BLAS's threads and the library's own kernels', as torch.set_num_threads. */
  if (threads) dt_set_num_threads(threads);
  dt__blas_sync_threads(); /* before sgemm_rate calls the BLAS directly */
  bench_machine_print(json);
  double rate = sgemm_rate(&s);
  gpt_model *m = NULL;
  dt_status st = gpt_model_create(&s, 1234, &m);
  if (!st) gpt_model_set_sdpa(m, sdpa);
  double loss0 = NAN, loss = NAN, ms[64], losses[65];
  dt_status (*run)(gpt_model *, double *) = forward_only ? gpt_model_forward : gpt_model_step;
  if (!st) st = run(m, &loss0); /* warm: first-step paths, optimizer state */
  losses[0] = loss0;
  struct rusage u0, u1;
  getrusage(RUSAGE_SELF, &u0);
  for (int k = 0; k < steps && !st; k++) {
    double t0 = bench_clock();
    st = run(m, &loss);
    ms[k] = (bench_clock() - t0) / 1e3;
    losses[k + 1] = loss;
  }
  getrusage(RUSAGE_SELF, &u1);
  /* Fresh pages touched per timed step (first-touch faults: what the allocator's caches avoid). */
  double faults = (double)(u1.ru_minflt - u0.ru_minflt) / steps;
  gpt_model_destroy(m);
  if (st) {
    fprintf(stderr, "bench train: %s\n", dt_last_error());
    return 1;
  }
  bench_stats t = bench_stats_of(ms, steps);
  double tokens = (double)(s.batch * s.seq), flops = gpt_step_flops(&s) / (forward_only ? 3 : 1);
  double gflops = flops / (t.median * 1e-3) / 1e9;
  if (json) {
    printf("{\"name\":\"gpt_step\",\"pass\":\"%s\",\"vocab\":%lld,\"dmodel\":%lld,\"heads\":%lld,"
           "\"layers\":%lld,"
           "\"seq\":%lld,\"batch\":%lld,\"params\":%lld,\"gflop_per_step\":%.2f,\"ms_per_step\":"
           "%.1f,\"ms_min\":%.1f,\"ms_max\":%.1f,\"tokens_per_s\":%.0f,\"gflops\":%.2f,"
           "\"sgemm_gflops\":%.2f,\"fraction_of_sgemm\":%.3f,\"first_loss\":%.5f,\"loss\":%.5f,"
           "\"steps\":%d,\"faults_per_step\":%.0f,\"blas\":\"%s\",\"clock\":\"%s\","
           "\"threads\":%d,\"ranks\":1,\"attention\":\"%s\",\"losses\":",
           forward_only ? "forward" : "step", (long long)s.vocab, (long long)s.dmodel,
           (long long)s.heads, (long long)s.layers, (long long)s.seq, (long long)s.batch,
           (long long)gpt_param_count(&s), flops / 1e9, t.median, t.min, t.max,
           tokens / (t.median * 1e-3), gflops, rate, gflops / rate, loss0, loss, steps, faults,
           dt__blas_name(), bench_clock_name(), threads, sdpa ? "sdpa" : "explicit");
    gpt_print_losses(losses, steps + 1);
  } else {
    printf("gpt %s (vocab %lld, d_model %lld, %lld heads, %lld layers, seq %lld, batch %lld, %s "
           "attention; %.1fM params, %.1f GFLOP): %.1f ms/step (%.1f..%.1f), %.0f tokens/s, %.1f "
           "GFLOP/s = "
           "%.0f %% of sgemm's %.1f GFLOP/s at the step's shapes; loss %.4f -> %.4f; %.0f page "
           "faults per step (%s time)\n",
           forward_only ? "forward" : "step", (long long)s.vocab, (long long)s.dmodel,
           (long long)s.heads, (long long)s.layers, (long long)s.seq, (long long)s.batch,
           sdpa ? "sdpa" : "explicit", (double)gpt_param_count(&s) / 1e6, flops / 1e9, t.median,
           t.min, t.max, tokens / (t.median * 1e-3), gflops, 100 * gflops / rate, rate, loss0, loss,
           faults, bench_clock_name());
  }
  return 0;
usage:
  fprintf(stderr, "bench train: bad or incomplete option (see 'dtensor bench train --help')\n");
  return 2;
}
