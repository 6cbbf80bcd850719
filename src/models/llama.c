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
const dt__hf_plan_row dt__hf_llama_plan[DT__HF_LLAMA_PLAN_N] = {
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

void dt__hf_identity_to_hf(hf_param *p) {
  snprintf(p->file_name, sizeof p->file_name, "%s", p->fqn);
  snprintf(p->name, sizeof p->name, "%s", p->fqn);
  p->part = -1;
  p->transposed = false;
}

dt_nn_block_options dt__hf_llama_block_options(const dt_hf_config *c) {
  return (dt_nn_block_options){
      .norm = DT_NN_NORM_RMS,
      .norm_eps = c->norm_eps,
      .attention = {.n_heads = c->num_heads,
                    .n_kv_heads = c->num_kv_heads,
                    .head_dim = c->head_dim,
                    .qkv_bias = c->attention_bias,
                    .out_bias = c->attention_bias},
      .hidden = c->intermediate_size,
      .mlp = {.kind = DT_NN_MLP_SWIGLU, .bias = c->mlp_bias},
  };
}

dt_status dt__hf_llama_tree(dt_hf_model *m, const char *config_path, const char *type,
                            dt_nn_block_options *o, dt__hf_block_maker make) {
  const dt_hf_config *c = &m->cfg;
  dt_status st = dt__hf_rope_init(m, config_path);
  if (st) return st;
  dt_module *root = NULL, *model = NULL, *part = NULL;
  st = dt_module_create(type, dt__hf_lm_forward, m, &root);
  if (st) return st;
  m->root = root;
  /* "LlamaForCausalLM" holds a "LlamaModel", as in transformers. */
  char inner[64];
  const char *suffix = strstr(type, "ForCausalLM");
  snprintf(inner, sizeof inner, "%.*sModel", suffix ? (int)(suffix - type) : (int)strlen(type),
           type);
  st = dt_module_create(inner, NULL, NULL, &model);
  if (!st) st = dt_module_add_child(root, "model", model);
  if (!st) st = dt_nn_embedding(c->vocab_size, c->hidden_size, 0, &part);
  if (!st) st = dt_module_add_child(model, "embed_tokens", m->embed = part);
  o->attention.rope_inv_freq = m->rope_inv;
  if (!st) st = dt__hf_add_blocks(m, model, "layers", o, "self_attn", make);
  if (!st) st = dt_nn_rms_norm(c->hidden_size, c->norm_eps, &part);
  if (!st) st = dt_module_add_child(model, "norm", m->norm = part);
  if (!st && !c->tie_word_embeddings) {
    st = dt_nn_linear(c->hidden_size, c->vocab_size, false, 0, &part);
    if (!st) st = dt_module_add_child(root, "lm_head", m->head = part);
  }
  return st;
}

static dt_status llama_build(dt_hf_model *m, const char *config_path) {
  dt_nn_block_options o = dt__hf_llama_block_options(&m->cfg);
  return dt__hf_llama_tree(m, config_path, "LlamaForCausalLM", &o, NULL);
}

const dt__hf_family dt__hf_llama = {
    .arch = DT_HF_LLAMA,
    .layers_field = "num_hidden_layers",
    .tensors_per_layer = 9, /* 2 norms and 7 linears */
    .build = llama_build,
    .plan = dt__hf_llama_plan,
    .plan_n = DT__HF_LLAMA_PLAN_N,
    .to_hf = dt__hf_identity_to_hf,
};
