/*
 * The random Hugging Face checkpoints of `dtensor bench models`: a LlamaForCausalLM or a
 * GPT2LMHeadModel with transformers' config.json fields and tensor names, written with
 * dt_safetensors_save so that transformers' from_pretrained loads the same directory
 * (bench/peers/models.py). Weight i (in writing order) is dt_randn of seed i + 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_models.h"
#include "profile/output_file.h"

typedef struct weights {
  int n, cap;
  dt_tensor **ts;
  const char **names;
  char (*store)[96];
} weights;

/* One weight: random normal * 0.05 (norm weights: 1 + 0.1 normal); cols 0: 1-D. */
static dt_status add(weights *w, const char *name, int64_t rows, int64_t cols, bool norm) {
  if (w->n == w->cap) return DT_ERR_INTERNAL;
  dt_tensor *r = NULL;
  int64_t shape[2] = {rows, cols};
  int nd = cols > 0 ? 2 : 1;
  dt_status st = dt_randn(nd, shape, DT_F32, (uint64_t)(w->n + 1), &r);
  if (!st) st = dt_mul_scalar(r, norm ? 0.1 : 0.05, &w->ts[w->n]);
  if (!st && norm) st = dt_add_scalar_(w->ts[w->n], 1.0);
  dt_tensor_release(r);
  snprintf(w->store[w->n], 96, "%s", name);
  w->names[w->n] = w->store[w->n];
  w->n++;
  return st;
}

static void add_llama(weights *w, const bench_model_size *z, dt_status *st) {
  char nm[96];
  int64_t Q = z->H * z->hd, K = z->KV * z->hd;
  if (!*st) *st = add(w, "model.embed_tokens.weight", z->V, z->D, false);
  for (int64_t l = 0; l < z->L && !*st; l++) {
    struct {
      const char *suffix;
      int64_t rows, cols;
      bool norm;
    } t[] = {{"input_layernorm.weight", z->D, 0, true},
             {"self_attn.q_proj.weight", Q, z->D, false},
             {"self_attn.k_proj.weight", K, z->D, false},
             {"self_attn.v_proj.weight", K, z->D, false},
             {"self_attn.o_proj.weight", z->D, Q, false},
             {"post_attention_layernorm.weight", z->D, 0, true},
             {"mlp.gate_proj.weight", z->I, z->D, false},
             {"mlp.up_proj.weight", z->I, z->D, false},
             {"mlp.down_proj.weight", z->D, z->I, false}};
    for (int k = 0; k < 9 && !*st; k++) {
      snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, t[k].suffix);
      *st = add(w, nm, t[k].rows, t[k].cols, t[k].norm);
    }
  }
  if (!*st) *st = add(w, "model.norm.weight", z->D, 0, true);
  if (!*st) *st = add(w, "lm_head.weight", z->V, z->D, false);
}

/* GPT-2: Conv1D weights stored [in, out], c_attn [D, 3D]; the head is tied (not written). */
static void add_gpt2(weights *w, const bench_model_size *z, dt_status *st) {
  char nm[96];
  if (!*st) *st = add(w, "transformer.wte.weight", z->V, z->D, false);
  if (!*st) *st = add(w, "transformer.wpe.weight", z->P, z->D, false);
  for (int64_t l = 0; l < z->L && !*st; l++) {
    struct {
      const char *suffix;
      int64_t rows, cols;
      bool norm;
    } t[] = {{"ln_1.weight", z->D, 0, true},
             {"ln_1.bias", z->D, 0, false},
             {"attn.c_attn.weight", z->D, 3 * z->D, false},
             {"attn.c_attn.bias", 3 * z->D, 0, false},
             {"attn.c_proj.weight", z->D, z->D, false},
             {"attn.c_proj.bias", z->D, 0, false},
             {"ln_2.weight", z->D, 0, true},
             {"ln_2.bias", z->D, 0, false},
             {"mlp.c_fc.weight", z->D, z->I, false},
             {"mlp.c_fc.bias", z->I, 0, false},
             {"mlp.c_proj.weight", z->I, z->D, false},
             {"mlp.c_proj.bias", z->D, 0, false}};
    for (int k = 0; k < 12 && !*st; k++) {
      snprintf(nm, sizeof nm, "transformer.h.%lld.%s", (long long)l, t[k].suffix);
      *st = add(w, nm, t[k].rows, t[k].cols, t[k].norm);
    }
  }
  if (!*st) *st = add(w, "transformer.ln_f.weight", z->D, 0, true);
  if (!*st) *st = add(w, "transformer.ln_f.bias", z->D, 0, false);
}

static dt_status write_config(const bench_model_size *z, const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/config.json", dir);
  dt__output_file out;
  FILE *f = dt__output_open(&out, path); /* whole or not at all, never through a link */
  if (!f) return DT_ERR_IO;
  if (z->gpt2)
    fprintf(f,
            "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", "
            "\"vocab_size\": %lld, \"n_embd\": %lld, \"n_layer\": %lld, \"n_head\": %lld, "
            "\"n_inner\": %lld, \"n_positions\": %lld, \"layer_norm_epsilon\": 1e-05, "
            "\"activation_function\": \"gelu_new\", \"attn_pdrop\": 0.0, \"embd_pdrop\": 0.0, "
            "\"resid_pdrop\": 0.0, \"scale_attn_weights\": true, "
            "\"scale_attn_by_inverse_layer_idx\": false, \"reorder_and_upcast_attn\": false, "
            "\"tie_word_embeddings\": true, \"bos_token_id\": 1, \"eos_token_id\": 2, "
            "\"torch_dtype\": \"float32\"}\n",
            (long long)z->V, (long long)z->D, (long long)z->L, (long long)z->H, (long long)z->I,
            (long long)z->P);
  else
    fprintf(f,
            "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
            "\"vocab_size\": %lld, \"hidden_size\": %lld, \"intermediate_size\": %lld, "
            "\"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, "
            "\"num_key_value_heads\": %lld, \"head_dim\": %lld, \"max_position_embeddings\": "
            "%lld, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"hidden_act\": \"silu\", "
            "\"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 2, "
            "\"torch_dtype\": \"float32\"}\n",
            (long long)z->V, (long long)z->D, (long long)z->I, (long long)z->L, (long long)z->H,
            (long long)z->KV, (long long)z->hd, (long long)z->P);
  return dt__output_close(&out, f, false) ? DT_ERR_IO : DT_OK;
}

dt_status bench_models_write(const bench_model_size *z, const char *dir) {
  dt_status st = write_config(z, dir);
  if (st) return st;
  weights w = {.cap = 6 + 12 * (int)z->L};
  w.ts = calloc((size_t)w.cap, sizeof *w.ts);
  w.names = calloc((size_t)w.cap, sizeof *w.names);
  w.store = calloc((size_t)w.cap, sizeof *w.store);
  st = w.ts && w.names && w.store ? DT_OK : DT_ERR_NOMEM;
  if (z->gpt2)
    add_gpt2(&w, z, &st);
  else
    add_llama(&w, z, &st);
  char path[600];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  const char *keys[1] = {"format"}, *values[1] = {"pt"};
  if (!st) st = dt_safetensors_save(path, w.n, w.names, w.ts, 1, keys, values);
  for (int i = 0; i < w.n; i++) dt_tensor_release(w.ts[i]);
  free(w.ts), free(w.names), free(w.store);
  return st;
}
