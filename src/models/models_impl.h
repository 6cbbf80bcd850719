/* Private parts of the models layer (src/models/): the model, its parameter table, the KV
 * cache, and the helpers the files share. */
#ifndef DT_MODELS_IMPL_H
#define DT_MODELS_IMPL_H

#include "dtensor/dist.h"
#include "dtensor/models.h"

/* The parameters of one decoder layer, indexes into dt_hf_model.params (-1: absent). */
enum {
  L_NORM1_W, /* input_layernorm / ln_1 */
  L_NORM1_B,
  L_Q_W, /* Llama: [H*hd, D]; GPT-2 (Conv1D, [in, out]): [D, D] */
  L_Q_B,
  L_K_W,
  L_K_B,
  L_V_W,
  L_V_B,
  L_O_W,
  L_O_B,
  L_NORM2_W, /* post_attention_layernorm / ln_2 */
  L_NORM2_B,
  L_GATE_W, /* Llama only */
  L_GATE_B,
  L_UP_W, /* Llama up_proj [I, D]; GPT-2 c_fc [D, I] */
  L_UP_B,
  L_DOWN_W, /* Llama down_proj [D, I]; GPT-2 c_proj [I, D] */
  L_DOWN_B,
  L_COUNT
};

/* Global parameters. */
enum { G_EMBED, G_POS, G_NORM_W, G_NORM_B, G_HEAD, G_COUNT };

typedef struct hf_param {
  char name[128];      /* Hugging Face name (with "#q" etc. for GPT-2's c_attn parts) */
  char file_name[128]; /* the checkpoint tensor it comes from */
  int ndim;
  int64_t shape[2];
  int part;     /* GPT-2 c_attn: 0, 1, 2 = q, k, v (a third of the last dim); -1 whole */
  int tp_dim;   /* the tensor dim the TP plan shards (colwise, rowwise, vocabulary); -1 none */
  dt_tensor *t; /* the parameter (owned) */
} hf_param;

struct dt_hf_model {
  dt_hf_config cfg;
  char *config_text; /* config.json as read, written back by save */
  dt_mesh *mesh;
  int tp_dim;   /* -1: none */
  int fsdp_dim; /* -1: none */
  int n_params;
  hf_param *params;
  int *layer_index; /* [num_layers][L_COUNT] */
  int global_index[G_COUNT];
  /* Llama's rotary inverse frequencies [head_dim / 2] (float32, llama3 scaling applied): the
   * cos/sin tables are computed per forward for the positions it covers (rope.c), never for
   * all max_positions. */
  dt_tensor *rope_inv;
};

struct dt_hf_kv_cache {
  int64_t length;
  int n_layers;
  dt_tensor **k; /* [n_layers] */
  dt_tensor **v;
};

/* config.json -> cfg (config.c). `path` names the file in messages. The text is checked by
 * dt__hf_json_check first. */
dt_status dt__hf_config_parse(const char *text, const char *path, dt_hf_config *cfg);

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

/* The parameter table of cfg's architecture (params.c): fills model->params and the indexes.
 * A config whose layers need more tensors than the checkpoint's `tensors` is refused, naming
 * config_path and the field. */
dt_status dt__hf_params_build(dt_hf_model *model, const char *config_path, size_t tensors);
/* The placements of parameter p on the model's mesh. */
void dt__hf_param_placements(const dt_hf_model *model, const hf_param *p, dt_placement *out);
/* The parameter as the forward uses it: gathered over the FSDP dim (recorded by autograd),
 * else retained. */
dt_status dt__hf_param_use(const dt_hf_model *model, int index, dt_tensor **out);
/* A local tensor made the same on every rank, replicated on the model's mesh (params.c): a new
 * reference in *out, `local` itself retained without a mesh; local stays the caller's. */
dt_status dt__hf_replicated(const dt_hf_model *model, dt_tensor *local, dt_tensor **out);
/* Llama's rotary inverse frequencies into model->rope_inv (rope.c); a frequency that is not
 * finite is refused naming config_path and the fields. */
dt_status dt__hf_rope_init(dt_hf_model *model, const char *config_path);
/* cos and sin [T, head_dim] of positions past .. past + T - 1 (replicated on the model's mesh),
 * made with arange, mul, cat, cos and sin: new references. */
dt_status dt__hf_rope_tables(const dt_hf_model *model, int64_t past, int64_t T, dt_tensor **cos_out,
                             dt_tensor **sin_out);

#endif /* DT_MODELS_IMPL_H */
