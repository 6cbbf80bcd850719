/*
 * libdtensor — transformer modules: the parts decoder-only language models are made of, as
 * modules (dtensor/nn.h) with PyTorch's and Hugging Face's names, so that a model is a plain
 * module tree every parallel wrapper applies to (dt_parallel_tp_module, dt_parallel_fsdp,
 * dt_module_set_checkpoint).
 *
 *   RMSNorm(dim, eps)        weight [dim] (ones): x * rsqrt(mean(x^2) + eps) * weight
 *   MLP (SwiGLU)             gate_proj, up_proj [hidden, dim], down_proj [dim, hidden]:
 *                            down(silu(gate(x)) * up(x))
 *   MLP (GELU)               c_fc [hidden, dim], c_proj [dim, hidden]: proj(gelu(fc(x)))
 *   Attention                q_proj [H * hd, dim], k_proj / v_proj [Hk * hd, dim], o_proj
 *                            [dim, H * hd]; grouped-query heads (H a multiple of Hk), rotary
 *                            embeddings, causal or given masks, a KV cache
 *   TransformerBlock         pre-norm: x + attn(norm1(x)), then + mlp(norm2(.))
 *
 * Inputs are [batch, seq, dim]. Under tensor parallelism (colwise q/k/v and gate/up, rowwise o
 * and down, PyTorch's default local outputs) an Attention sees this rank's heads: the head
 * counts are read off the projected tensors (their features / head_dim), so the same module
 * runs whole or sharded; the heads must then split evenly.
 *
 * Temporaries: each forward releases what it made before returning (dt_tensor_list,
 * dtensor/tensor.h).
 */
#ifndef DTENSOR_TRANSFORMER_H
#define DTENSOR_TRANSFORMER_H

#include <stdbool.h>
#include <stdint.h>

#include "dtensor/core.h"
#include "dtensor/nn.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* RMSNorm over the last dim (PyTorch's nn.RMSNorm, Hugging Face's LlamaRMSNorm): one parameter
 * "weight" [dim], ones. Errors: DT_ERR_INVALID (NULL out, dim < 1, eps not finite or <= 0),
 * DT_ERR_NOMEM. */
DT_API dt_status dt_nn_rms_norm(int64_t dim, double eps, dt_module **out);

typedef enum dt_nn_mlp_kind {
  DT_NN_MLP_SWIGLU = 0,    /* Llama, Mistral, Qwen: down(silu(gate(x)) * up(x)) */
  DT_NN_MLP_GELU = 1,      /* proj(gelu(fc(x))), the exact erf GELU */
  DT_NN_MLP_GELU_TANH = 2, /* GPT-2's "gelu_new": the tanh approximation */
} dt_nn_mlp_kind;

/* Options of dt_nn_transformer_mlp. Zero-initialised: SwiGLU, no biases, seed 0, the default
 * names. */
typedef struct dt_nn_mlp_options {
  dt_nn_mlp_kind kind;
  bool bias; /* every Linear has a bias */
  uint64_t seed;
  /* Child names; NULL entries take the defaults: SwiGLU "gate_proj", "up_proj", "down_proj";
   * GELU [0] "c_fc", [1] "c_proj" ([2] unused). */
  const char *names[3];
} dt_nn_mlp_options;

/* A transformer MLP of type "MLP": dim -> hidden -> dim. options may be NULL (defaults).
 * Errors: DT_ERR_INVALID (NULL out, sizes < 1, an unknown kind, a bad or repeated name),
 * DT_ERR_NOMEM. */
DT_API dt_status dt_nn_transformer_mlp(int64_t dim, int64_t hidden,
                                       const dt_nn_mlp_options *options, dt_module **out);

/* A KV cache: per layer the keys and values of the positions seen so far
 * ([batch, kv_heads, positions, head_dim] as the attention of that layer holds them: this
 * rank's heads under TP). Attention forwards append to a pending copy; dt_nn_kv_cache_commit
 * makes the appended positions part of the cache and dt_nn_kv_cache_discard drops them, so a
 * model forward that fails at any op leaves the cache as it was. */
typedef struct dt_nn_kv_cache dt_nn_kv_cache;

/* An empty cache of n_layers layers. The caller owns *out (dt_nn_kv_cache_destroy).
 * Errors: DT_ERR_INVALID (NULL out, n_layers < 1), DT_ERR_NOMEM. */
DT_API dt_status dt_nn_kv_cache_create(int n_layers, dt_nn_kv_cache **out);
/* Frees the cache and the tensors it holds. NULL is ignored. */
DT_API void dt_nn_kv_cache_destroy(dt_nn_kv_cache *cache);
/* Committed positions (0 for NULL). */
DT_API int64_t dt_nn_kv_cache_length(const dt_nn_kv_cache *cache);
/* Committed positions layer `layer` keeps in memory: the length, or less for an attention with
 * a sliding window (window - 1). 0 for NULL or a layer outside the cache. */
DT_API int64_t dt_nn_kv_cache_held(const dt_nn_kv_cache *cache, int layer);
/* Layers of the cache (0 for NULL). */
DT_API int dt_nn_kv_cache_layers(const dt_nn_kv_cache *cache);
/* Makes the positions every layer appended since the last commit or discard part of the cache.
 * Errors: DT_ERR_INVALID (NULL cache; layers that appended different numbers of positions, or
 * some layers and not others: the pending positions are then discarded). */
DT_API dt_status dt_nn_kv_cache_commit(dt_nn_kv_cache *cache);
/* Drops what was appended since the last commit. NULL is ignored. */
DT_API void dt_nn_kv_cache_discard(dt_nn_kv_cache *cache);

/* Options of dt_nn_attention. n_heads is required; the rest zero-initialised means: as many kv
 * heads as heads, head_dim = dim / n_heads, no biases, no rotary embedding, seed 0. */
typedef struct dt_nn_attention_options {
  int64_t n_heads;
  int64_t n_kv_heads; /* 0: n_heads; must divide n_heads */
  int64_t head_dim;   /* 0: dim / n_heads (which must then divide evenly) */
  bool qkv_bias;      /* q_proj, k_proj, v_proj have biases (GPT-2, Qwen2) */
  bool out_bias;      /* o_proj has a bias (GPT-2) */
  /* Rotary embeddings (Llama's rotate-half layout) over the whole head: rope_theta > 0 gives
   * the inverse frequencies theta^(-2i / head_dim) in float32; rope_inv_freq (may be NULL;
   * float32 [head_dim / 2], copied) gives them directly (Llama 3's scaled ones) and wins.
   * Neither: no rotary embedding (GPT-2 adds learned positions before the blocks). */
  double rope_theta;
  dt_tensor *rope_inv_freq;
  /* > 0: RMSNorm over each head of the queries and keys before the rotary embedding (Qwen3's
   * q_norm and k_norm, weights [head_dim]) with this epsilon; 0: none. */
  double qk_norm_eps;
  /* > 0: sliding-window attention (Mistral): query i sees keys j with i - window < j <= i, and
   * a KV cache keeps only the last window - 1 positions of this layer (all a later query can
   * see besides its own); 0: every earlier key. */
  int64_t sliding_window;
  uint64_t seed;
  /* Child names; NULL entries take "q_proj", "k_proj", "v_proj", "o_proj", "q_norm",
   * "k_norm" (the last two only with qk_norm_eps). */
  const char *names[6];
} dt_nn_attention_options;

/* Multi-head attention of type "Attention" over dt_scaled_dot_product_attention (fused; the kv
 * heads are read in place, never repeated). Alone (dt_module_forward) it is causal over its
 * input, positions from 0, without a cache; dt_nn_attention_set_context gives it a cache, a
 * first position and a mask. Errors: DT_ERR_INVALID (NULL out or options, dim or n_heads < 1,
 * kv heads not dividing heads, a head_dim that does not fit, an odd head_dim with rotary, a
 * rope_inv_freq not float32 [head_dim / 2], rope_theta or qk_norm_eps not finite or < 0, a
 * negative sliding_window), DT_ERR_NOMEM. */
DT_API dt_status dt_nn_attention(int64_t dim, const dt_nn_attention_options *options,
                                 dt_module **out);

/* Where one forward of an Attention stands. Zero-initialised: causal, positions from 0, no
 * cache. */
typedef struct dt_nn_attention_context {
  /* The cache and this attention's layer in it: the forward attends to the layer's committed
   * and pending keys/values followed by its own, and appends its own as pending (commit after
   * the whole model's forward). The first position is then the cache's length plus what this
   * layer has pending. */
  dt_nn_kv_cache *cache;
  int layer;
  /* Positions of the first query without a cache (a chunk after positions held elsewhere). */
  int64_t position;
  /* NULL: causal (query i sees the keys up to its own position). Else bool (true: the pair
   * takes part) or of the queries' dtype (added to the scores), broadcasting to
   * [batch, heads, queries, keys], used instead: padding masks. */
  dt_tensor *mask;
} dt_nn_attention_context;

/* Sets the context the Attention's next forwards run in (copied; the mask is retained until
 * replaced). NULL restores the default. The cache must outlive the forwards that use it.
 * Errors: DT_ERR_INVALID (NULL attention or not an Attention, layer outside the cache, a
 * negative position). */
DT_API dt_status dt_nn_attention_set_context(dt_module *attention,
                                             const dt_nn_attention_context *context);

/* Options of dt_nn_moe: a sparse mixture-of-experts MLP (Mixtral, Qwen3-MoE). n_experts,
 * top_k and hidden are required; the rest zero-initialised means: the chosen weights not
 * renormalised, no auxiliary losses, Hugging Face Qwen3-MoE's names. */
typedef struct dt_nn_moe_options {
  int64_t n_experts; /* >= 1 */
  int64_t top_k;     /* 1..n_experts */
  int64_t hidden;    /* each expert's hidden size */
  /* Renormalise the top_k softmax weights of each token to sum to 1 (Mixtral always does;
   * Qwen3-MoE's norm_topk_prob). */
  bool norm_topk_prob;
  /* > 0: the load-balancing loss (Switch Transformer's, as transformers computes it for
   * Mixtral: n_experts * sum_e f_e P_e, f_e the share of the token-slot assignments that go to
   * expert e, P_e the mean router probability of e) times this coefficient, and the router
   * z-loss (the mean over tokens of logsumexp(router logits)^2) times router_z_loss_coef, summed
   * into the module's auxiliary loss (dt_nn_moe_aux_loss). */
  double router_aux_loss_coef;
  double router_z_loss_coef;
  uint64_t seed;
  /* The router Linear [n_experts, dim] without bias (NULL: "gate"), the ModuleList of experts
   * (NULL: "experts", children "0", "1", ...), and each expert's SwiGLU MLP (its names: NULL
   * entries "gate_proj", "up_proj", "down_proj"; Mixtral's are "w1", "w3", "w2"). */
  const char *router_name, *experts_name;
  const char *expert_names[3];
} dt_nn_moe_options;

/* A sparse MoE MLP of type "MoE" on [batch, seq, dim] (or [tokens, dim]): per token the router's
 * softmax over the experts (in float32; float64 inputs in float64), its top_k experts (ties: the
 * lower expert index first), their weights (renormalised with norm_topk_prob), and the weighted sum
 * of those experts' outputs. The tokens are permuted into expert order (one gather), each expert
 * with tokens runs one SwiGLU on all of its tokens (an expert that received none costs nothing),
 * and the results are permuted back and summed per token; everything is recorded by autograd
 * (router, experts, input). A distributed input (the residual stream of a TP or FSDP model whose
 * experts every rank holds) runs whole: made Replicate, through the MoE on every rank, and put
 * back to its placements. Errors: DT_ERR_INVALID (NULL out or options, sizes < 1, top_k outside
 * 1..n_experts, coefficients not finite or < 0, bad names), DT_ERR_NOMEM. */
DT_API dt_status dt_nn_moe(int64_t dim, const dt_nn_moe_options *options, dt_module **out);

/* The auxiliary loss of moe's last forward (a 0-d float32 tensor, recorded by autograd: add it to
 * the training loss), or *out NULL when the options ask for none. The caller owns *out.
 * Errors: DT_ERR_INVALID (NULL out, moe not a MoE module, no forward yet). */
DT_API dt_status dt_nn_moe_aux_loss(dt_module *moe, dt_tensor **out);

/* How many token-slot assignments this rank's tokens sent to each expert in moe's last forward
 * (under expert parallelism too: this rank's routing, not what its own experts received): counts
 * has n_experts entries (at most n). Returns the number written; -1 for a module that is not a MoE
 * or before any forward. */
DT_API int64_t dt_nn_moe_expert_counts(const dt_module *moe, int64_t *counts, int64_t n);

/* The norm of a block. */
typedef enum dt_nn_norm_kind {
  DT_NN_NORM_RMS = 0,   /* RMSNorm (Llama) */
  DT_NN_NORM_LAYER = 1, /* LayerNorm with bias (GPT-2) */
} dt_nn_norm_kind;

/* Options of dt_nn_transformer_block. */
typedef struct dt_nn_block_options {
  dt_nn_norm_kind norm;
  double norm_eps; /* > 0 */
  dt_nn_attention_options attention;
  int64_t hidden; /* the MLP's hidden size */
  dt_nn_mlp_options mlp;
  /* Child names; NULL entries take Hugging Face Llama's "input_layernorm", "self_attn",
   * "post_attention_layernorm", "mlp" (GPT-2's are "ln_1", "attn", "ln_2", "mlp"). */
  const char *names[4];
} dt_nn_block_options;

/* A pre-norm decoder block of type "TransformerBlock": h = x + attn(norm1(x)); out = h +
 * mlp(norm2(h)). The forward takes its children by position (0..3), so the MLP may be replaced:
 * dt_module_take_child(block, 3, &mlp), then dt_module_add_child(block, name, moe) gives a
 * MoE block (models/mixtral.c does so). Its Attention is the child names[1] (dt_module_find).
 * Errors: those of the parts, DT_ERR_INVALID (NULL out or options, norm_eps not finite or <= 0,
 * hidden < 1). */
DT_API dt_status dt_nn_transformer_block(int64_t dim, const dt_nn_block_options *options,
                                         dt_module **out);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_TRANSFORMER_H */
