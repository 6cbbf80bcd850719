/*
 * LlamaForCausalLM as a module tree with Hugging Face's FQNs:
 *
 *   model.embed_tokens                 Embedding [vocab, D]
 *   model.layers.N.input_layernorm     RMSNorm
 *   model.layers.N.self_attn           Attention: q_proj, k_proj, v_proj, o_proj (rotary)
 *   model.layers.N.post_attention_layernorm
 *   model.layers.N.mlp                 SwiGLU: gate_proj, up_proj, down_proj
 *   model.norm                         RMSNorm
 *   lm_head                            Linear [vocab, D] (absent when tied to the embedding)
 *
 * The FQNs are the checkpoint's names, so the state-dict adapter is the identity; the
 * Megatron plan is the table below.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "models/models_impl.h"

/* Megatron: q/k/v and gate/up colwise, o/down rowwise, the embedding vocabulary-parallel, the
 * head colwise (logits sharded over the vocabulary into the parallel cross-entropy); with
 * sequence parallelism the norms and the residual stream between them sharded over the
 * sequence. */
static const dt__hf_plan_row llama_plan[] = {
    {"model.embed_tokens", DT_TP_ROWWISE, .sp_out = true},
    {"model.layers.*.input_layernorm", DT_TP_SEQUENCE_PARALLEL, .sp_only = true},
    {"model.layers.*.self_attn.q_proj", DT_TP_COLWISE, .sp_in = true},
    {"model.layers.*.self_attn.k_proj", DT_TP_COLWISE, .sp_in = true},
    {"model.layers.*.self_attn.v_proj", DT_TP_COLWISE, .sp_in = true},
    {"model.layers.*.self_attn.o_proj", DT_TP_ROWWISE, .sp_out = true},
    {"model.layers.*.post_attention_layernorm", DT_TP_SEQUENCE_PARALLEL, .sp_only = true},
    {"model.layers.*.mlp.gate_proj", DT_TP_COLWISE, .sp_in = true},
    {"model.layers.*.mlp.up_proj", DT_TP_COLWISE, .sp_in = true},
    {"model.layers.*.mlp.down_proj", DT_TP_ROWWISE, .sp_out = true},
    {"model.norm", DT_TP_SEQUENCE_PARALLEL, .sp_only = true},
    {"lm_head", DT_TP_COLWISE, .sp_in = true}, /* last: left out when tied */
};

static void llama_to_hf(hf_param *p) {
  snprintf(p->file_name, sizeof p->file_name, "%s", p->fqn);
  snprintf(p->name, sizeof p->name, "%s", p->fqn);
  p->part = -1;
  p->transposed = false;
}

static dt_status llama_build(dt_hf_model *m, const char *config_path) {
  const dt_hf_config *c = &m->cfg;
  dt_status st = dt__hf_rope_init(m, config_path);
  if (st) return st;
  dt_module *root = NULL, *model = NULL, *part = NULL;
  st = dt_module_create("LlamaForCausalLM", dt__hf_lm_forward, m, &root);
  if (st) return st;
  m->root = root;
  st = dt_module_create("LlamaModel", NULL, NULL, &model);
  if (!st) st = dt_module_add_child(root, "model", model);
  if (!st) st = dt_nn_embedding(c->vocab_size, c->hidden_size, 0, &part);
  if (!st) st = dt_module_add_child(model, "embed_tokens", m->embed = part);
  dt_nn_block_options o = {
      .norm = DT_NN_NORM_RMS,
      .norm_eps = c->norm_eps,
      .attention = {.n_heads = c->num_heads,
                    .n_kv_heads = c->num_kv_heads,
                    .head_dim = c->head_dim,
                    .qkv_bias = c->attention_bias,
                    .out_bias = c->attention_bias,
                    .rope_inv_freq = m->rope_inv},
      .hidden = c->intermediate_size,
      .mlp = {.kind = DT_NN_MLP_SWIGLU, .bias = c->mlp_bias},
  };
  if (!st) st = dt__hf_add_blocks(m, model, "layers", &o, "self_attn");
  if (!st) st = dt_nn_rms_norm(c->hidden_size, c->norm_eps, &part);
  if (!st) st = dt_module_add_child(model, "norm", m->norm = part);
  if (!st && !c->tie_word_embeddings) {
    st = dt_nn_linear(c->hidden_size, c->vocab_size, false, 0, &part);
    if (!st) st = dt_module_add_child(root, "lm_head", m->head = part);
  }
  return st;
}

const dt__hf_family dt__hf_llama = {
    .arch = DT_HF_LLAMA,
    .layers_field = "num_hidden_layers",
    .tensors_per_layer = 9, /* 2 norms and 7 linears */
    .build = llama_build,
    .plan = llama_plan,
    .plan_n = (int)(sizeof llama_plan / sizeof llama_plan[0]),
    .to_hf = llama_to_hf,
};
