/* Private parts of the models layer (src/models/): the model (a module tree), the families that
 * build it, the KV cache, and the helpers the files share. */
#ifndef DT_MODELS_IMPL_H
#define DT_MODELS_IMPL_H

#include "dtensor/dist.h"
#include "dtensor/models.h"
#include "dtensor/parallel.h"
#include "dtensor/transformer.h"

/* One parameter of the model's tree and the checkpoint tensor it comes from (the family's
 * state-dict adapter, to_hf). */
typedef struct hf_param {
  char fqn[160];       /* the tree's FQN ("transformer.h.0.attn.q_proj.weight") */
  char name[164];      /* the public name: file_name, "#q" etc. for GPT-2's c_attn parts */
  char file_name[160]; /* the checkpoint tensor */
  int part;            /* GPT-2 c_attn: 0, 1, 2 = q, k, v (a third of the last dim); -1 whole */
  bool transposed;     /* the checkpoint holds it [in, out] (GPT-2's Conv1D) */
} hf_param;

/* A row of an architecture's tensor-parallel plan: a module FQN pattern and its style, and
 * its part in Megatron's sequence parallelism (plan.sequence_parallel): sp_in, the module's
 * input arrives sharded over the sequence (Shard(1): a colwise Linear all-gathers it); sp_out,
 * its output leaves so (a rowwise Linear or the embedding reduce-scatters); sp_only, the row
 * (a norm, SEQUENCE_PARALLEL) is in the plan only then. */
typedef struct dt__hf_plan_row {
  const char *fqn;
  dt_tp_style style;
  bool sp_in, sp_out, sp_only;
} dt__hf_plan_row;

/* An architecture (llama.c, gpt2.c): its module tree, its Megatron plan and its state-dict
 * adapter. Adding a family is one of these and a row of the loader's table (load.c). */
typedef struct dt__hf_family {
  dt_hf_arch arch;
  const char *layers_field;  /* config.json's name of num_layers, for messages */
  int64_t tensors_per_layer; /* the fewest checkpoint tensors one layer needs */
  /* Builds the tree of m->cfg into m->root, m->embed, m->pos, m->attn, m->norm and m->head
   * (NULL when tied: the head is the embedding's weight); may refuse the config naming
   * config_path. */
  dt_status (*build)(dt_hf_model *m, const char *config_path);
  /* The tensor-parallel plan (FQN patterns to styles); row plan_n - 1 is the LM head's, left
   * out when the head is tied. */
  const dt__hf_plan_row *plan;
  int plan_n;
  /* The checkpoint tensor of the tree's parameter p->fqn: fills p's other fields. */
  void (*to_hf)(hf_param *p);
  /* NULL, or true for the parameters every rank of a mesh holds whole as local tensors and
   * computes on locally (the MoE families' routers and experts: the plans leave them, so no
   * placeholder, no TP and no FSDP sharding). fqn is the parameter's FQN in the tree or in
   * its block (the test must hold for both). */
  bool (*keeps_local)(const char *fqn);
} dt__hf_family;

extern const dt__hf_family dt__hf_llama;
extern const dt__hf_family dt__hf_gpt2;
extern const dt__hf_family dt__hf_qwen3;
extern const dt__hf_family dt__hf_mistral;
extern const dt__hf_family dt__hf_mixtral;
extern const dt__hf_family dt__hf_qwen3_moe;

/* Llama's Megatron plan (llama.c), shared by the dense Llama-like families (Qwen3, Mistral):
 * DT__HF_LLAMA_PLAN_N rows, the LM head's last. */
#define DT__HF_LLAMA_PLAN_N 12
extern const dt__hf_plan_row dt__hf_llama_plan[DT__HF_LLAMA_PLAN_N];

/* Makes one decoder block of options o for the model m (dt__hf_add_blocks). */
typedef dt_status (*dt__hf_block_maker)(const dt_hf_model *m, const dt_nn_block_options *o,
                                        dt_module **out);

/* The tree every Llama-like family shares (llama.c): root `type` (forward dt__hf_lm_forward),
 * "model" with "embed_tokens", the ModuleList "layers" of blocks made by make (NULL:
 * dt_nn_transformer_block) from o, whose attention gets the model's rotary frequencies and
 * whose block's Attention is the child "self_attn", "norm", and "lm_head" unless tied. */
dt_status dt__hf_llama_tree(dt_hf_model *m, const char *config_path, const char *type,
                            dt_nn_block_options *o, dt__hf_block_maker make);
/* The block options of a Llama-like config: RMSNorm, grouped-query attention with its biases,
 * SwiGLU (attention.rope_inv_freq is set by dt__hf_llama_tree). */
dt_nn_block_options dt__hf_llama_block_options(const dt_hf_config *c);
/* The identity state-dict adapter of the families whose FQNs are the checkpoint's names. */
void dt__hf_identity_to_hf(hf_param *p);

struct dt_hf_model {
  dt_hf_config cfg;
  const dt__hf_family *family;
  char *config_text; /* config.json as read, written back by save */
  dt_mesh *mesh;
  int tp_dim;   /* -1: none */
  int fsdp_dim; /* -1: none */
  bool sequence_parallel;
  /* The module tree (owned) and its parts the forward reaches (borrowed from it). */
  dt_module *root;
  dt_module *embed;  /* token embedding */
  dt_module *pos;    /* learned positions (GPT-2), or NULL */
  dt_module **attn;  /* [num_layers]: each block's Attention, for its KV-cache context */
  dt_module **block; /* [num_layers] */
  dt_module *norm;   /* the final norm */
  dt_module *head;   /* the LM head, NULL when tied to the embedding */
  int64_t past;      /* the first position of the running forward */
  int n_params;
  hf_param *params;
  /* Llama's rotary inverse frequencies [head_dim / 2] (float32, llama3 scaling applied),
   * handed to every Attention (rope.c). */
  dt_tensor *rope_inv;
};

struct dt_hf_kv_cache {
  dt_nn_kv_cache *cache;
  int n_layers;
  int64_t batch; /* of the positions held; -1 while empty */
};

/* The forward of the family's root module (causal_lm.c): ids [B, T] (distributed on a mesh)
 * -> logits, positions from m->past: the embedding (plus learned positions), the blocks, the
 * final norm and the head (a tied head is the embedding's weight, gathered over FSDP). The
 * root's user data is the model. */
dt_status dt__hf_lm_forward(dt_module *root, dt_tensor *ids, dt_tensor **out);
/* With a mesh, replaces the local parameters of sub (a module of m's tree) but those the family
 * keeps local by zero-strided
 * views of one zero: the plans then allocate only each rank's shards from them, and the
 * weights are read into those (without a mesh the tree keeps its own full tensors). So that
 * one block at a time is whole in memory, blocks are replaced as they are built. */
dt_status dt__hf_placeholders(const dt_hf_model *m, dt_module *sub);
/* Adds the `n` blocks of options `o` (made by make; NULL: dt_nn_transformer_block) as
 * children "0".."n-1" of a ModuleList `name` of parent, recording them and their Attention
 * (child attn_name) in m->block and m->attn; each block's parameters placeholders
 * (dt__hf_placeholders) once built, but for those the family keeps local. */
dt_status dt__hf_add_blocks(dt_hf_model *m, dt_module *parent, const char *name,
                            const dt_nn_block_options *o, const char *attn_name,
                            dt__hf_block_maker make);

/* config.json -> cfg and the family that builds it (config.c, whose table maps config.json's
 * architecture to a family and its reader). `path` names the file in messages. The text is
 * checked by dt__hf_json_check first. */
dt_status dt__hf_config_parse(const char *text, const char *path, dt_hf_config *cfg,
                              const dt__hf_family **family);

/* A hash set of strings (open addressing, at most half full), each with a value or none: the
 * keys of one JSON object, or the index's tensor -> file map (hf_json.c). The strings are
 * not owned. */
typedef struct dt__hf_key_table {
  size_t cap, n; /* cap: a power of two, or 0 */
  const char **key;
  size_t *len;
  const char **value; /* NULL for a set without values */
} dt__hf_key_table;

/* model.safetensors.index.json's weight_map: tensor name -> file name. */
typedef struct dt__hf_index {
  dt__hf_key_table map;
} dt__hf_index;

/* Refuses what transformers would read otherwise: a UTF-8 byte order mark, text after the
 * value, a key twice in one object (at any depth; the top object's member named `unchecked`,
 * or none for NULL, is scanned only, its reader refusing its duplicates), naming `path`. */
dt_status dt__hf_json_check(const char *text, const char *path, const char *unchecked);
/* The index's weight_map into *ix, in one pass and with no copies: text is unescaped in place
 * and must outlive *ix. A duplicated tensor, a file that is not a plain file name of the
 * directory, or a non-string value is refused naming `path`. *ix is cleared on an error. */
dt_status dt__hf_index_read(char *text, const char *path, dt__hf_index *ix);
/* The file of tensor, or NULL when the index names none. */
const char *dt__hf_index_find(const dt__hf_index *ix, const char *tensor);
/* The number of tensors the index names. */
size_t dt__hf_index_count(const dt__hf_index *ix);
void dt__hf_index_clear(dt__hf_index *ix);
/* Reads a whole text file (NUL-terminated, owned by the caller: dt_free). */
dt_status dt__hf_read_text(const char *path, char **out);

/* Llama's rotary inverse frequencies into model->rope_inv (rope.c); a frequency that is not
 * finite is refused naming config_path and the fields. */
dt_status dt__hf_rope_init(dt_hf_model *model, const char *config_path);
#endif /* DT_MODELS_IMPL_H */
