/*
 * dt_hf_model_load: config.json, the checkpoint's files (one, or those the index names), each
 * parameter read as this rank's block with the plan's placements and checked against the
 * config; the model's accessors and destruction.
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

/* GPT-2's c_attn part of a borrowed whole tensor, this rank's block of it, copied. */
static dt_status load_part(const dt_hf_model *m, dt_safetensors *f, const hf_param *p,
                           const dt_placement *pl, dt_tensor **out) {
  dt_tensor *whole = NULL, *part = NULL, *block = NULL, *local = NULL;
  dt_status st = dt_safetensors_load(f, p->file_name, DT_SAFETENSORS_BORROW, &whole);
  int last = p->ndim - 1;
  if (!st) st = dt_narrow(whole, last, p->part * p->shape[last], p->shape[last], &part);
  if (!st && !m->mesh) st = dt_clone(part, out);
  if (!st && m->mesh) {
    int nd = dt_mesh_ndim(m->mesh);
    int64_t msize[DT_MAX_DIMS], coord[DT_MAX_DIMS], lshape[DT_MAX_DIMS], off[DT_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
      msize[i] = dt_mesh_size(m->mesh, i);
      coord[i] = dt_mesh_coordinate(m->mesh, i);
    }
    dt__local_region(p->ndim, p->shape, nd, msize, coord, pl, lshape, off);
    block = dt_tensor_retain(part);
    for (int d = 0; d < p->ndim && !st; d++) {
      dt_tensor *next = NULL;
      st = dt_narrow(block, d, off[d], lshape[d], &next);
      dt_tensor_release(block);
      block = next;
    }
    if (!st) st = dt_clone(block, &local);
    dt_dist_from_local_options o = {.global_shape = p->shape, .global_ndim = p->ndim};
    if (!st) st = dt_dist_from_local(m->mesh, local, nd, pl, &o, out);
  }
  dt_tensor_release(whole);
  dt_tensor_release(part);
  dt_tensor_release(block);
  dt_tensor_release(local);
  return st;
}

static dt_status load_param(dt_hf_model *m, file_set *fs, hf_param *p) {
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
  int64_t want[2] = {p->shape[0], p->shape[1]};
  if (p->part >= 0) want[p->ndim - 1] *= 3;
  bool same = e.ndim == p->ndim;
  for (int d = 0; d < p->ndim && same; d++) same = e.shape[d] == want[d];
  if (!same) {
    char a[96], b[96];
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s/%s: tensor \"%s\" has shape %s, config.json says %s",
                     fs->dir, fname, p->file_name, dt__format_ints(a, sizeof a, e.ndim, e.shape),
                     dt__format_ints(b, sizeof b, p->ndim, want));
  }
  if (!dt_dtype_is_floating(e.dtype))
    return dt__error(DT_ERR_DTYPE, "dt_hf_model_load: %s/%s: tensor \"%s\" is %s, not floating",
                     fs->dir, fname, p->file_name, dt_dtype_name(e.dtype));
  dt_placement pl[DT_MAX_DIMS];
  dt__hf_param_placements(m, p, pl);
  dt_tensor *t = NULL;
  if (p->part >= 0)
    st = load_part(m, f, p, pl, &t);
  else if (m->mesh)
    st = dt_safetensors_load_distributed(f, p->file_name, m->mesh, dt_mesh_ndim(m->mesh), pl, &t);
  else
    st = dt_safetensors_load(f, p->file_name, DT_SAFETENSORS_COPY, &t);
  if (!st && e.dtype != DT_F32) {
    dt_tensor *c = NULL;
    st = dt_to(t, DT_F32, &c);
    dt_tensor *owned = NULL;
    if (!st) st = dt_clone(c, &owned);
    dt_tensor_release(c);
    dt_tensor_release(t);
    t = owned;
  }
  if (st) {
    dt_tensor_release(t);
    return st;
  }
  p->t = t;
  return DT_OK;
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
  return DT_OK;
}

/* The parameter table (bounded by the checkpoint's tensors), then each parameter's block. */
static dt_status read_weights(dt_hf_model *m, const char *dir, const char *config_path) {
  file_set fs;
  memset(&fs, 0, sizeof fs);
  fs.dir = dir;
  size_t tensors = 0;
  dt_status st = open_weights(&fs, &tensors);
  if (!st) st = dt__hf_params_build(m, config_path, tensors);
  for (int i = 0; i < m->n_params && !st; i++) st = load_param(m, &fs, &m->params[i]);
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
  if (!st) st = dt__hf_config_parse(m->config_text, path, &m->cfg);
  if (!st) st = read_weights(m, dir, path);
  if (!st && m->cfg.arch == DT_HF_LLAMA) st = dt__hf_rope_init(m, path);
  if (st) {
    dt_hf_model_destroy(m);
    return st;
  }
  *out = m;
  return DT_OK;
}

void dt_hf_model_destroy(dt_hf_model *m) {
  if (!m) return;
  for (int i = 0; i < m->n_params; i++) dt_tensor_release(m->params[i].t);
  dt_tensor_release(m->rope_inv);
  DT__FREE_EACH(m->params, m->layer_index, m->config_text, m);
}

const dt_hf_config *dt_hf_model_config(const dt_hf_model *m) { return m ? &m->cfg : NULL; }

dt_mesh *dt_hf_model_mesh(const dt_hf_model *m) { return m ? m->mesh : NULL; }

int dt_hf_model_param_count(const dt_hf_model *m) { return m ? m->n_params : 0; }

dt_tensor *dt_hf_model_param(const dt_hf_model *m, int i, const char **name) {
  if (!m || i < 0 || i >= m->n_params) return NULL;
  if (name) *name = m->params[i].name;
  return m->params[i].t;
}

dt_status dt_hf_model_set_trainable(dt_hf_model *m, bool trainable) {
  if (!m) return dt__error(DT_ERR_INVALID, "dt_hf_model_set_trainable: model is NULL");
  for (int i = 0; i < m->n_params; i++) {
    dt_status st = dt_tensor_set_requires_grad(m->params[i].t, trainable);
    if (st) return st;
  }
  return DT_OK;
}
