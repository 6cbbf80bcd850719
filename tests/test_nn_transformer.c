/*
 * The transformer modules (dtensor/transformer.h) against naive loops in double: a Llama-style
 * block (RMSNorm, grouped-query attention with rotary embeddings, SwiGLU) and a GPT-2-style one
 * (LayerNorm with bias, biased projections, tanh GELU, no rotary); a KV cache fed in chunks
 * gives the whole sequence's outputs, a discarded forward changes nothing; tensor parallelism
 * over 2 ranks (Megatron plan through dt_parallel_tp_module) gives the 1-rank outputs; and bad
 * arguments are refused naming them.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"

enum { B = 2, T = 6, D = 24, H = 6, HK = 2, HD = 4, F = 40 };

static double *values(const dt_module *m, const char *fqn, int64_t n) {
  dt_tensor *t = dt_module_get_tensor(m, fqn);
  cr_assert_not_null(t, "no tensor %s", fqn);
  cr_assert_eq(dt_tensor_numel(t), n, "%s has %lld elements", fqn, (long long)dt_tensor_numel(t));
  double *v = malloc(sizeof(double) * (size_t)n);
  cr_assert_eq(dt_tensor_to_doubles(t, v, n), DT_OK, "%s", dt_last_error());
  return v;
}

/* y[r][o] = sum_i x[r][i] w[o][i] + b[o] over rows r < n. */
static void linear(const double *x, int n, int in, const double *w, const double *b, int out,
                   double *y) {
  for (int r = 0; r < n; r++)
    for (int o = 0; o < out; o++) {
      double s = b ? b[o] : 0;
      for (int i = 0; i < in; i++) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
}

static void norm(bool rms, const double *x, int n, const double *w, const double *b, double eps,
                 double *y) {
  for (int r = 0; r < n; r++) {
    double mean = 0, sq = 0;
    for (int i = 0; i < D; i++) mean += x[r * D + i] / D;
    for (int i = 0; i < D; i++) {
      double c = rms ? x[r * D + i] : x[r * D + i] - mean;
      sq += c * c / D;
    }
    for (int i = 0; i < D; i++) {
      double c = rms ? x[r * D + i] : x[r * D + i] - mean;
      y[r * D + i] = c / sqrt(sq + eps) * w[i] + (b ? b[i] : 0);
    }
  }
}

/* Attention `attn` of blk on h [B, T, D], positions from p0: rotary (theta 10000) or none,
 * biases or none, a sliding window (0: none), per-head q/k RMSNorm (qk_eps > 0); the output
 * projection into o [B, T, D]. */
static void attn_ref(const dt_module *blk, const char *attn, bool rotary, bool biases,
                     int64_t window, double qk_eps, const double *h, int p0, double *o) {
  char name[96];
  const int rows = B * T;
  double q[B * T * H * HD], k[B * T * HK * HD], v[B * T * HK * HD], att[B * T * H * HD];
  const char *proj[3] = {"q_proj", "k_proj", "v_proj"};
  double *outs[3] = {q, k, v};
  int feats[3] = {H * HD, HK * HD, HK * HD};
  for (int p = 0; p < 3; p++) {
    snprintf(name, sizeof name, "%s.%s.weight", attn, proj[p]);
    double *w = values(blk, name, (int64_t)feats[p] * D), *bias = NULL;
    snprintf(name, sizeof name, "%s.%s.bias", attn, proj[p]);
    if (biases) bias = values(blk, name, feats[p]);
    linear(h, rows, D, w, bias, feats[p], outs[p]);
    free(w), free(bias);
  }
  for (int p = 0; p < 2 && qk_eps > 0; p++) { /* RMSNorm over each head of q and k */
    double *t = p ? k : q;
    snprintf(name, sizeof name, "%s.%s.weight", attn, p ? "k_norm" : "q_norm");
    double *nw = values(blk, name, HD);
    for (int r = 0; r < rows * (p ? HK : H); r++) {
      double sq = 0;
      for (int e = 0; e < HD; e++) sq += t[r * HD + e] * t[r * HD + e] / HD;
      for (int e = 0; e < HD; e++) t[r * HD + e] = t[r * HD + e] / sqrt(sq + qk_eps) * nw[e];
    }
    free(nw);
  }
  for (int r = 0; r < rows && rotary; r++) { /* float32 inverse frequencies, as the module */
    int pos = p0 + r % T;
    for (int p = 0; p < 2; p++) {
      double *t = p ? k : q;
      int heads = p ? HK : H;
      for (int hh = 0; hh < heads; hh++) {
        double *e = t + (size_t)r * heads * HD + hh * HD, rot[HD];
        for (int j = 0; j < HD; j++) {
          int i = j % (HD / 2);
          float inv = 1.0f / powf(10000.0f, (float)(2 * i) / (float)HD);
          double ang = (double)((float)pos * inv);
          double other = j < HD / 2 ? -e[j + HD / 2] : e[j - HD / 2];
          rot[j] = e[j] * cos(ang) + other * sin(ang);
        }
        memcpy(e, rot, sizeof rot);
      }
    }
  }
  for (int bb = 0; bb < B; bb++)
    for (int hh = 0; hh < H; hh++) {
      int g = hh / (H / HK);
      for (int i = 0; i < T; i++) {
        double s[T], mx = -INFINITY, sum = 0;
        int j0 = window && i - window + 1 > 0 ? (int)(i - window + 1) : 0;
        for (int j = j0; j <= i; j++) {
          double d = 0;
          for (int e = 0; e < HD; e++)
            d += q[((bb * T + i) * H + hh) * HD + e] * k[((bb * T + j) * HK + g) * HD + e];
          s[j] = d / sqrt((double)HD);
          mx = fmax(mx, s[j]);
        }
        for (int j = j0; j <= i; j++) sum += s[j] = exp(s[j] - mx);
        for (int e = 0; e < HD; e++) {
          double a = 0;
          for (int j = j0; j <= i; j++) a += s[j] / sum * v[((bb * T + j) * HK + g) * HD + e];
          att[((bb * T + i) * H + hh) * HD + e] = a;
        }
      }
    }
  snprintf(name, sizeof name, "%s.o_proj.weight", attn);
  double *w = values(blk, name, (int64_t)D * H * HD), *ob = NULL;
  snprintf(name, sizeof name, "%s.o_proj.bias", attn);
  if (biases) ob = values(blk, name, D);
  linear(att, rows, H * HD, w, ob, D, o);
  free(w), free(ob);
}

typedef struct ref_block {
  bool llama;
  const char *n1, *attn, *n2;
} ref_block;

/* The block's output for x [B, T, D] (positions from p0: rotary only). */
static void block_ref(const dt_module *blk, const ref_block *c, const double *x, int p0,
                      double *y) {
  char name[96];
#define V(suffix, n) (snprintf(name, sizeof name, "%s", suffix), values(blk, name, n))
  const int rows = B * T;
  double h1[B * T * D], o[B * T * D], hmid[B * T * D], h2[B * T * D];
  double *w1 = NULL, *b1 = NULL;
  snprintf(name, sizeof name, "%s.weight", c->n1);
  w1 = values(blk, name, D);
  if (!c->llama) snprintf(name, sizeof name, "%s.bias", c->n1), b1 = values(blk, name, D);
  norm(c->llama, x, rows, w1, b1, 1e-5, h1);
  free(w1), free(b1);
  attn_ref(blk, c->attn, c->llama, !c->llama, 0, 0, h1, p0, o);
  for (int i = 0; i < rows * D; i++) hmid[i] = x[i] + o[i];
  snprintf(name, sizeof name, "%s.weight", c->n2);
  w1 = values(blk, name, D);
  b1 = NULL;
  if (!c->llama) snprintf(name, sizeof name, "%s.bias", c->n2), b1 = values(blk, name, D);
  norm(c->llama, hmid, rows, w1, b1, 1e-5, h2);
  free(w1), free(b1);
  static double g[B * T * F], u[B * T * F], f[B * T * D];
  if (c->llama) {
    double *wg = V("mlp.gate_proj.weight", F * D), *wu = V("mlp.up_proj.weight", F * D);
    double *wd = V("mlp.down_proj.weight", D * F);
    linear(h2, rows, D, wg, NULL, F, g);
    linear(h2, rows, D, wu, NULL, F, u);
    for (int i = 0; i < rows * F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
    linear(g, rows, F, wd, NULL, D, f);
    free(wg), free(wu), free(wd);
  } else {
    double *wf = V("mlp.c_fc.weight", F * D), *bf = V("mlp.c_fc.bias", F);
    double *wp = V("mlp.c_proj.weight", D * F), *bp = V("mlp.c_proj.bias", D);
    linear(h2, rows, D, wf, bf, F, g);
    for (int i = 0; i < rows * F; i++)
      g[i] = 0.5 * g[i] *
             (1 + tanh(sqrt(2 / 3.14159265358979323846) * (g[i] + 0.044715 * g[i] * g[i] * g[i])));
    linear(g, rows, F, wp, bp, D, f);
    free(wf), free(bf), free(wp), free(bp);
  }
  for (int i = 0; i < rows * D; i++) y[i] = hmid[i] + f[i];
#undef V
}

static dt_nn_block_options llama_options(void) {
  return (dt_nn_block_options){
      .norm = DT_NN_NORM_RMS,
      .norm_eps = 1e-5,
      .attention = {.n_heads = H, .n_kv_heads = HK, .rope_theta = 10000, .seed = 11},
      .hidden = F,
      .mlp = {.kind = DT_NN_MLP_SWIGLU, .seed = 21},
  };
}

static dt_nn_block_options gpt2_options(void) {
  return (dt_nn_block_options){
      .norm = DT_NN_NORM_LAYER,
      .norm_eps = 1e-5,
      .attention = {.n_heads = H, .n_kv_heads = HK, .qkv_bias = true, .out_bias = true, .seed = 5},
      .hidden = F,
      .mlp = {.kind = DT_NN_MLP_GELU_TANH, .bias = true, .seed = 7},
      .names = {"ln_1", "attn", "ln_2", "mlp"},
  };
}

static dt_tensor *input(int64_t t, uint64_t seed) {
  dt_tensor *x = NULL;
  cr_assert_eq(dt_randn(3, (int64_t[]){B, t, D}, DT_F32, seed, &x), DT_OK);
  return x;
}

static void check_block(dt_nn_block_options o, const ref_block *c) {
  dt_module *blk = NULL;
  cr_assert_eq(dt_nn_transformer_block(D, &o, &blk), DT_OK, "%s", dt_last_error());
  dt_tensor *x = input(T, 3), *y = NULL;
  cr_assert_eq(dt_module_forward(blk, x, &y), DT_OK, "%s", dt_last_error());
  double xv[B * T * D], got[B * T * D], want[B * T * D];
  cr_assert_eq(dt_tensor_to_doubles(x, xv, B * T * D), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(y, got, B * T * D), DT_OK);
  block_ref(blk, c, xv, 0, want);
  for (int i = 0; i < B * T * D; i++)
    cr_assert(fabs(got[i] - want[i]) <= 1e-4 * (1 + fabs(want[i])), "element %d: %.7g, want %.7g",
              i, got[i], want[i]);
  dt_tensor_release(x), dt_tensor_release(y);
  dt_module_destroy(blk);
}

Test(nn_transformer, llama_block_matches_naive_loops) {
  check_block(llama_options(),
              &(ref_block){true, "input_layernorm", "self_attn", "post_attention_layernorm"});
}

Test(nn_transformer, gpt2_block_matches_naive_loops) {
  check_block(gpt2_options(), &(ref_block){false, "ln_1", "attn", "ln_2"});
}

/* Outputs of the block over x [B, T, D] fed through a cache in chunks (sizes sum to T). */
static dt_status chunked(dt_module *blk, dt_tensor *x, int n, const int *sizes, bool discard_first,
                         double *out) {
  dt_nn_kv_cache *cache = NULL;
  RANK_OK(dt_nn_kv_cache_create(1, &cache));
  dt_module *attn = dt_module_find(blk, "self_attn");
  RANK_OK(dt_nn_attention_set_context(attn, &(dt_nn_attention_context){.cache = cache}));
  int at = 0;
  for (int c = 0; c < n; c++) {
    dt_tensor *xc = NULL, *yc = NULL;
    RANK_OK(dt_narrow(x, 1, at, sizes[c], &xc));
    if (discard_first) { /* a forward whose result is thrown away changes nothing */
      RANK_OK(dt_module_forward(blk, xc, &yc));
      dt_tensor_release(yc), yc = NULL;
      dt_nn_kv_cache_discard(cache);
    }
    RANK_OK(dt_module_forward(blk, xc, &yc));
    RANK_OK(dt_nn_kv_cache_commit(cache));
    RANK_CHECK(dt_nn_kv_cache_length(cache) == at + sizes[c], "cache length %lld after %d",
               (long long)dt_nn_kv_cache_length(cache), at + sizes[c]);
    dt_tensor *full = NULL;
    if (dt_tensor_is_distributed(yc)) {
      RANK_OK(dt_dist_full_tensor(yc, &full));
    } else {
      full = dt_tensor_retain(yc);
    }
    double part[B * T * D];
    RANK_OK(dt_tensor_to_doubles(full, part, B * sizes[c] * D));
    for (int b = 0; b < B; b++)
      memcpy(out + ((size_t)b * T + at) * D, part + (size_t)b * sizes[c] * D,
             sizeof(double) * (size_t)sizes[c] * D);
    dt_tensor_release(xc), dt_tensor_release(yc), dt_tensor_release(full);
    at += sizes[c];
  }
  RANK_OK(dt_nn_attention_set_context(attn, NULL));
  dt_nn_kv_cache_destroy(cache);
  return DT_OK;
}

Test(nn_transformer, kv_cache_chunks_give_the_whole_sequence) {
  dt_nn_block_options o = llama_options();
  dt_module *blk = NULL;
  cr_assert_eq(dt_nn_transformer_block(D, &o, &blk), DT_OK, "%s", dt_last_error());
  dt_tensor *x = input(T, 9), *y = NULL;
  cr_assert_eq(dt_module_forward(blk, x, &y), DT_OK, "%s", dt_last_error());
  double whole[B * T * D], parts[B * T * D];
  cr_assert_eq(dt_tensor_to_doubles(y, whole, B * T * D), DT_OK);
  for (int discard = 0; discard < 2; discard++) {
    cr_assert_eq(chunked(blk, x, 3, (int[]){3, 1, 2}, discard, parts), DT_OK, "%s",
                 dt_last_error());
    for (int i = 0; i < B * T * D; i++)
      cr_assert(fabs(parts[i] - whole[i]) <= 1e-5 * (1 + fabs(whole[i])),
                "discard %d element %d: chunked %.7g, whole %.7g", discard, i, parts[i], whole[i]);
  }
  dt_tensor_release(x), dt_tensor_release(y);
  dt_module_destroy(blk);
}

static const dt_tp_plan_entry MEGATRON[] = {
    {"self_attn.q_proj", DT_TP_COLWISE}, {"self_attn.k_proj", DT_TP_COLWISE},
    {"self_attn.v_proj", DT_TP_COLWISE}, {"self_attn.o_proj", DT_TP_ROWWISE},
    {"mlp.gate_proj", DT_TP_COLWISE},    {"mlp.up_proj", DT_TP_COLWISE},
    {"mlp.down_proj", DT_TP_ROWWISE},
};

typedef struct tp_case {
  double whole[B * T * D];
} tp_case;

static dt_status tp_rank(dt_comm *world, void *arg) {
  tp_case *c = arg;
  dt_mesh *mesh = NULL;
  dt_module *blk = NULL;
  dt_nn_block_options o = llama_options();
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"tp"}, &mesh));
  RANK_OK(dt_nn_transformer_block(D, &o, &blk));
  RANK_OK(dt_parallel_tp_module(blk, mesh, &(dt_tp_plan){7, MEGATRON}, NULL));
  dt_tensor *x = input(T, 9), *y = NULL;
  RANK_OK(dt_module_forward(blk, x, &y));
  double got[B * T * D];
  RANK_CHECK(!dt_tensor_is_distributed(y), "the TP block's output is distributed");
  RANK_OK(dt_tensor_to_doubles(y, got, B * T * D));
  for (int i = 0; i < B * T * D; i++)
    RANK_CHECK(fabs(got[i] - c->whole[i]) <= 1e-5 * (1 + fabs(c->whole[i])),
               "TP element %d: %.7g, 1 rank %.7g", i, got[i], c->whole[i]);
  RANK_OK(chunked(blk, x, 2, (int[]){4, 2}, true, got));
  for (int i = 0; i < B * T * D; i++)
    RANK_CHECK(fabs(got[i] - c->whole[i]) <= 1e-5 * (1 + fabs(c->whole[i])),
               "TP cached element %d: %.7g, 1 rank %.7g", i, got[i], c->whole[i]);
  dt_tensor_release(x), dt_tensor_release(y);
  dt_module_destroy(blk);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(nn_transformer, megatron_tp2_gives_the_one_rank_outputs) {
  tp_case c;
  dt_nn_block_options o = llama_options();
  dt_module *blk = NULL;
  cr_assert_eq(dt_nn_transformer_block(D, &o, &blk), DT_OK, "%s", dt_last_error());
  dt_tensor *x = input(T, 9), *y = NULL;
  cr_assert_eq(dt_module_forward(blk, x, &y), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_to_doubles(y, c.whole, B * T * D), DT_OK);
  dt_tensor_release(x), dt_tensor_release(y);
  dt_module_destroy(blk);
  SPAWN_OK(2, tp_rank, &c);
}

Test(nn_transformer, backward_reaches_every_parameter) {
  dt_nn_block_options o = llama_options();
  dt_module *blk = NULL;
  cr_assert_eq(dt_nn_transformer_block(D, &o, &blk), DT_OK, "%s", dt_last_error());
  const char *fqns[] = {
      "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
      "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
      "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight"};
  for (int i = 0; i < 9; i++)
    cr_assert_eq(dt_tensor_set_requires_grad(dt_module_get_tensor(blk, fqns[i]), true), DT_OK);
  dt_tensor *x = input(T, 4), *y = NULL, *s = NULL;
  cr_assert_eq(dt_module_forward(blk, x, &y), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_sum(y, &s), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_backward(s, NULL), DT_OK, "%s", dt_last_error());
  for (int i = 0; i < 9; i++) {
    dt_tensor *g = NULL;
    cr_assert_eq(dt_tensor_grad(dt_module_get_tensor(blk, fqns[i]), &g), DT_OK, "%s", fqns[i]);
    cr_assert_not_null(g, "%s has no gradient", fqns[i]);
    dt_tensor_release(g);
  }
  dt_tensor_release(x), dt_tensor_release(y), dt_tensor_release(s);
  dt_module_destroy(blk);
}

Test(nn_transformer, bad_arguments_are_refused_by_name) {
  dt_module *m = NULL;
  dt_nn_attention_options a = {.n_heads = 6, .n_kv_heads = 4};
  cr_assert_eq(dt_nn_attention(24, &a, &m), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "n_kv_heads 4"), "%s", dt_last_error());
  a = (dt_nn_attention_options){.n_heads = 8, .rope_theta = 1e4};
  cr_assert_eq(dt_nn_attention(24, &a, &m), DT_ERR_INVALID); /* head_dim 3 is odd */
  cr_assert(strstr(dt_last_error(), "even head_dim"), "%s", dt_last_error());
  cr_assert_eq(dt_nn_attention(24, NULL, &m), DT_ERR_INVALID);
  cr_assert_eq(dt_nn_rms_norm(8, 0, &m), DT_ERR_INVALID);
  cr_assert_eq(dt_nn_transformer_mlp(8, 0, NULL, &m), DT_ERR_INVALID);
  cr_assert_eq(dt_nn_transformer_mlp(8, 4, &(dt_nn_mlp_options){.kind = 9}, &m), DT_ERR_INVALID);
  cr_assert_null(m);
  dt_module *lin = NULL;
  cr_assert_eq(dt_nn_linear(4, 4, false, 1, &lin), DT_OK);
  cr_assert_eq(dt_nn_attention_set_context(lin, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "Linear is not an Attention"), "%s", dt_last_error());
  dt_module_destroy(lin);
  dt_nn_kv_cache *cache = NULL;
  cr_assert_eq(dt_nn_kv_cache_create(0, &cache), DT_ERR_INVALID);
  cr_assert_eq(dt_nn_kv_cache_create(2, &cache), DT_OK);
  a = (dt_nn_attention_options){.n_heads = 2};
  cr_assert_eq(dt_nn_attention(8, &a, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(
      dt_nn_attention_set_context(m, &(dt_nn_attention_context){.cache = cache, .layer = 2}),
      DT_ERR_INVALID);
  /* Only layer 0 of 2 appends: the commit refuses and drops it. */
  cr_assert_eq(dt_nn_attention_set_context(m, &(dt_nn_attention_context){.cache = cache}), DT_OK);
  dt_tensor *x = NULL, *y = NULL;
  cr_assert_eq(dt_randn(3, (int64_t[]){1, 3, 8}, DT_F32, 1, &x), DT_OK);
  cr_assert_eq(dt_module_forward(m, x, &y), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_nn_kv_cache_commit(cache), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "1 of the cache's 2 layers"), "%s", dt_last_error());
  cr_assert_eq(dt_nn_kv_cache_length(cache), 0);
  cr_assert_eq(dt_nn_kv_cache_commit(NULL), DT_ERR_INVALID);
  dt_tensor_release(x), dt_tensor_release(y);
  dt_module_destroy(m);
  dt_nn_kv_cache_destroy(cache);
}

/* An Attention alone (a parent module so that its FQNs start "self_attn."), on x, against
 * attn_ref; then fed through a cache in chunks 3, 1, 2, a chunk discarded first. */
static void check_attention(dt_nn_attention_options a, int64_t window, double qk_eps) {
  dt_module *root = NULL, *attn = NULL;
  cr_assert_eq(dt_module_create("Root", NULL, NULL, &root), DT_OK);
  cr_assert_eq(dt_nn_attention(D, &a, &attn), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_module_add_child(root, "self_attn", attn), DT_OK);
  if (qk_eps > 0) { /* norm weights other than ones, so that the test sees them used */
    cr_assert_eq(dt_mul_scalar_(dt_module_get_tensor(attn, "q_norm.weight"), 1.5), DT_OK);
    cr_assert_eq(dt_mul_scalar_(dt_module_get_tensor(attn, "k_norm.weight"), 0.5), DT_OK);
  }
  dt_tensor *x = input(T, 17), *y = NULL;
  cr_assert_eq(dt_module_forward(attn, x, &y), DT_OK, "%s", dt_last_error());
  double xv[B * T * D], got[B * T * D], want[B * T * D];
  cr_assert_eq(dt_tensor_to_doubles(x, xv, B * T * D), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(y, got, B * T * D), DT_OK);
  attn_ref(root, "self_attn", a.rope_theta > 0, a.qkv_bias, window, qk_eps, xv, 0, want);
  for (int i = 0; i < B * T * D; i++)
    cr_assert(fabs(got[i] - want[i]) <= 1e-4 * (1 + fabs(want[i])), "element %d: %.7g, want %.7g",
              i, got[i], want[i]);
  dt_nn_kv_cache *cache = NULL;
  cr_assert_eq(dt_nn_kv_cache_create(1, &cache), DT_OK);
  cr_assert_eq(dt_nn_attention_set_context(attn, &(dt_nn_attention_context){.cache = cache}),
               DT_OK);
  const int sizes[3] = {3, 1, 2};
  for (int c = 0, at = 0; c < 3; at += sizes[c++]) {
    dt_tensor *xc = NULL, *yc = NULL;
    cr_assert_eq(dt_narrow(x, 1, at, sizes[c], &xc), DT_OK);
    cr_assert_eq(dt_module_forward(attn, xc, &yc), DT_OK, "%s", dt_last_error());
    dt_tensor_release(yc), yc = NULL;
    dt_nn_kv_cache_discard(cache);
    cr_assert_eq(dt_module_forward(attn, xc, &yc), DT_OK, "%s", dt_last_error());
    cr_assert_eq(dt_nn_kv_cache_commit(cache), DT_OK, "%s", dt_last_error());
    double part[B * T * D];
    cr_assert_eq(dt_tensor_to_doubles(yc, part, B * sizes[c] * D), DT_OK);
    for (int b = 0; b < B; b++)
      for (int i = 0; i < sizes[c] * D; i++) {
        double w = want[((size_t)b * T + at) * D + i], g = part[(size_t)b * sizes[c] * D + i];
        cr_assert(fabs(g - w) <= 1e-4 * (1 + fabs(w)), "chunk %d element %d: %.7g, want %.7g", c, i,
                  g, w);
      }
    dt_tensor_release(xc), dt_tensor_release(yc);
  }
  cr_assert_eq(dt_nn_kv_cache_length(cache), T);
  int64_t keep = window > 1 ? window - 1 : T;
  cr_assert_eq(dt_nn_kv_cache_held(cache, 0), keep < T ? keep : T, "the cache holds %lld",
               (long long)dt_nn_kv_cache_held(cache, 0));
  cr_assert_eq(dt_nn_attention_set_context(attn, NULL), DT_OK);
  dt_nn_kv_cache_destroy(cache);
  dt_tensor_release(x), dt_tensor_release(y);
  dt_module_destroy(root);
}

Test(nn_transformer, sliding_window_attention_and_its_short_cache) {
  /* Mistral: a window of 2 and of 3 over 6 positions; the cache keeps 1 and 2 of them. */
  for (int64_t w = 2; w <= 3; w++)
    check_attention(
        (dt_nn_attention_options){
            .n_heads = H, .n_kv_heads = HK, .rope_theta = 1e4, .sliding_window = w, .seed = 31},
        w, 0);
}

Test(nn_transformer, qk_norm_attention) {
  /* Qwen3: q_norm and k_norm over each head before the rotary embedding. */
  dt_nn_attention_options a = {
      .n_heads = H, .n_kv_heads = HK, .rope_theta = 1e4, .qk_norm_eps = 1e-6, .seed = 41};
  check_attention(a, 0, 1e-6);
}

/* What an adversarial review found: positions past 2^53, a rope_theta that is 0 or infinite in
 * float32, inputs of the wrong rank or dtype, a cache fed two dtypes; bfloat16 stays bfloat16. */
Test(nn_transformer, hostile_positions_dtypes_and_ranks_are_refused) {
  dt_module *m = NULL;
  for (int i = 0; i < 2; i++) {
    dt_nn_attention_options a = {.n_heads = 2, .rope_theta = i ? 1e300 : 1e-50};
    cr_assert_eq(dt_nn_attention(8, &a, &m), DT_ERR_INVALID);
    cr_assert(strstr(dt_last_error(), "positive normal float32"), "%s", dt_last_error());
  }
  dt_nn_attention_options a = {.n_heads = 2, .rope_theta = 1e4};
  cr_assert_eq(dt_nn_attention(8, &a, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_nn_attention_set_context(m, &(dt_nn_attention_context){.position = INT64_MAX}),
               DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "outside 0..2^53"), "%s", dt_last_error());
  cr_assert_eq(dt_nn_attention_set_context(
                   m, &(dt_nn_attention_context){.position = (INT64_C(1) << 53) - 1}),
               DT_OK);
  dt_tensor *x = NULL, *y = NULL, *x2 = NULL, *xi = NULL, *xb = NULL, *x64 = NULL;
  cr_assert_eq(dt_randn(3, (int64_t[]){1, 3, 8}, DT_F32, 1, &x), DT_OK);
  cr_assert_eq(dt_module_forward(m, x, &y), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "pass 2^53"), "%s", dt_last_error());
  cr_assert_null(y);
  cr_assert_eq(dt_nn_attention_set_context(m, NULL), DT_OK);
  cr_assert_eq(dt_randn(2, (int64_t[]){3, 8}, DT_F32, 1, &x2), DT_OK);
  cr_assert_eq(dt_module_forward(m, x2, &y), DT_ERR_SHAPE);
  cr_assert(strstr(dt_last_error(), "input is 2-D"), "%s", dt_last_error());
  cr_assert_eq(dt_zeros(3, (int64_t[]){1, 3, 8}, DT_I64, &xi), DT_OK);
  cr_assert_eq(dt_module_forward(m, xi, &y), DT_ERR_DTYPE);
  cr_assert(strstr(dt_last_error(), "dtype int64"), "%s", dt_last_error());
  /* bfloat16 parameters and input: the output is bfloat16 too. */
  dt_module *mb = NULL;
  cr_assert_eq(dt_nn_attention(8, &a, &mb), DT_OK);
  const char *ps[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"};
  const char *lin[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
  for (int i = 0; i < 4; i++) {
    dt_tensor *b = NULL;
    cr_assert_eq(dt_to(dt_module_get_tensor(mb, ps[i]), DT_BF16, &b), DT_OK);
    cr_assert_eq(dt_module_set_tensor(dt_module_find(mb, lin[i]), "weight", b), DT_OK);
    dt_tensor_release(b);
  }
  cr_assert_eq(dt_to(x, DT_BF16, &xb), DT_OK);
  cr_assert_eq(dt_module_forward(mb, xb, &y), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_dtype(y), DT_BF16, "bfloat16 in, %s out",
               dt_dtype_name(dt_tensor_dtype(y)));
  dt_tensor_release(y), y = NULL;
  /* A cache of float32 keys refuses float64 ones and stays as it was. */
  dt_nn_kv_cache *cache = NULL;
  cr_assert_eq(dt_nn_kv_cache_create(1, &cache), DT_OK);
  cr_assert_eq(dt_nn_attention_set_context(m, &(dt_nn_attention_context){.cache = cache}), DT_OK);
  cr_assert_eq(dt_module_forward(m, x, &y), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_nn_kv_cache_commit(cache), DT_OK);
  dt_tensor_release(y), y = NULL;
  dt_module *m64 = NULL;
  cr_assert_eq(dt_nn_attention(8, &a, &m64), DT_OK);
  for (int i = 0; i < 4; i++) {
    dt_tensor *d = NULL;
    cr_assert_eq(dt_to(dt_module_get_tensor(m64, ps[i]), DT_F64, &d), DT_OK);
    cr_assert_eq(dt_module_set_tensor(dt_module_find(m64, lin[i]), "weight", d), DT_OK);
    dt_tensor_release(d);
  }
  cr_assert_eq(dt_nn_attention_set_context(m64, &(dt_nn_attention_context){.cache = cache}), DT_OK);
  cr_assert_eq(dt_to(x, DT_F64, &x64), DT_OK);
  cr_assert_eq(dt_module_forward(m64, x64, &y), DT_ERR_DTYPE);
  cr_assert(strstr(dt_last_error(), "holds float32 keys"), "%s", dt_last_error());
  dt_nn_kv_cache_discard(cache);
  cr_assert_eq(dt_nn_kv_cache_length(cache), 3);
  cr_assert_eq(dt_module_forward(m, x, &y), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_nn_kv_cache_commit(cache), DT_OK);
  cr_assert_eq(dt_nn_kv_cache_length(cache), 6);
  dt_tensor *rel[] = {x, y, x2, xi, xb, x64};
  for (int i = 0; i < 6; i++) dt_tensor_release(rel[i]);
  dt_module_destroy(m), dt_module_destroy(mb), dt_module_destroy(m64);
  dt_nn_kv_cache_destroy(cache);
}
