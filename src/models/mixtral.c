/*
 * The sparse mixture-of-experts families as module trees with Hugging Face's FQNs: Llama's
 * tree (llama.c) whose blocks' MLPs are MoEs (dt_nn_moe, transformer.h):
 *
 *   MixtralForCausalLM
 *     model.layers.N.block_sparse_moe.gate          router Linear [experts, D]
 *     model.layers.N.block_sparse_moe.experts.E     SwiGLU: w1 (gate), w3 (up), w2 (down)
 *   Qwen3MoeForCausalLM (Qwen3's q_norm / k_norm in every attention)
 *     model.layers.N.mlp.gate                       router Linear [experts, D]
 *     model.layers.N.mlp.experts.E                  SwiGLU: gate_proj, up_proj, down_proj
 *
 * The block is made here from its parts (the shared dt_nn_transformer_block has a dense MLP):
 * h = x + self_attn(input_layernorm(x)); out = h + moe(post_attention_layernorm(h)).
 *
 * On a mesh the routers and experts are local tensors every rank holds whole (keeps_local: the
 * plans leave them): the MoE runs on the whole batch, replicated over the mesh, and its output
 * goes back to the residual stream's placements. The Megatron plan covers the attention, the
 * norms, the embedding and the head (Llama's rows); FSDP shards everything but the experts.
 * So every rank computes every token's experts (no expert parallelism here: issue 38 item 3),
 * and the experts' gradients, made from the whole batch, agree on every rank.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "dtensor/ops.h"
#include "models/models_impl.h"

/* A MoE decoder block of the config's sizes: the MoE is child moe_name, its experts' SwiGLU
 * Linears named expert_names (gate, up, down). */
static dt_status moe_block(const dt_hf_model *m, const dt_nn_block_options *o, const char *moe_name,
                           const char *const expert_names[3], dt_module **out) {
  const dt_hf_config *c = &m->cfg;
  dt_module *b = NULL, *dense = NULL, *moe = NULL;
  dt_nn_moe_options mo = {.n_experts = c->num_experts,
                          .top_k = c->num_experts_per_tok,
                          .hidden = c->moe_intermediate_size,
                          .norm_topk_prob = c->norm_topk_prob,
                          .router_name = "gate",
                          .experts_name = "experts"};
  for (int i = 0; i < 3; i++) mo.expert_names[i] = expert_names[i];
  /* The decoder block with its MLP, the last child, replaced by the MoE. */
  dt_nn_block_options bo = *o;
  bo.hidden = 1;
  bo.names[3] = moe_name;
  dt_status st = dt_nn_transformer_block(c->hidden_size, &bo, &b);
  if (!st) st = dt_module_take_child(b, 3, &dense);
  dt_module_destroy(dense);
  if (!st) st = dt_nn_moe(c->hidden_size, &mo, &moe);
  if (!st) st = dt_module_add_child(b, moe_name, moe);
  if (st) {
    dt_module_destroy(b);
    return st;
  }
  *out = b;
  return DT_OK;
}

/* Llama's rows without the dense MLP's (the experts stay local), the LM head's last. */
static const dt__hf_plan_row moe_plan[] = {
    {"model.embed_tokens", DT_TP_ROWWISE, .sp_out = true},
    {"model.layers.*.input_layernorm", DT_TP_SEQUENCE_PARALLEL, .sp_only = true},
    {"model.layers.*.self_attn.q_proj", DT_TP_COLWISE, .sp_in = true},
    {"model.layers.*.self_attn.k_proj", DT_TP_COLWISE, .sp_in = true},
    {"model.layers.*.self_attn.v_proj", DT_TP_COLWISE, .sp_in = true},
    {"model.layers.*.self_attn.o_proj", DT_TP_ROWWISE, .sp_out = true},
    {"model.layers.*.post_attention_layernorm", DT_TP_SEQUENCE_PARALLEL, .sp_only = true},
    {"model.norm", DT_TP_SEQUENCE_PARALLEL, .sp_only = true},
    {"lm_head", DT_TP_COLWISE, .sp_in = true}, /* last: left out when tied */
};

/* Whether fqn (in the tree or in its block) has the segment `seg` followed by more. */
static bool under(const char *fqn, const char *seg) {
  size_t n = strlen(seg);
  for (const char *p = fqn; (p = strstr(p, seg)) != NULL; p += n)
    if ((p == fqn || p[-1] == '.') && p[n] == '.') return true;
  return false;
}

static const char *const mixtral_experts[3] = {"w1", "w3", "w2"};
static const char *const qwen3_moe_experts[3] = {"gate_proj", "up_proj", "down_proj"};

static dt_status mixtral_block(const dt_hf_model *m, const dt_nn_block_options *o,
                               dt_module **out) {
  return moe_block(m, o, "block_sparse_moe", mixtral_experts, out);
}

static dt_status qwen3_moe_block(const dt_hf_model *m, const dt_nn_block_options *o,
                                 dt_module **out) {
  return moe_block(m, o, "mlp", qwen3_moe_experts, out);
}

static bool mixtral_local(const char *fqn) { return under(fqn, "block_sparse_moe"); }
static bool qwen3_moe_local(const char *fqn) { return under(fqn, "mlp"); }

static dt_status mixtral_build(dt_hf_model *m, const char *config_path) {
  dt_nn_block_options o = dt__hf_llama_block_options(&m->cfg);
  o.attention.sliding_window = m->cfg.sliding_window;
  return dt__hf_llama_tree(m, config_path, "MixtralForCausalLM", &o, mixtral_block);
}

static dt_status qwen3_moe_build(dt_hf_model *m, const char *config_path) {
  dt_nn_block_options o = dt__hf_llama_block_options(&m->cfg);
  o.attention.qk_norm_eps = m->cfg.norm_eps;
  return dt__hf_llama_tree(m, config_path, "Qwen3MoeForCausalLM", &o, qwen3_moe_block);
}

const dt__hf_family dt__hf_mixtral = {
    .arch = DT_HF_MIXTRAL,
    .layers_field = "num_hidden_layers",
    .tensors_per_layer = 10, /* 2 norms, 4 attention Linears, the router, one expert's 3 */
    .build = mixtral_build,
    .plan = moe_plan,
    .plan_n = (int)(sizeof moe_plan / sizeof moe_plan[0]),
    .to_hf = dt__hf_identity_to_hf,
    .keeps_local = mixtral_local,
};

const dt__hf_family dt__hf_qwen3_moe = {
    .arch = DT_HF_QWEN3_MOE,
    .layers_field = "num_hidden_layers",
    .tensors_per_layer = 12, /* 4 norms, 4 attention Linears, the router, one expert's 3 */
    .build = qwen3_moe_build,
    .plan = moe_plan,
    .plan_n = (int)(sizeof moe_plan / sizeof moe_plan[0]),
    .to_hf = dt__hf_identity_to_hf,
    .keeps_local = qwen3_moe_local,
};
