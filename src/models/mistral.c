/*
 * MistralForCausalLM as a module tree with Hugging Face's FQNs: Llama's (llama.c) with
 * sliding-window attention: query i sees keys j with i - sliding_window < j <= i, in the fused
 * attention and in the KV cache (each layer keeps sliding_window - 1 positions). A null
 * sliding_window is Llama's full causal attention. The FQNs are the checkpoint's names; the
 * Megatron plan is Llama's.
 */
#include "core/core_impl.h"
#include "models/models_impl.h"

static dt_status mistral_build(dt_hf_model *m, const char *config_path) {
  dt_nn_block_options o = dt__hf_llama_block_options(&m->cfg);
  o.attention.sliding_window = m->cfg.sliding_window;
  return dt__hf_llama_tree(m, config_path, "MistralForCausalLM", &o, NULL);
}

const dt__hf_family dt__hf_mistral = {
    .arch = DT_HF_MISTRAL,
    .layers_field = "num_hidden_layers",
    .tensors_per_layer = 9, /* 2 norms and 7 linears */
    .build = mistral_build,
    .plan = dt__hf_llama_plan,
    .plan_n = DT__HF_LLAMA_PLAN_N,
    .to_hf = dt__hf_identity_to_hf,
};
