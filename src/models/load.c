/*
 * dt_hf_model_load: config.json, the checkpoint's files (one, or those the index names); the
 * family's module tree built, the plans applied to it (TP, then FSDP), then each parameter read
 * in place as this rank's block and checked against the config; the model's accessors and
 * destruction.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core_impl.h"
#include "distributed/dist_impl.h"
#include "dtensor/checkpoint.h"
#include "dtensor/autograd.h"
#include "dtensor/ops.h"
#include "models/models_impl.h"

#define MAX_FILES 256

/* The checkpoint's files: the index's map (tensor -> file name, hashed: a lookup per parameter
 * scanned the whole map) and the files opened so far. */
typedef struct file_set {
  const char *dir;
  bool indexed;     /* model.safetensors.index.json is there: every file comes from it */
  char *index_text; /* the index as read; the map points into it */
  dt__hf_index index;
  int n_open;
  char *open_name[MAX_FILES];
  dt_safetensors *open_file[MAX_FILES];
} file_set;

static void file_set_clear(file_set *fs) {
  dt__hf_index_clear(&fs->index);
  dt__free(fs->index_text);
  for (int i = 0; i < fs->n_open; i++) {
    dt__free(fs->open_name[i]);
    dt_safetensors_destroy(fs->open_file[i]);
  }
}

/* The open file named `name`, opened now if it is not yet. */
static dt_status open_named(file_set *fs, const char *name, dt_safetensors **out) {
  for (int i = 0; i < fs->n_open; i++)
    if (!strcmp(fs->open_name[i], name)) {
      *out = fs->open_file[i];
      return DT_OK;
    }
  if (fs->n_open == MAX_FILES)
    return dt__error(DT_ERR_UNSUPPORTED, "dt_hf_model_load: more than %d checkpoint files",
                     MAX_FILES);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", fs->dir, name);
  dt_safetensors *f = NULL;
  dt_status st = dt_safetensors_open(path, &f);
  if (st) return st;
  fs->open_name[fs->n_open] = dt__strdup(name);
  fs->open_file[fs->n_open] = f;
  if (!fs->open_name[fs->n_open]) {
    dt_safetensors_destroy(f);
    return dt__error(DT_ERR_NOMEM, "dt_hf_model_load: out of memory");
  }
  fs->n_open++;
  *out = f;
  return DT_OK;
}

/* The open file holding `tensor` (and its name, for messages). */
static dt_status file_of(file_set *fs, const char *tensor, dt_safetensors **out,
                         const char **file_name) {
  const char *name = "model.safetensors";
  if (fs->indexed) {
    name = dt__hf_index_find(&fs->index, tensor);
    if (!name)
      return dt__error(DT_ERR_INVALID,
                       "dt_hf_model_load: %s/model.safetensors.index.json names no file for "
                       "tensor \"%s\"",
                       fs->dir, tensor);
  }
  *file_name = name;
  return open_named(fs, name, out);
}

/* The index when there is one (refused if it is not a regular file), else model.safetensors
 * opened; *tensors: how many tensors the checkpoint holds, which bounds the layers a config
 * may ask for. */
static dt_status open_weights(file_set *fs, size_t *tensors) {
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", fs->dir);
  struct stat sb;
  if (stat(path, &sb) != 0) {
    dt_safetensors *f = NULL;
    dt_status st = open_named(fs, "model.safetensors", &f);
    if (!st) *tensors = (size_t)dt_safetensors_count(f);
    return st;
  }
  fs->indexed = true;
  dt_status st = dt__hf_read_text(path, &fs->index_text);
  if (!st) st = dt__hf_index_read(fs->index_text, path, &fs->index);
  if (!st) *tensors = dt__hf_index_count(&fs->index);
  return st;
}

/* The shape and placements of parameter t as the checkpoint lays it out: dims 0 and 1 swapped
 * when the file holds it transposed. */
static void file_layout(const dt_hf_model *m, const hf_param *p, dt_tensor *t, int64_t *shape,
                        dt_placement *pl) {
  int ndim = dt_tensor_ndim(t);
  const int64_t *s = dt_tensor_is_distributed(t) ? dt_dist_global_shape(t) : dt_tensor_shape(t);
  for (int d = 0; d < ndim; d++) shape[d] = s[p->transposed && ndim == 2 ? 1 - d : d];
  int nd = dt_tensor_is_distributed(t) ? dt_mesh_ndim(m->mesh) : 0;
  for (int i = 0; i < nd; i++) {
    pl[i] = dt_dist_placements(t)[i];
    if (p->transposed && pl[i].kind == DT_SHARD) pl[i].dim = 1 - pl[i].dim;
  }
}

/* This rank's block of the checkpoint tensor of p (its part, for GPT-2's c_attn), in the file's
 * layout: shape and pl (nd of them: 0 for a tensor the tree keeps local) as file_layout gives
 * them. A borrowed whole tensor is narrowed to the block, so only its bytes are read. */
static dt_status read_block(const dt_hf_model *m, dt_safetensors *f, const hf_param *p, int ndim,
                            const int64_t *shape, int nd, const dt_placement *pl, dt_tensor **out) {
  if (p->part < 0 && nd > 0) {
    dt_tensor *t = NULL;
    dt_status st = dt_safetensors_load_distributed(f, p->file_name, m->mesh, nd, pl, &t);
    if (!st) st = dt_dist_to_local(t, out);
    dt_tensor_release(t);
    return st;
  }
  if (p->part < 0) return dt_safetensors_load(f, p->file_name, DT_SAFETENSORS_BORROW, out);
  dt_tensor *whole = NULL, *block = NULL;
  dt_status st = dt_safetensors_load(f, p->file_name, DT_SAFETENSORS_BORROW, &whole);
  int last = ndim - 1;
  if (!st) st = dt_narrow(whole, last, p->part * shape[last], shape[last], &block);
  if (!st && nd > 0) {
    int64_t msize[DT_MAX_DIMS], coord[DT_MAX_DIMS], lshape[DT_MAX_DIMS], off[DT_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
      msize[i] = dt_mesh_size(m->mesh, i);
      coord[i] = dt_mesh_coordinate(m->mesh, i);
    }
    dt__local_region(ndim, shape, nd, msize, coord, pl, lshape, off);
    for (int d = 0; d < ndim && !st; d++) {
      dt_tensor *next = NULL;
      st = dt_narrow(block, d, off[d], lshape[d], &next);
      dt_tensor_release(block);
      block = next;
    }
  }
  dt_tensor_release(whole);
  if (st) {
    dt_tensor_release(block);
    return st;
  }
  *out = block;
  return DT_OK;
}

/* Reads the tree's parameter p (this rank's block) from the checkpoint into the tensor the
 * tree holds, in place: after the plans, so each rank reads only its shards. */
static dt_status load_param(dt_hf_model *m, file_set *fs, const hf_param *p) {
  dt_safetensors *f = NULL;
  const char *fname = NULL;
  dt_status st = file_of(fs, p->file_name, &f, &fname);
  if (st) return st;
  int idx = dt_safetensors_find(f, p->file_name);
  if (idx < 0)
    return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s/%s lacks tensor \"%s\"", fs->dir, fname,
                     p->file_name);
  dt_safetensors_entry_info e;
  st = dt_safetensors_entry(f, idx, &e);
  if (st) return st;
  dt_tensor *t = dt_module_get_tensor(m->root, p->fqn);
  int ndim = dt_tensor_ndim(t);
  int64_t shape[2] = {0, 0}, want[2];
  dt_placement pl[DT_MAX_DIMS];
  file_layout(m, p, t, shape, pl);
  memcpy(want, shape, sizeof want);
  if (p->part >= 0) want[ndim - 1] *= 3;
  bool same = e.ndim == ndim;
  for (int d = 0; d < ndim && same; d++) same = e.shape[d] == want[d];
  if (!same) {
    char a[96], b[96];
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s/%s: tensor \"%s\" has shape %s, config.json says %s",
                     fs->dir, fname, p->file_name, dt__format_ints(a, sizeof a, e.ndim, e.shape),
                     dt__format_ints(b, sizeof b, ndim, want));
  }
  if (!dt_dtype_is_floating(e.dtype))
    return dt__error(DT_ERR_DTYPE, "dt_hf_model_load: %s/%s: tensor \"%s\" is %s, not floating",
                     fs->dir, fname, p->file_name, dt_dtype_name(e.dtype));
  dt_tensor *block = NULL, *src = NULL, *f32 = NULL, *dst = NULL;
  int nd = dt_tensor_is_distributed(t) ? dt_mesh_ndim(m->mesh) : 0;
  st = read_block(m, f, p, ndim, shape, nd, pl, &block);
  if (!st && p->transposed) st = dt_transpose(block, 0, 1, &src);
  if (!st && !p->transposed) src = dt_tensor_retain(block);
  if (!st) st = dt_to(src, DT_F32, &f32);
  if (!st) st = dt_tensor_is_distributed(t) ? dt_dist_to_local(t, &dst) : DT_OK;
  if (!st && !dst) dst = dt_tensor_retain(t);
  bool prev = dt_grad_mode_set(false);
  if (!st) st = dt_copy_(dst, f32);
  dt_grad_mode_set(prev);
  dt_tensor_release(block), dt_tensor_release(src), dt_tensor_release(f32);
  dt_tensor_release(dst);
  return st;
}

static dt_status resolve_plan(dt_hf_model *m, dt_mesh *mesh, const dt_hf_plan *plan) {
  m->tp_dim = m->fsdp_dim = -1;
  const char *names[2] = {plan ? plan->tp : NULL, plan ? plan->fsdp : NULL};
  int *dims[2] = {&m->tp_dim, &m->fsdp_dim};
  for (int i = 0; i < 2; i++) {
    if (!names[i]) continue;
    if (!mesh)
      return dt__error(DT_ERR_INVALID,
                       "dt_hf_model_load: plan names mesh dim \"%s\" but mesh is NULL", names[i]);
    dt_status st = dt_mesh_dim_by_name(mesh, names[i], dims[i]);
    if (st)
      return dt__error(DT_ERR_INVALID,
                       "dt_hf_model_load: the mesh has no dim named \"%s\" (plan.%s)", names[i],
                       i ? "fsdp" : "tp");
  }
  if (m->tp_dim >= 0 && m->tp_dim == m->fsdp_dim)
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: plan.tp and plan.fsdp name the same mesh dim \"%s\"",
                     names[0]);
  m->sequence_parallel = plan && plan->sequence_parallel;
  if (m->sequence_parallel && m->tp_dim < 0)
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: plan.sequence_parallel needs plan.tp (the sequence is "
                     "sharded over the tensor-parallel dim)");
  return DT_OK;
}

static dt_status collect_param(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)t;
  dt_hf_model *m = user;
  if (is_buffer) return DT_OK;
  hf_param *p = &m->params[m->n_params++];
  memset(p, 0, sizeof *p);
  if (strlen(fqn) >= sizeof p->fqn)
    return dt__error(DT_ERR_UNSUPPORTED, "dt_hf_model_load: FQN %s is too long", fqn);
  memcpy(p->fqn, fqn, strlen(fqn) + 1);
  m->family->to_hf(p);
  return DT_OK;
}

static dt_status count_param(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn, (void)t;
  if (!is_buffer) ++*(int *)user;
  return DT_OK;
}

/* Makes a parameter the plan left local a Replicate distributed tensor on the mesh (the
 * forward computes on distributed tensors throughout). */
static dt_status replicate_local(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  dt_hf_model *m = user;
  if (is_buffer || dt_tensor_is_distributed(t)) return DT_OK;
  if (m->family->keeps_local && m->family->keeps_local(fqn)) return DT_OK;
  const char *dot = strrchr(fqn, '.');
  char owner[192];
  snprintf(owner, sizeof owner, "%.*s", dot ? (int)(dot - fqn) : 0, fqn);
  dt_module *mod = dt_module_find(m->root, owner);
  dt_placement pl[DT_MAX_DIMS];
  int nd = dt_mesh_ndim(m->mesh);
  for (int i = 0; i < nd; i++) pl[i] = dt_replicate();
  dt_tensor *d = NULL;
  dt_status st = dt_dist_distribute_tensor(m->mesh, t, nd, pl, &d);
  if (!st) st = dt_module_set_tensor(mod, dot ? dot + 1 : fqn, d);
  dt_tensor_release(d);
  return st;
}

/* Whether a module's subtree holds a parameter (any) and one the family keeps local (local);
 * prefix: the module's FQN in the tree with a trailing dot, or "". */
typedef struct local_walk {
  const dt__hf_family *family;
  const char *prefix;
  bool any, local;
} local_walk;

static dt_status find_local(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)t;
  local_walk *w = user;
  if (is_buffer) return DT_OK;
  char full[512];
  snprintf(full, sizeof full, "%s%s", w->prefix, fqn);
  w->any = true;
  if (w->family->keeps_local(full)) w->local = true;
  return DT_OK;
}

/* fully_shard over every subtree of mod without a parameter the family keeps local (each such
 * subtree one call, its modules units); the modules on the way to the local ones (which hold
 * no parameters of their own in these trees) are left alone. */
static dt_status fsdp_but_local(dt_hf_model *m, dt_module *mod, const char *prefix,
                                const dt_fsdp_options *o) {
  local_walk w = {m->family, prefix, false, false};
  dt_status st = dt_module_visit_tensors(mod, find_local, &w);
  if (st || !w.any) return st;
  if (!w.local) return dt_parallel_fsdp(mod, m->mesh, o);
  for (int i = 0; i < dt_module_child_count(mod) && !st; i++) {
    char child[256];
    snprintf(child, sizeof child, "%s%s.", prefix, dt_module_child_name(mod, i));
    st = fsdp_but_local(m, dt_module_child(mod, i), child, o);
  }
  return st;
}

/* The plans on the tree: Megatron's on the TP dim (every output kept distributed: the
 * forward computes on distributed tensors, which is what lets head counts that do not divide
 * the degree work), the rest replicated, then fully_shard over the FSDP dim. */
static dt_status parallelize(dt_hf_model *m) {
  if (!m->mesh) return DT_OK;
  dt_status st = DT_OK;
  if (m->tp_dim >= 0) {
    /* Every style keeps its output distributed; with sequence parallelism the rows say where
     * the sequence is sharded (Shard(1)) on the way in or out. */
    static const dt_placement seq = {.kind = DT_SHARD, .dim = 1};
    int rows = m->family->plan_n - (m->head ? 0 : 1), n = 0;
    dt_tp_plan_entry e[32];
    dt_tp_style_options o[32];
    for (int i = 0; i < rows && n < 32; i++) {
      const dt__hf_plan_row *r = &m->family->plan[i];
      if (r->sp_only && !m->sequence_parallel) continue;
      e[n] = (dt_tp_plan_entry){r->fqn, r->style};
      o[n] = (dt_tp_style_options){.keep_distributed_output = true};
      if (m->sequence_parallel && r->sp_in) o[n].input_layout = &seq;
      if (m->sequence_parallel && r->sp_out) o[n].output_layout = &seq;
      n++;
    }
    st = dt_parallel_tp_module_on_dim(m->root, m->mesh, m->tp_dim, &(dt_tp_plan){n, e}, o);
  }
  /* Visiting while replacing: each replacement is of the tensor being visited. FSDP shards
   * the parameters TP left local itself (from the placeholders: only the shard is made). */
  if (!st && m->fsdp_dim < 0) st = dt_module_visit_tensors(m->root, replicate_local, m);
  if (!st && m->fsdp_dim >= 0) {
    dt_fsdp_options o = {.mesh_dim = m->fsdp_dim};
    st = m->family->keeps_local ? fsdp_but_local(m, m->root, "", &o)
                                : dt_parallel_fsdp(m->root, m->mesh, &o);
  }
  return st;
}

/* The tree (bounded by the checkpoint's tensors), the plans, then each parameter's block. */
static dt_status read_weights(dt_hf_model *m, const char *dir, const char *config_path) {
  file_set fs;
  memset(&fs, 0, sizeof fs);
  fs.dir = dir;
  size_t tensors = 0;
  const dt_hf_config *c = &m->cfg;
  dt_status st = open_weights(&fs, &tensors);
  /* A config asking for more layers than the checkpoint can hold is refused before the tree
   * is made, so the tree's size follows the files'. */
  int64_t per_layer = m->family->tensors_per_layer;
  if (!st && c->num_layers > (int64_t)(tensors / (size_t)per_layer))
    st = dt__error(DT_ERR_INVALID,
                   "dt_hf_model_load: %s: \"%s\" %lld needs at least %lld tensors, the "
                   "checkpoint holds %zu",
                   config_path, m->family->layers_field, (long long)c->num_layers,
                   (long long)(c->num_layers * per_layer), tensors);
  if (!st) st = m->family->build(m, config_path);
  if (!st) st = dt__hf_placeholders(m, m->root);
  if (!st) st = parallelize(m);
  int n = 0;
  if (!st) st = dt_module_visit_tensors(m->root, count_param, &n);
  if (!st) {
    m->params = dt__calloc(sizeof *m->params * (size_t)(n ? n : 1));
    if (!m->params) st = dt__error(DT_ERR_NOMEM, "dt_hf_model_load: out of memory");
  }
  if (!st) st = dt_module_visit_tensors(m->root, collect_param, m);
  for (int i = 0; i < m->n_params && !st; i++) st = load_param(m, &fs, &m->params[i]);
  /* Parameters require grad only once dt_hf_model_set_trainable asks. */
  if (!st) st = dt_hf_model_set_trainable(m, false);
  file_set_clear(&fs);
  return st;
}

dt_status dt_hf_model_load(const char *dir, dt_mesh *mesh, const dt_hf_plan *plan,
                           dt_hf_model **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_hf_model_load: out is NULL");
  *out = NULL;
  if (!dir) return dt__error(DT_ERR_INVALID, "dt_hf_model_load: dir is NULL");
  if (strlen(dir) > 3000) return dt__error(DT_ERR_INVALID, "dt_hf_model_load: dir is too long");
  dt_hf_model *m = dt__calloc(sizeof *m);
  if (!m) return dt__error(DT_ERR_NOMEM, "dt_hf_model_load: out of memory");
  m->mesh = mesh;
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  dt_status st = resolve_plan(m, mesh, plan);
  if (!st) st = dt__hf_read_text(path, &m->config_text);
  if (!st) st = dt__hf_config_parse(m->config_text, path, &m->cfg, &m->family);
  if (!st) st = read_weights(m, dir, path);
  if (st) {
    dt_hf_model_destroy(m);
    return st;
  }
  *out = m;
  return DT_OK;
}

void dt_hf_model_destroy(dt_hf_model *m) {
  if (!m) return;
  dt_module_destroy(m->root);
  dt_tensor_release(m->rope_inv);
  DT__FREE_EACH(m->params, m->block, m->attn, m->config_text, m);
}

const dt_hf_config *dt_hf_model_config(const dt_hf_model *m) { return m ? &m->cfg : NULL; }

dt_mesh *dt_hf_model_mesh(const dt_hf_model *m) { return m ? m->mesh : NULL; }

dt_module *dt_hf_model_module(dt_hf_model *m) { return m ? m->root : NULL; }

int dt_hf_model_param_count(const dt_hf_model *m) { return m ? m->n_params : 0; }

dt_tensor *dt_hf_model_param(const dt_hf_model *m, int i, const char **name) {
  if (!m || i < 0 || i >= m->n_params) return NULL;
  if (name) *name = m->params[i].name;
  return dt_module_get_tensor(m->root, m->params[i].fqn);
}

dt_status dt_hf_model_set_trainable(dt_hf_model *m, bool trainable) {
  if (!m) return dt__error(DT_ERR_INVALID, "dt_hf_model_set_trainable: model is NULL");
  for (int i = 0; i < m->n_params; i++) {
    dt_status st = dt_tensor_set_requires_grad(dt_hf_model_param(m, i, NULL), trainable);
    if (st) return st;
  }
  return DT_OK;
}
