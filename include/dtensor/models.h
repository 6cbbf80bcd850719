/*
 * libdtensor — real models: Hugging Face checkpoints of LlamaForCausalLM, GPT2LMHeadModel,
 * Qwen3ForCausalLM, MistralForCausalLM, MixtralForCausalLM and Qwen3MoeForCausalLM loaded
 * onto a device mesh (tensor parallel, fully sharded, both), run forward, generated
 * from with a KV cache, fine-tuned with autograd and AdamW, and saved back in Hugging Face's
 * layout. Token ids in and out; no tokenizer. docs/models.md is the guide.
 *
 * A model directory holds config.json and either model.safetensors or a sharded checkpoint
 * (model.safetensors.index.json naming the shard file of every tensor). Each rank reads only
 * the bytes of its own block of every parameter.
 *
 * The model is a module tree with Hugging Face's FQNs (src/models/llama.c, gpt2.c, qwen3.c,
 * mistral.c, mixtral.c; GPT-2's Conv1D weights held transposed as Linears), built, then
 * parallelized, then read. The MoE families' routers and experts are local tensors every rank
 * of a mesh holds whole (neither TP nor FSDP shards them; each rank runs the experts on the
 * whole batch); Qwen3's use_sliding_window, Qwen3-MoE's dense mlp_only_layers and Mixtral's
 * router_jitter_noise are refused (DT_ERR_UNSUPPORTED).
 *
 * Parallel plan (dt_hf_plan): mesh dims by name. On the tensor-parallel dim, Megatron's
 * layout (dt_parallel_tp_module with the architecture's table): q/k/v and gate/up (GPT-2:
 * c_attn's three parts, c_fc) colwise, o/down (c_proj) rowwise, the token embedding and the
 * LM head vocabulary-parallel (logits stay sharded over the vocabulary into the parallel
 * cross-entropy). Head counts need not divide the TP degree: shards follow torch.chunk over
 * the rows, and when a rank's rows do not hold whole heads the sharding propagation moves
 * what attention needs (more communication, same values). On the FSDP dim the tree is fully
 * sharded (dt_parallel_fsdp on the root: every module with parameters is a unit, each
 * parameter sharded on its first tensor dim the TP dim leaves alone, or replicated when it
 * has none; gathered for the unit's forward and freed after it, gathered again for its
 * backward, whose reduce-scatter gives the gradient's shard); the batch is split over that
 * dim.
 *
 * Ownership: the model owns its parameters; tensors returned through `dt_tensor **out` are
 * new references the caller releases.
 */
#ifndef DTENSOR_MODELS_H
#define DTENSOR_MODELS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtensor/core.h"
#include "dtensor/mesh.h"
#include "dtensor/nn.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_hf_arch {
  DT_HF_LLAMA = 1,     /* LlamaForCausalLM */
  DT_HF_GPT2 = 2,      /* GPT2LMHeadModel */
  DT_HF_QWEN3 = 3,     /* Qwen3ForCausalLM: Llama with per-head q/k RMSNorm */
  DT_HF_MISTRAL = 4,   /* MistralForCausalLM: Llama with sliding-window attention */
  DT_HF_MIXTRAL = 5,   /* MixtralForCausalLM: Llama-like attention, sparse MoE MLPs */
  DT_HF_QWEN3_MOE = 6, /* Qwen3MoeForCausalLM: Qwen3's attention, sparse MoE MLPs */
} dt_hf_arch;

/* The facts of config.json the model uses (GPT-2's n_embd, n_layer, ... under Llama's names). */
/* The most end-of-sequence ids config.json's eos_token_id list may hold. */
#define DT_HF_MAX_EOS 16

typedef struct dt_hf_config {
  dt_hf_arch arch;
  int64_t vocab_size;
  int64_t hidden_size;
  int64_t intermediate_size; /* GPT-2: n_inner, or 4 * n_embd when null */
  int64_t num_layers;
  int64_t num_heads;
  int64_t num_kv_heads; /* GPT-2: num_heads */
  int64_t head_dim;
  int64_t max_positions;
  double norm_eps; /* rms_norm_eps / layer_norm_epsilon */
  double rope_theta;
  /* rope_scaling / rope_parameters with rope_type "llama3" (0 factor: none). */
  double rope_factor;
  double rope_low_freq_factor;
  double rope_high_freq_factor;
  int64_t rope_original_max_positions;
  bool tie_word_embeddings;
  bool attention_bias;    /* Llama: q/k/v/o biases */
  bool mlp_bias;          /* Llama: gate/up/down biases */
  bool qk_norm;           /* Qwen3, Qwen3-MoE: RMSNorm over each head of q and k */
  int64_t sliding_window; /* Mistral: each query sees this many keys (itself included); 0: all */
  /* The sparse MoE MLPs (Mixtral, Qwen3-MoE; 0 experts elsewhere): num_local_experts (Qwen3-MoE:
   * num_experts), num_experts_per_tok, each expert's hidden size (Mixtral: intermediate_size,
   * Qwen3-MoE: moe_intermediate_size), the chosen weights renormalised (Mixtral always,
   * Qwen3-MoE: norm_topk_prob), router_aux_loss_coef as read (the loss does not add it). */
  int64_t num_experts;
  int64_t num_experts_per_tok;
  int64_t moe_intermediate_size;
  bool norm_topk_prob;
  double router_aux_loss_coef;
  int64_t bos_token_id; /* -1 when absent */
  int64_t eos_token_id; /* -1 when absent; the first of a list */
  /* Every end-of-sequence id: eos_token_id as a list (Llama 3 has several) or the one id. */
  int n_eos_token_ids;
  int64_t eos_token_ids[DT_HF_MAX_EOS];
} dt_hf_config;

/* Which mesh dims carry which parallelism, by the mesh's dim names; NULL: none. A zero plan
 * (or NULL) with a mesh replicates the model on every rank. */
typedef struct dt_hf_plan {
  const char *tp;   /* Megatron tensor parallelism */
  const char *fsdp; /* fully sharded data parallelism (batch split, parameters sharded) */
  /* With tp: Megatron's sequence parallelism. The norms and the residual stream between the
   * blocks are sharded over the sequence on the tp dim (Shard(1); torch.chunk sizes, a rank may
   * hold no positions); q/k/v, gate/up (GPT-2: c_attn's parts, c_fc) and the head all-gather
   * their input, o/down (c_proj) and the embedding reduce-scatter their output. The norms'
   * gradients come back Partial over tp (the optimizer step reduces them). Same values. */
  bool sequence_parallel;
} dt_hf_plan;

typedef struct dt_hf_model dt_hf_model;

/* Reads dir/config.json and the weights (dir/model.safetensors, or the files that
 * dir/model.safetensors.index.json names) onto `mesh` laid out by `plan` (mesh NULL: local
 * tensors, plan must be NULL or zero). Weights of any floating dtype become float32.
 * Collective over the mesh only in that every rank must call it; each rank reads only its
 * blocks. Errors: DT_ERR_INVALID (NULL dir or out; a plan naming a dim the mesh lacks or one
 * dim twice; sequence_parallel without tp), DT_ERR_IO (a missing or unreadable file, or config.json
 * or the index not a regular file: a FIFO is refused, not waited on; named), DT_ERR_UNSUPPORTED (an
 * architecture other than the six, a rope type other than default/llama3, an activation
 * other than SiLU / GELU-tanh: the message names config.json and the value; built without
 * cJSON), DT_ERR_INVALID (a config field missing or out of range (an integer must lie in
 * [0, 4e15], heads x head_dim too; rope_theta must be > 0 and finite in float32, where the
 * rotary tables are computed, llama3's factor, low_freq_factor and high_freq_factor positive
 * normal float32 values (high > low), every rotary angle up to max_position_embeddings finite,
 * and the norm epsilon > 0; more layers than the checkpoint holds tensors for; an eos_token_id list
 * longer than DT_HF_MAX_EOS; a bos_token_id, an eos_token_id, or an entry of a list of them,
 * outside [0, vocab_size): the message names the field, the value and vocab_size), a tensor missing
 * from the checkpoint, or with a shape that disagrees with config.json: the message names the file,
 * the tensor and both shapes; config.json or the index with a UTF-8 BOM, text after the
 * JSON value, or a key twice in one object (Python keeps the last, so both readers would not
 * agree): the message names the file and the key; strings of the files are quoted escaped),
 * the errors of dt_safetensors_open. */
DT_API dt_status dt_hf_model_load(const char *dir, dt_mesh *mesh, const dt_hf_plan *plan,
                                  dt_hf_model **out);

/* Frees the model and its parameters. NULL is ignored. */
DT_API void dt_hf_model_destroy(dt_hf_model *model);

/* The model's configuration (borrowed; valid while the model lives), NULL for NULL. */
DT_API const dt_hf_config *dt_hf_model_config(const dt_hf_model *model);

/* The mesh the model lives on (NULL: local). */
DT_API dt_mesh *dt_hf_model_mesh(const dt_hf_model *model);
/* The model's module tree (Hugging Face's FQNs; borrowed, lives with the model; NULL for NULL):
 * for dt_module_visit_tensors, dt_module_set_checkpoint on its blocks, and the like. The loader
 * has already applied the plan's TP and FSDP to it; wrapping it again is the caller's risk. */
DT_API dt_module *dt_hf_model_module(dt_hf_model *model);

/* The parameters that are trained (leaves that require grad after
 * dt_hf_model_set_trainable), in the module tree's order: count, and entry i with its Hugging
 * Face name (GPT-2's c_attn is held as three parameters, named "<prefix>.c_attn.weight#q",
 * "#k", "#v", and the same for its bias; GPT-2's Conv1D weights are held transposed, [out, in];
 * a tied LM head is the embedding). Borrowed: the tensor the tree holds between forwards. */
DT_API int dt_hf_model_param_count(const dt_hf_model *model);
DT_API dt_tensor *dt_hf_model_param(const dt_hf_model *model, int i, const char **name);

/* Marks every parameter as a leaf that requires grad (true) or not. Errors: DT_ERR_INVALID. */
DT_API dt_status dt_hf_model_set_trainable(dt_hf_model *model, bool trainable);

/* A KV cache for generation: per layer the keys and values of the positions seen so far
 * ([batch, kv_heads, positions, head_dim], sharded by heads under TP). */
typedef struct dt_hf_kv_cache dt_hf_kv_cache;
/* Makes an empty cache (no positions) for model, one per batch being generated; on a mesh
 * every rank makes its own (it will hold that rank's shards; not collective). Pass it to
 * dt_hf_model_forward, which extends it (dt_hf_generate makes its own). The caller owns *out:
 * dt_hf_kv_cache_destroy, on the threads backend before the rank function returns (its
 * tensors lie on the mesh). Errors: DT_ERR_INVALID (NULL model or out), DT_ERR_NOMEM. */
DT_API dt_status dt_hf_kv_cache_create(const dt_hf_model *model, dt_hf_kv_cache **out);
/* Frees the cache and the keys and values it holds. NULL is ignored. */
DT_API void dt_hf_kv_cache_destroy(dt_hf_kv_cache *cache);
/* Positions the cache holds (0 for NULL). */
DT_API int64_t dt_hf_kv_cache_length(const dt_hf_kv_cache *cache);

/* Logits [B, T, vocab] of input_ids [B, T] (int64, a local tensor every rank passes the same,
 * or a distributed one): the positions continue those of `cache` (NULL: no cache, positions
 * from 0), and the cache, when given, is extended by the T new positions. With a mesh the
 * logits are distributed (vocabulary on the TP dim, batch on the FSDP dim): dt_dist_full_tensor
 * gathers them. Recorded by autograd when parameters require grad.
 * Errors: DT_ERR_INVALID (NULL, input not 2-D int64, a token outside [0, vocab), positions
 * past max_positions), the errors of the ops. */
DT_API dt_status dt_hf_model_forward(dt_hf_model *model, dt_tensor *input_ids,
                                     dt_hf_kv_cache *cache, dt_tensor **logits);

/* The causal-LM loss of input_ids [B, T] (B >= 1, T >= 2): cross-entropy of the logits at positions
 * 0..T-2 against the ids at 1..T-1, the mean over the B * (T - 1) predictions (transformers'
 * labels = input_ids). A 0-d tensor (distributed with a mesh). Errors: as forward, and
 * DT_ERR_INVALID for B = 0 or T < 2 (no target positions: the mean would be NaN). */
DT_API dt_status dt_hf_model_loss(dt_hf_model *model, dt_tensor *input_ids, dt_tensor **loss);

/* Sampling of dt_hf_generate. Zero-initialised: greedy. */
typedef struct dt_hf_sampling {
  double temperature; /* > 0 samples: logits / temperature; 0: greedy (argmax) */
  int64_t top_k;      /* > 0: only the k most likely tokens; 0: all */
  double top_p;       /* in (0, 1): the smallest set whose probability reaches p; 0 or 1: all */
  uint64_t seed;      /* the draws come from Philox (seed, step): the same on every rank and mesh */
  /* The id (in [0, vocab_size)) after which generation stops; -1: none. Id 0 counts only with
   * use_stop_token, so that a zero-initialised struct has no stop token; an id above 0 counts
   * either way. Values below -1 or not below vocab_size, and use_stop_token with -1, are refused
   * (DT_ERR_INVALID). With use_eos, generation stops at either. */
  int64_t stop_token;
  bool use_stop_token; /* stop_token is set, 0 included */
  bool use_eos;        /* stop after any of config's eos_token_ids (a list: any of them) */
} dt_hf_sampling;

/* Generates max_new tokens after prompt (n_prompt ids) with a KV cache: one forward over the
 * prompt (prefill), then one per new token (decode). out receives n_prompt + generated ids
 * (capacity at least n_prompt + max_new), *n_out their count. Every rank draws the same token.
 * prefill_s / decode_s (may be NULL) receive the seconds spent in each phase. sampling may be
 * NULL: greedy. out's capacity is the caller's to provide (nothing here can check it).
 * Errors: DT_ERR_INVALID (NULL, n_prompt < 1, max_new < 0, bad sampling values (a stop_token
 * below -1 or not below vocab_size, use_stop_token with stop_token -1: the message names the
 * field and value), ids outside
 * the vocabulary, a total length past max_positions, NaN or infinite logits to sample from,
 * NaN logits for greedy decoding),
 * the errors of the forward. */
DT_API dt_status dt_hf_generate(dt_hf_model *model, const int64_t *prompt, int64_t n_prompt,
                                int64_t max_new, const dt_hf_sampling *sampling, int64_t *out,
                                int64_t *n_out, double *prefill_s, double *decode_s);

/* Writes the model into directory dir (created if absent) in Hugging Face's layout:
 * config.json (the loaded config with the fields rewritten from the model) and
 * model.safetensors with transformers' tensor names (GPT-2's c_attn joined again; a tied
 * head not written). Distributed parameters are gathered (collective); the rank at
 * coordinate 0 of the mesh writes, model.safetensors then config.json, each to a temporary
 * fsynced and renamed in place (a failure leaves the old files whole; a symbolic link at
 * either name is replaced, never followed; mode 0666 less the umask), and every rank returns
 * its verdict.
 * Errors: DT_ERR_INVALID (NULL), DT_ERR_IO (naming the path), the errors of the gather and of
 * dt_safetensors_save. */
DT_API dt_status dt_hf_model_save(const dt_hf_model *model, const char *dir);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_MODELS_H */
