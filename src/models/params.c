/*
 * The parameter table of the two architectures (Hugging Face names, shapes from config.json,
 * the tensor-parallel split of each) and the placements the plan gives each parameter.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "models/models_impl.h"

typedef struct table_builder {
  dt_hf_model *m;
  int capacity;
} table_builder;

/* Adds parameter `name` (printf-style prefix + suffix) and returns its index, or -1 when the
 * table is full (an error is set). tp_dim: the tensor dim the TP plan shards (-1: none). */
static int add(table_builder *b, const char *prefix, const char *suffix, int ndim, int64_t d0,
               int64_t d1, int tp_dim, int part) {
  dt_hf_model *m = b->m;
  if (m->n_params >= b->capacity) {
    dt__error(DT_ERR_INVALID, "dt_hf_model_load: more than %d parameters", b->capacity);
    return -1;
  }
  hf_param *p = &m->params[m->n_params];
  memset(p, 0, sizeof *p);
  snprintf(p->file_name, sizeof p->file_name, "%s%s", prefix, suffix);
  size_t len = strlen(p->file_name);
  memcpy(p->name, p->file_name, len + 1);
  if (part >= 0 && len + 2 < sizeof p->name) {
    p->name[len] = '#';
    p->name[len + 1] = "qkv"[part];
    p->name[len + 2] = '\0';
  }
  p->ndim = ndim;
  p->shape[0] = d0;
  p->shape[1] = d1;
  p->part = part;
  p->tp_dim = tp_dim;
  return m->n_params++;
}

/* One transformer block's parameters being added: their names start with `prefix`, their
 * indexes go to the block's row of m->layer_index. */
typedef struct layer_builder {
  table_builder *b;
  const char *prefix;
  int *index;
} layer_builder;

/* Adds "<prefix><name>" as the block's parameter `slot` (see add); false on failure (error
 * set). */
static bool layer_add(layer_builder *l, int slot, const char *name, int ndim, int64_t d0,
                      int64_t d1, int tp_dim, int part) {
  l->index[slot] = add(l->b, l->prefix, name, ndim, d0, d1, tp_dim, part);
  return l->index[slot] >= 0;
}

/* An nn.Linear of a block: "<name>.weight" [out, in] and "<name>.bias" [out]. */
typedef struct linear_param {
  int weight_slot, bias_slot;
  const char *name;
  int64_t out, in;
  bool rowwise; /* the TP plan shards the weight's dim 1 (and not the bias), else dim 0 (and
                   the bias) */
} linear_param;

/* Adds the weights of n linears, then, when the config has them, their biases: the order of
 * the checkpoints' tensors. */
static bool layer_add_linears(layer_builder *l, int n, const linear_param *p, bool bias) {
  char name[64];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "%s.weight", p[i].name);
    if (!layer_add(l, p[i].weight_slot, name, 2, p[i].out, p[i].in, p[i].rowwise ? 1 : 0, -1))
      return false;
  }
  for (int i = 0; bias && i < n; i++) {
    snprintf(name, sizeof name, "%s.bias", p[i].name);
    if (!layer_add(l, p[i].bias_slot, name, 1, p[i].out, 0, p[i].rowwise ? -1 : 0, -1))
      return false;
  }
  return true;
}

static dt_status build_llama(table_builder *b) {
  dt_hf_model *m = b->m;
  const dt_hf_config *c = &m->cfg;
  int64_t D = c->hidden_size, Q = c->num_heads * c->head_dim, KV = c->num_kv_heads * c->head_dim;
  int64_t I = c->intermediate_size;
  const linear_param attention[] = {
      {L_Q_W, L_Q_B, "self_attn.q_proj", Q, D, false},
      {L_K_W, L_K_B, "self_attn.k_proj", KV, D, false},
      {L_V_W, L_V_B, "self_attn.v_proj", KV, D, false},
      {L_O_W, L_O_B, "self_attn.o_proj", D, Q, true},
  };
  const linear_param mlp[] = {
      {L_GATE_W, L_GATE_B, "mlp.gate_proj", I, D, false},
      {L_UP_W, L_UP_B, "mlp.up_proj", I, D, false},
      {L_DOWN_W, L_DOWN_B, "mlp.down_proj", D, I, true},
  };
  m->global_index[G_EMBED] = add(b, "model.embed_tokens.weight", "", 2, c->vocab_size, D, 0, -1);
  for (int64_t l = 0; l < c->num_layers; l++) {
    char pre[64];
    snprintf(pre, sizeof pre, "model.layers.%lld.", (long long)l);
    layer_builder lb = {b, pre, m->layer_index + l * L_COUNT};
    if (!layer_add(&lb, L_NORM1_W, "input_layernorm.weight", 1, D, 0, -1, -1) ||
        !layer_add_linears(&lb, 4, attention, c->attention_bias) ||
        !layer_add(&lb, L_NORM2_W, "post_attention_layernorm.weight", 1, D, 0, -1, -1) ||
        !layer_add_linears(&lb, 3, mlp, c->mlp_bias))
      return DT_ERR_INVALID;
  }
  m->global_index[G_NORM_W] = add(b, "model.norm.weight", "", 1, D, 0, -1, -1);
  m->global_index[G_HEAD] = c->tie_word_embeddings
                                ? m->global_index[G_EMBED]
                                : add(b, "lm_head.weight", "", 2, c->vocab_size, D, 0, -1);
  return m->global_index[G_HEAD] < 0 || m->global_index[G_NORM_W] < 0 ? DT_ERR_INVALID : DT_OK;
}

static dt_status build_gpt2(table_builder *b) {
  dt_hf_model *m = b->m;
  const dt_hf_config *c = &m->cfg;
  int64_t D = c->hidden_size, I = c->intermediate_size;
  m->global_index[G_EMBED] = add(b, "transformer.wte.weight", "", 2, c->vocab_size, D, 0, -1);
  m->global_index[G_POS] = add(b, "transformer.wpe.weight", "", 2, c->max_positions, D, -1, -1);
  for (int64_t l = 0; l < c->num_layers; l++) {
    char pre[64];
    snprintf(pre, sizeof pre, "transformer.h.%lld.", (long long)l);
    layer_builder lb = {b, pre, m->layer_index + l * L_COUNT};
    /* Conv1D weights are [in, out]: colwise shards dim 1, rowwise dim 0. The fused c_attn
     * weight and bias stand three times, once per part (q, k, v). */
    bool ok = layer_add(&lb, L_NORM1_W, "ln_1.weight", 1, D, 0, -1, -1) &&
              layer_add(&lb, L_NORM1_B, "ln_1.bias", 1, D, 0, -1, -1) &&
              layer_add(&lb, L_Q_W, "attn.c_attn.weight", 2, D, D, 1, 0) &&
              layer_add(&lb, L_K_W, "attn.c_attn.weight", 2, D, D, 1, 1) &&
              layer_add(&lb, L_V_W, "attn.c_attn.weight", 2, D, D, 1, 2) &&
              layer_add(&lb, L_Q_B, "attn.c_attn.bias", 1, D, 0, 0, 0) &&
              layer_add(&lb, L_K_B, "attn.c_attn.bias", 1, D, 0, 0, 1) &&
              layer_add(&lb, L_V_B, "attn.c_attn.bias", 1, D, 0, 0, 2) &&
              layer_add(&lb, L_O_W, "attn.c_proj.weight", 2, D, D, 0, -1) &&
              layer_add(&lb, L_O_B, "attn.c_proj.bias", 1, D, 0, -1, -1) &&
              layer_add(&lb, L_NORM2_W, "ln_2.weight", 1, D, 0, -1, -1) &&
              layer_add(&lb, L_NORM2_B, "ln_2.bias", 1, D, 0, -1, -1) &&
              layer_add(&lb, L_UP_W, "mlp.c_fc.weight", 2, D, I, 1, -1) &&
              layer_add(&lb, L_UP_B, "mlp.c_fc.bias", 1, I, 0, 0, -1) &&
              layer_add(&lb, L_DOWN_W, "mlp.c_proj.weight", 2, I, D, 0, -1) &&
              layer_add(&lb, L_DOWN_B, "mlp.c_proj.bias", 1, D, 0, -1, -1);
    if (!ok) return DT_ERR_INVALID;
  }
  m->global_index[G_NORM_W] = add(b, "transformer.ln_f.weight", "", 1, D, 0, -1, -1);
  m->global_index[G_NORM_B] = add(b, "transformer.ln_f.bias", "", 1, D, 0, -1, -1);
  m->global_index[G_HEAD] = c->tie_word_embeddings
                                ? m->global_index[G_EMBED]
                                : add(b, "lm_head.weight", "", 2, c->vocab_size, D, 0, -1);
  return m->global_index[G_HEAD] < 0 || m->global_index[G_NORM_B] < 0 ? DT_ERR_INVALID : DT_OK;
}

dt_status dt__hf_params_build(dt_hf_model *m, const char *config_path, size_t tensors) {
  const dt_hf_config *c = &m->cfg;
  /* Each layer needs at least this many tensors of the checkpoint (Llama: 2 norms and 7
   * linears; GPT-2: 12, c_attn counted once): a config asking for more layers than the
   * checkpoint can hold is refused before the table is made, so the table's size follows
   * the files' (the 113-layer cap it replaces refused Llama 3.1 405B's 126). */
  const bool llama = c->arch == DT_HF_LLAMA;
  const int64_t per_layer = llama ? 9 : 12;
  if (c->num_layers > (int64_t)(tensors / (size_t)per_layer))
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: \"%s\" %lld needs at least %lld tensors, the "
                     "checkpoint holds %zu",
                     config_path, llama ? "num_hidden_layers" : "n_layer", (long long)c->num_layers,
                     (long long)(c->num_layers * per_layer), tensors);
  if (c->num_layers > (INT32_MAX - 8) / L_COUNT)
    return dt__error(DT_ERR_UNSUPPORTED, "dt_hf_model_load: %s: \"%s\" %lld is too many layers",
                     config_path, llama ? "num_hidden_layers" : "n_layer",
                     (long long)c->num_layers);
  int capacity = (int)(c->num_layers * L_COUNT + 8);
  m->params = dt__calloc(sizeof *m->params * (size_t)capacity);
  m->layer_index = dt__alloc(sizeof *m->layer_index * (size_t)(c->num_layers * L_COUNT));
  if (!m->params || !m->layer_index)
    return dt__error(DT_ERR_NOMEM, "dt_hf_model_load: out of memory");
  for (int64_t i = 0; i < c->num_layers * L_COUNT; i++) m->layer_index[i] = -1;
  for (int i = 0; i < G_COUNT; i++) m->global_index[i] = -1;
  table_builder b = {m, capacity};
  return c->arch == DT_HF_LLAMA ? build_llama(&b) : build_gpt2(&b);
}

void dt__hf_param_placements(const dt_hf_model *m, const hf_param *p, dt_placement *out) {
  int nd = m->mesh ? dt_mesh_ndim(m->mesh) : 0;
  for (int i = 0; i < nd; i++) out[i] = dt_replicate();
  int tp_dim = p->tp_dim;
  if (m->tp_dim >= 0 && tp_dim >= 0) out[m->tp_dim] = dt_shard(tp_dim);
  if (m->fsdp_dim >= 0) {
    int taken = m->tp_dim >= 0 ? tp_dim : -1;
    for (int d = 0; d < p->ndim; d++)
      if (d != taken) {
        out[m->fsdp_dim] = dt_shard(d);
        break;
      }
  }
}

dt_status dt__hf_param_use(const dt_hf_model *m, int index, dt_tensor **out) {
  dt_tensor *t = m->params[index].t;
  if (m->fsdp_dim < 0 || dt_dist_placements(t)[m->fsdp_dim].kind != DT_SHARD) {
    *out = dt_tensor_retain(t);
    return DT_OK;
  }
  dt_placement pl[DT_MAX_DIMS];
  int nd = dt_mesh_ndim(m->mesh);
  memcpy(pl, dt_dist_placements(t), sizeof(dt_placement) * (size_t)nd);
  pl[m->fsdp_dim] = dt_replicate();
  return dt_dist_redistribute(t, nd, pl, out);
}

dt_status dt__hf_replicated(const dt_hf_model *m, dt_tensor *local, dt_tensor **out) {
  if (!m->mesh) {
    *out = dt_tensor_retain(local);
    return DT_OK;
  }
  dt_placement pl[DT_MAX_DIMS];
  int nd = dt_mesh_ndim(m->mesh);
  for (int i = 0; i < nd; i++) pl[i] = dt_replicate();
  return dt_dist_distribute_tensor(m->mesh, local, nd, pl, out);
}
