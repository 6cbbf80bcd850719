/*
 * Qwen3ForCausalLM as a module tree with Hugging Face's FQNs: Llama's (llama.c) with an
 * RMSNorm over each head of the queries and keys before the rotary embedding:
 *
 *   model.layers.N.self_attn.q_norm    RMSNorm [head_dim] (rms_norm_eps)
 *   model.layers.N.self_attn.k_norm    RMSNorm [head_dim]
 *
 * head_dim is config.json's own (not hidden_size / heads), the head tied or not. The FQNs are
 * the checkpoint's names; the Megatron plan is Llama's (the per-head norms are replicated: each
 * rank normalises the heads it holds).
 */
#include "core/core_impl.h"
#include "models/models_impl.h"

static dt_status qwen3_build(dt_hf_model *m, const char *config_path) {
  dt_nn_block_options o = dt__hf_llama_block_options(&m->cfg);
  o.attention.qk_norm_eps = m->cfg.norm_eps;
  return dt__hf_llama_tree(m, config_path, "Qwen3ForCausalLM", &o, NULL);
}

const dt__hf_family dt__hf_qwen3 = {
    .arch = DT_HF_QWEN3,
    .layers_field = "num_hidden_layers",
    .tensors_per_layer = 11, /* 4 norms and 7 linears */
    .build = qwen3_build,
    .plan = dt__hf_llama_plan,
    .plan_n = DT__HF_LLAMA_PLAN_N,
    .to_hf = dt__hf_identity_to_hf,
};
