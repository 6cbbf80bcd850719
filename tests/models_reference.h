/* Tiny Hugging Face models written by the library itself at odd sizes (a Llama with 6 query
 * heads over 3 kv heads, a tied GPT-2 with 3 heads), and a naive-loop forward of both in
 * double, independent of the ops, for tests/test_models.c. */
#ifndef DT_TESTS_MODELS_REFERENCE_H
#define DT_TESTS_MODELS_REFERENCE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"

typedef struct ref_cfg {
  bool llama;
  int64_t V, D, I, L, H, KV, hd, P;
  double eps, theta;
  bool tied;
  /* Llama 3 rope_scaling (factor 0: none): factor, low_freq_factor, high_freq_factor,
   * original_max_position_embeddings. */
  double rope_factor, rope_low, rope_high;
  int64_t rope_original;
} ref_cfg;

static const ref_cfg REF_LLAMA = {true, 37, 22, 17, 2, 6, 3, 4, 40, 1e-5, 500.0, false, 0, 0, 0, 0};
static const ref_cfg REF_GPT2 = {false, 29, 18, 72, 2, 3, 3, 6, 40, 1e-5, 0, true, 0, 0, 0, 0};
/* Llama 3 scaling over head_dim 8 (wavelengths 6.3, 29.7, 140, 664 against the bands 25 and
 * 100: one frequency of each kind) and max_position_embeddings 1e9, which rotary tables for
 * every position could not hold. */
static const ref_cfg REF_LLAMA3 = {true,       37,   22,    17,    2,   6,   3,   8,
                                   1000000000, 1e-5, 500.0, false, 8.0, 1.0, 4.0, 100};

/* The rotary inverse frequency i of a Llama (transformers' formulas, in double). */
static double ref_inv_freq(const ref_cfg *c, int64_t i) {
  double inv = pow(c->theta, -2.0 * (double)i / (double)c->hd);
  if (c->rope_factor <= 0) return inv;
  double wavelen = 2 * 3.14159265358979323846 / inv;
  double low_wl = (double)c->rope_original / c->rope_low;
  double high_wl = (double)c->rope_original / c->rope_high;
  if (wavelen < high_wl) return inv;
  if (wavelen > low_wl) return inv / c->rope_factor;
  double smooth = ((double)c->rope_original / wavelen - c->rope_low) / (c->rope_high - c->rope_low);
  return (1 - smooth) * inv / c->rope_factor + smooth * inv;
}

typedef struct ref_weights {
  int n;
  char names[64][96];
  int64_t shape[64][2];
  double *data[64];
} ref_weights;

static double *ref_get(const ref_weights *w, const char *name) {
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->names[i], name)) return w->data[i];
  fprintf(stderr, "models_reference: no weight %s\n", name);
  abort();
}

static void ref_free(ref_weights *w) {
  for (int i = 0; i < w->n; i++) free(w->data[i]);
  w->n = 0;
}

/* Adds a random weight (normal * scale, or 1 + normal * scale for norm weights). */
static void ref_add(ref_weights *w, const char *name, int64_t a, int64_t b, double scale,
                    double base, uint64_t seed) {
  int64_t shape[2] = {a, b};
  int nd = b > 0 ? 2 : 1;
  dt_tensor *t = NULL;
  dt_randn(nd, shape, DT_F64, seed, &t);
  int64_t n = a * (b > 0 ? b : 1);
  double *d = malloc(sizeof(double) * (size_t)n);
  dt_tensor_to_doubles(t, d, n);
  for (int64_t i = 0; i < n; i++) d[i] = base + scale * d[i];
  dt_tensor_release(t);
  snprintf(w->names[w->n], sizeof w->names[0], "%s", name);
  w->shape[w->n][0] = a;
  w->shape[w->n][1] = b;
  w->data[w->n++] = d;
}

static void ref_make(const ref_cfg *c, uint64_t seed, ref_weights *w) {
  memset(w, 0, sizeof *w);
  char n[96];
  uint64_t s = seed;
  double sc = 0.3;
  if (c->llama) {
    ref_add(w, "model.embed_tokens.weight", c->V, c->D, 1.0, 0, s++);
    for (int l = 0; l < c->L; l++) {
#define W(name, a, b, scale, base)                                                                 \
  snprintf(n, sizeof n, "model.layers.%d.%s", l, name), ref_add(w, n, a, b, scale, base, s++)
      W("input_layernorm.weight", c->D, 0, 0.2, 1.0);
      W("self_attn.q_proj.weight", c->H * c->hd, c->D, sc, 0);
      W("self_attn.k_proj.weight", c->KV * c->hd, c->D, sc, 0);
      W("self_attn.v_proj.weight", c->KV * c->hd, c->D, sc, 0);
      W("self_attn.o_proj.weight", c->D, c->H * c->hd, sc, 0);
      W("post_attention_layernorm.weight", c->D, 0, 0.2, 1.0);
      W("mlp.gate_proj.weight", c->I, c->D, sc, 0);
      W("mlp.up_proj.weight", c->I, c->D, sc, 0);
      W("mlp.down_proj.weight", c->D, c->I, sc, 0);
    }
    ref_add(w, "model.norm.weight", c->D, 0, 0.2, 1.0, s++);
    ref_add(w, "lm_head.weight", c->V, c->D, sc, 0, s++);
  } else {
    ref_add(w, "transformer.wte.weight", c->V, c->D, 1.0, 0, s++);
    ref_add(w, "transformer.wpe.weight", c->P, c->D, 0.5, 0, s++);
    for (int l = 0; l < c->L; l++) {
#define G(name, a, b, scale, base)                                                                 \
  snprintf(n, sizeof n, "transformer.h.%d.%s", l, name), ref_add(w, n, a, b, scale, base, s++)
      G("ln_1.weight", c->D, 0, 0.2, 1.0);
      G("ln_1.bias", c->D, 0, 0.2, 0);
      G("attn.c_attn.weight", c->D, 3 * c->D, sc, 0);
      G("attn.c_attn.bias", 3 * c->D, 0, sc, 0);
      G("attn.c_proj.weight", c->D, c->D, sc, 0);
      G("attn.c_proj.bias", c->D, 0, sc, 0);
      G("ln_2.weight", c->D, 0, 0.2, 1.0);
      G("ln_2.bias", c->D, 0, 0.2, 0);
      G("mlp.c_fc.weight", c->D, c->I, sc, 0);
      G("mlp.c_fc.bias", c->I, 0, sc, 0);
      G("mlp.c_proj.weight", c->I, c->D, sc, 0);
      G("mlp.c_proj.bias", c->D, 0, sc, 0);
    }
    ref_add(w, "transformer.ln_f.weight", c->D, 0, 0.2, 1.0, s++);
    ref_add(w, "transformer.ln_f.bias", c->D, 0, 0.2, 0, s++);
  }
}

/* Writes dir/config.json and dir/model.safetensors (float32) of the weights. */
static dt_status ref_write(const ref_cfg *c, const ref_weights *w, const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return DT_ERR_IO;
  if (c->llama)
    fprintf(f,
            "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
            "\"vocab_size\": %lld, \"hidden_size\": %lld, \"intermediate_size\": %lld, "
            "\"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, "
            "\"num_key_value_heads\": %lld, \"head_dim\": %lld, \"max_position_embeddings\": %lld, "
            "\"rms_norm_eps\": %g, \"rope_theta\": %g, \"hidden_act\": \"silu\", "
            "\"tie_word_embeddings\": false, \"eos_token_id\": 2",
            (long long)c->V, (long long)c->D, (long long)c->I, (long long)c->L, (long long)c->H,
            (long long)c->KV, (long long)c->hd, (long long)c->P, c->eps, c->theta);
  if (c->llama && c->rope_factor > 0)
    fprintf(f,
            ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %g, "
            "\"low_freq_factor\": %g, \"high_freq_factor\": %g, "
            "\"original_max_position_embeddings\": %lld}",
            c->rope_factor, c->rope_low, c->rope_high, (long long)c->rope_original);
  if (c->llama)
    fprintf(f, "}\n");
  else
    fprintf(f,
            "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", "
            "\"vocab_size\": %lld, \"n_embd\": %lld, \"n_inner\": null, \"n_layer\": %lld, "
            "\"n_head\": %lld, \"n_positions\": %lld, \"layer_norm_epsilon\": %g, "
            "\"activation_function\": \"gelu_new\", \"eos_token_id\": 2}\n",
            (long long)c->V, (long long)c->D, (long long)c->L, (long long)c->H, (long long)c->P,
            c->eps);
  fclose(f);
  dt_tensor *ts[64] = {NULL};
  const char *names[64];
  dt_status st = DT_OK;
  for (int i = 0; i < w->n && !st; i++) {
    names[i] = w->names[i];
    int64_t n = w->shape[i][0] * (w->shape[i][1] > 0 ? w->shape[i][1] : 1);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t k = 0; k < n; k++) v[k] = (float)w->data[i][k];
    /* The reference computes with the float32 values the file holds. */
    for (int64_t k = 0; k < n; k++) w->data[i][k] = v[k];
    st = dt_from_data(v, w->shape[i][1] > 0 ? 2 : 1, w->shape[i], DT_F32, &ts[i]);
    free(v);
  }
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  if (!st) st = dt_safetensors_save(path, w->n, names, ts, 0, NULL, NULL);
  for (int i = 0; i < w->n; i++) dt_tensor_release(ts[i]);
  return st;
}

/* ---- The naive forward: one sequence, every loop written out, in double ------------------- */

static void ref_matvec(const double *W, const double *x, int64_t out, int64_t in, bool w_in_out,
                       double *y) {
  for (int64_t o = 0; o < out; o++) {
    double s = 0;
    for (int64_t i = 0; i < in; i++) s += (w_in_out ? W[i * out + o] : W[o * in + i]) * x[i];
    y[o] = s;
  }
}

static void ref_norm(const ref_cfg *c, const double *x, const double *w, const double *b,
                     double *y) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < c->D; i++) mean += x[i];
  mean /= (double)c->D;
  if (c->llama) mean = 0;
  for (int64_t i = 0; i < c->D; i++) var += (x[i] - mean) * (x[i] - mean);
  var /= (double)c->D;
  for (int64_t i = 0; i < c->D; i++)
    y[i] = (x[i] - mean) / sqrt(var + c->eps) * w[i] + (b ? b[i] : 0);
}

/* Logits [T, V] of one sequence ids[T]. */
static void ref_forward(const ref_cfg *c, const ref_weights *w, const int64_t *ids, int64_t T,
                        double *logits) {
  int64_t D = c->D, Q = c->H * c->hd, K = c->KV * c->hd, rep = c->H / c->KV, hd = c->hd;
  double *x = calloc((size_t)(T * D), sizeof(double)), *h = malloc(sizeof(double) * (size_t)D);
  double *q = malloc(sizeof(double) * (size_t)(T * Q)),
         *k = malloc(sizeof(double) * (size_t)(T * K));
  double *v = malloc(sizeof(double) * (size_t)(T * K)), *a = malloc(sizeof(double) * (size_t)Q);
  double *o = malloc(sizeof(double) * (size_t)D), *u = malloc(sizeof(double) * (size_t)c->I);
  double *g = malloc(sizeof(double) * (size_t)c->I), *p = malloc(sizeof(double) * (size_t)T);
  double *qkv = malloc(sizeof(double) * (size_t)(3 * D));
  char n[96];
  const double *E = ref_get(w, c->llama ? "model.embed_tokens.weight" : "transformer.wte.weight");
  for (int64_t t = 0; t < T; t++)
    for (int64_t d = 0; d < D; d++)
      x[t * D + d] =
          E[ids[t] * D + d] + (c->llama ? 0 : ref_get(w, "transformer.wpe.weight")[t * D + d]);
#define WN(fmt) (snprintf(n, sizeof n, fmt, (int)l), ref_get(w, n))
  for (int64_t l = 0; l < c->L; l++) {
    for (int64_t t = 0; t < T; t++) {
      if (c->llama) {
        ref_norm(c, x + t * D, WN("model.layers.%d.input_layernorm.weight"), NULL, h);
        ref_matvec(WN("model.layers.%d.self_attn.q_proj.weight"), h, Q, D, false, q + t * Q);
        ref_matvec(WN("model.layers.%d.self_attn.k_proj.weight"), h, K, D, false, k + t * K);
        ref_matvec(WN("model.layers.%d.self_attn.v_proj.weight"), h, K, D, false, v + t * K);
        /* rotary: pairs (i, i + hd/2) of every head turned by pos * theta^(-2i/hd) */
        for (int64_t hh = 0; hh < c->H + c->KV; hh++) {
          double *r = hh < c->H ? q + t * Q + hh * hd : k + t * K + (hh - c->H) * hd;
          for (int64_t i = 0; i < hd / 2; i++) {
            double ang = (double)t * ref_inv_freq(c, i);
            double x1 = r[i], x2 = r[i + hd / 2];
            r[i] = x1 * cos(ang) - x2 * sin(ang);
            r[i + hd / 2] = x2 * cos(ang) + x1 * sin(ang);
          }
        }
      } else {
        ref_norm(c, x + t * D, WN("transformer.h.%d.ln_1.weight"), WN("transformer.h.%d.ln_1.bias"),
                 h);
        ref_matvec(WN("transformer.h.%d.attn.c_attn.weight"), h, 3 * D, D, true, qkv);
        const double *bias = WN("transformer.h.%d.attn.c_attn.bias");
        for (int64_t i = 0; i < D; i++) {
          q[t * Q + i] = qkv[i] + bias[i];
          k[t * K + i] = qkv[D + i] + bias[D + i];
          v[t * K + i] = qkv[2 * D + i] + bias[2 * D + i];
        }
      }
    }
    for (int64_t t = 0; t < T; t++) {
      for (int64_t hh = 0; hh < c->H; hh++) {
        int64_t kh = hh / rep;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= t; j++) {
          double s = 0;
          for (int64_t i = 0; i < hd; i++) s += q[t * Q + hh * hd + i] * k[j * K + kh * hd + i];
          p[j] = s / sqrt((double)hd);
          mx = fmax(mx, p[j]);
        }
        for (int64_t j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
        for (int64_t i = 0; i < hd; i++) {
          double s = 0;
          for (int64_t j = 0; j <= t; j++) s += p[j] / sum * v[j * K + kh * hd + i];
          a[hh * hd + i] = s;
        }
      }
      double *xt = x + t * D;
      if (c->llama) {
        ref_matvec(WN("model.layers.%d.self_attn.o_proj.weight"), a, D, Q, false, o);
        for (int64_t d = 0; d < D; d++) xt[d] += o[d];
        ref_norm(c, xt, WN("model.layers.%d.post_attention_layernorm.weight"), NULL, h);
        ref_matvec(WN("model.layers.%d.mlp.gate_proj.weight"), h, c->I, D, false, g);
        ref_matvec(WN("model.layers.%d.mlp.up_proj.weight"), h, c->I, D, false, u);
        for (int64_t i = 0; i < c->I; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
        ref_matvec(WN("model.layers.%d.mlp.down_proj.weight"), g, D, c->I, false, o);
        for (int64_t d = 0; d < D; d++) xt[d] += o[d];
      } else {
        ref_matvec(WN("transformer.h.%d.attn.c_proj.weight"), a, D, D, true, o);
        const double *pb = WN("transformer.h.%d.attn.c_proj.bias");
        for (int64_t d = 0; d < D; d++) xt[d] += o[d] + pb[d];
        ref_norm(c, xt, WN("transformer.h.%d.ln_2.weight"), WN("transformer.h.%d.ln_2.bias"), h);
        ref_matvec(WN("transformer.h.%d.mlp.c_fc.weight"), h, c->I, D, true, g);
        const double *fb = WN("transformer.h.%d.mlp.c_fc.bias");
        for (int64_t i = 0; i < c->I; i++) {
          double z = g[i] + fb[i];
          g[i] =
              0.5 * z * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (z + 0.044715 * z * z * z)));
        }
        ref_matvec(WN("transformer.h.%d.mlp.c_proj.weight"), g, D, c->I, true, o);
        const double *mb = WN("transformer.h.%d.mlp.c_proj.bias");
        for (int64_t d = 0; d < D; d++) xt[d] += o[d] + mb[d];
      }
    }
  }
#undef WN
  const double *head = ref_get(w, c->llama ? "lm_head.weight" : "transformer.wte.weight");
  for (int64_t t = 0; t < T; t++) {
    if (c->llama)
      ref_norm(c, x + t * D, ref_get(w, "model.norm.weight"), NULL, h);
    else
      ref_norm(c, x + t * D, ref_get(w, "transformer.ln_f.weight"),
               ref_get(w, "transformer.ln_f.bias"), h);
    ref_matvec(head, h, c->V, D, false, logits + t * c->V);
  }
  free(x), free(h), free(q), free(k), free(v), free(a), free(o), free(u), free(g), free(p),
      free(qkv);
}

#endif /* DT_TESTS_MODELS_REFERENCE_H */
