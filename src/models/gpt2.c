/*
 * GPT2LMHeadModel as a module tree with Hugging Face's FQNs:
 *
 *   transformer.wte, transformer.wpe   Embedding [vocab, D], [positions, D]
 *   transformer.h.N.ln_1, ln_2         LayerNorm
 *   transformer.h.N.attn               Attention: q_proj, k_proj, v_proj, c_proj (biases)
 *   transformer.h.N.mlp                GELU-tanh: c_fc, c_proj
 *   transformer.ln_f                   LayerNorm
 *   lm_head                            Linear (absent when tied, GPT-2's default)
 *
 * The state-dict adapter: GPT-2's Conv1D weights are [in, out], the tree's Linears [out, in]
 * (transposed on load and save), and the fused c_attn [D, 3D] holds q, k and v as thirds of
 * its last dim.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "models/models_impl.h"

/* Megatron, as Llama's (llama.c): the c_attn parts and c_fc colwise, the c_projs rowwise, the
 * token embedding vocabulary-parallel; the positions replicated. */
static const dt__hf_plan_row gpt2_plan[] = {
    {"transformer.wte", DT_TP_ROWWISE, .sp_out = true},
    {"transformer.h.*.ln_1", DT_TP_SEQUENCE_PARALLEL, .sp_only = true},
    {"transformer.h.*.attn.q_proj", DT_TP_COLWISE, .sp_in = true},
    {"transformer.h.*.attn.k_proj", DT_TP_COLWISE, .sp_in = true},
    {"transformer.h.*.attn.v_proj", DT_TP_COLWISE, .sp_in = true},
    {"transformer.h.*.attn.c_proj", DT_TP_ROWWISE, .sp_out = true},
    {"transformer.h.*.ln_2", DT_TP_SEQUENCE_PARALLEL, .sp_only = true},
    {"transformer.h.*.mlp.c_fc", DT_TP_COLWISE, .sp_in = true},
    {"transformer.h.*.mlp.c_proj", DT_TP_ROWWISE, .sp_out = true},
    {"transformer.ln_f", DT_TP_SEQUENCE_PARALLEL, .sp_only = true},
    {"lm_head", DT_TP_COLWISE, .sp_in = true}, /* last: left out when tied */
};

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static void gpt2_to_hf(hf_param *p) {
  snprintf(p->file_name, sizeof p->file_name, "%s", p->fqn);
  p->part = -1;
  bool weight = ends_with(p->fqn, ".weight");
  /* "...attn.q_proj.weight" -> "...attn.c_attn.weight", part 0. */
  const char *attn = strstr(p->fqn, ".attn.");
  if (attn && strlen(attn) > 7 && attn[7] == '_' && strchr("qkv", attn[6]) &&
      !strncmp(attn + 8, "proj.", 5)) {
    size_t pre = (size_t)(attn - p->fqn) + 6;
    snprintf(p->file_name, sizeof p->file_name, "%.*sc_attn%s", (int)pre, p->fqn, attn + 12);
    p->part = (int)(strchr("qkv", attn[6]) - "qkv");
  }
  p->transposed =
      weight && strncmp(p->fqn, "transformer.h.", 14) == 0 &&
      (p->part >= 0 || ends_with(p->fqn, ".c_proj.weight") || ends_with(p->fqn, ".c_fc.weight"));
  if (p->part >= 0)
    snprintf(p->name, sizeof p->name, "%s#%c", p->file_name, "qkv"[p->part]);
  else
    snprintf(p->name, sizeof p->name, "%s", p->file_name);
}

static dt_status gpt2_build(dt_hf_model *m, const char *config_path) {
  (void)config_path;
  const dt_hf_config *c = &m->cfg;
  dt_module *root = NULL, *tr = NULL, *part = NULL;
  dt_status st = dt_module_create("GPT2LMHeadModel", dt__hf_lm_forward, m, &root);
  if (st) return st;
  m->root = root;
  st = dt_module_create("GPT2Model", NULL, NULL, &tr);
  if (!st) st = dt_module_add_child(root, "transformer", tr);
  if (!st) st = dt_nn_embedding(c->vocab_size, c->hidden_size, 0, &part);
  if (!st) st = dt_module_add_child(tr, "wte", m->embed = part);
  if (!st) st = dt_nn_embedding(c->max_positions, c->hidden_size, 1, &part);
  if (!st) st = dt_module_add_child(tr, "wpe", m->pos = part);
  dt_nn_block_options o = {
      .norm = DT_NN_NORM_LAYER,
      .norm_eps = c->norm_eps,
      .attention = {.n_heads = c->num_heads,
                    .head_dim = c->head_dim,
                    .qkv_bias = true,
                    .out_bias = true,
                    .names = {"q_proj", "k_proj", "v_proj", "c_proj"}},
      .hidden = c->intermediate_size,
      .mlp = {.kind = DT_NN_MLP_GELU_TANH, .bias = true, .names = {"c_fc", "c_proj"}},
      .names = {"ln_1", "attn", "ln_2", "mlp"},
  };
  if (!st) st = dt__hf_add_blocks(m, tr, "h", &o, "attn", NULL);
  if (!st) st = dt_nn_layer_norm(c->hidden_size, c->norm_eps, &part);
  if (!st) st = dt_module_add_child(tr, "ln_f", m->norm = part);
  if (!st && !c->tie_word_embeddings) {
    st = dt_nn_linear(c->hidden_size, c->vocab_size, false, 0, &part);
    if (!st) st = dt_module_add_child(root, "lm_head", m->head = part);
  }
  return st;
}

const dt__hf_family dt__hf_gpt2 = {
    .arch = DT_HF_GPT2,
    .layers_field = "n_layer",
    .tensors_per_layer = 12, /* c_attn counted once */
    .build = gpt2_build,
    .plan = gpt2_plan,
    .plan_n = (int)(sizeof gpt2_plan / sizeof gpt2_plan[0]),
    .to_hf = gpt2_to_hf,
};
