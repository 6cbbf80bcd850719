/* Modules (dtensor/nn.h): a tree of named parts with PyTorch's parameter layout; forward
 * calls the public op API, so modules sit above ops and distributed tensors and below the
 * graph layer, whose exporter walks them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core_impl.h"
#include "nn/nn_impl.h"
#include "dtensor/nn.h"
#include "dtensor/ops.h"

#define MAX_PARTS 64
#define MAX_NAME 64

struct dt_module {
  char type[MAX_NAME];
  dt_forward_fn forward;
  void *user;
  /* Children grow without a bound (a model has a block per layer: Llama 3.1 405B has 126). */
  int n_children, child_cap;
  char (*child_names)[MAX_NAME];
  dt_module **children;
  int n_tensors;
  char tensor_names[MAX_PARTS][MAX_NAME];
  dt_tensor *tensors[MAX_PARTS];
  bool is_buffer[MAX_PARTS];
  /* Hook pairs in the order they were added; each added pair wraps the ones before it. */
  int n_hooks;
  struct {
    dt_hook_fn pre, post;
    void *user;
    void (*release)(void *user);
  } hooks[DT_MODULE_MAX_HOOKS];
  int64_t size; /* LayerNorm: normalized dim */
  double eps;
  bool checkpoint;                  /* activation checkpointing (checkpoint.c) */
  void (*release_user)(void *user); /* a built-in module's own state (dt__module_set_release) */
};

/* ---- Creation ------------------------------------------------------------------------------- */

dt_status dt_module_create(const char *type, dt_forward_fn forward, void *user, dt_module **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_module_create: out is NULL");
  *out = NULL;
  if (!type || !type[0] || strlen(type) >= MAX_NAME) {
    return dt__error(DT_ERR_INVALID, "dt_module_create: type must be a name of 1..%d characters",
                     MAX_NAME - 1);
  }
  dt_module *m = dt__calloc(sizeof *m);
  if (!m) return dt__error(DT_ERR_NOMEM, "dt_module_create: out of memory");
  snprintf(m->type, sizeof m->type, "%s", type);
  m->forward = forward;
  m->user = user;
  *out = m;
  return DT_OK;
}

/* Releases the user data of every hook pair (innermost first) and removes them. */
static void clear_hooks(dt_module *m) {
  for (int i = 0; i < m->n_hooks; i++) {
    if (m->hooks[i].release) m->hooks[i].release(m->hooks[i].user);
  }
  m->n_hooks = 0;
}

void dt_module_destroy(dt_module *m) {
  if (!m) return;
  for (int i = 0; i < m->n_children; i++) dt_module_destroy(m->children[i]);
  for (int i = 0; i < m->n_tensors; i++) dt_tensor_release(m->tensors[i]);
  clear_hooks(m);
  if (m->release_user) m->release_user(m->user);
  DT__FREE_EACH(m->children, m->child_names, m);
}

static bool name_taken(const dt_module *m, const char *name) {
  for (int i = 0; i < m->n_children; i++) {
    if (strcmp(m->child_names[i], name) == 0) return true;
  }
  for (int i = 0; i < m->n_tensors; i++) {
    if (strcmp(m->tensor_names[i], name) == 0) return true;
  }
  return false;
}

static dt_status check_part_name(const char *op, const dt_module *m, const char *name) {
  if (!name || !name[0] || strlen(name) >= MAX_NAME || strchr(name, '.')) {
    return dt__error(DT_ERR_INVALID, "%s: name must have 1..%d characters and no dots", op,
                     MAX_NAME - 1);
  }
  for (const char *c = name; *c; c++) {
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '_')) {
      return dt__error(DT_ERR_INVALID, "%s: name '%s' may hold only letters, digits and '_'", op,
                       name);
    }
  }
  if (name_taken(m, name))
    return dt__error(DT_ERR_INVALID, "%s: '%s' is already a part of this %s", op, name, m->type);
  return DT_OK;
}

dt_status dt_module_add_child(dt_module *parent, const char *name, dt_module *child) {
  if (!parent || !child) {
    dt_module_destroy(child);
    return dt__error(DT_ERR_INVALID, "dt_module_add_child: NULL module");
  }
  dt_status st = check_part_name("module_add_child", parent, name);
  void *arrays[2] = {&parent->children, &parent->child_names};
  size_t sizes[2] = {sizeof *parent->children, sizeof *parent->child_names};
  if (!st && !dt__reserve_arrays(parent->n_children, &parent->child_cap, 8, 2, arrays, sizes))
    st = dt__error(DT_ERR_NOMEM, "dt_module_add_child: out of memory");
  if (st) {
    dt_module_destroy(child);
    return st;
  }
  snprintf(parent->child_names[parent->n_children], MAX_NAME, "%s", name);
  parent->children[parent->n_children++] = child;
  return DT_OK;
}

dt_status dt_module_take_child(dt_module *parent, int i, dt_module **child) {
  if (!child) return dt__error(DT_ERR_INVALID, "dt_module_take_child: child is NULL");
  *child = NULL;
  if (!parent) return dt__error(DT_ERR_INVALID, "dt_module_take_child: parent is NULL");
  if (i < 0 || i >= parent->n_children) {
    return dt__error(DT_ERR_INVALID, "dt_module_take_child: index %d outside 0..%d of %s", i,
                     parent->n_children - 1, parent->type);
  }
  *child = parent->children[i];
  for (int k = i; k + 1 < parent->n_children; k++) {
    parent->children[k] = parent->children[k + 1];
    memcpy(parent->child_names[k], parent->child_names[k + 1], MAX_NAME);
  }
  parent->n_children--;
  return DT_OK;
}

static dt_status add_tensor(const char *op, dt_module *m, const char *name, dt_tensor *t,
                            bool buffer) {
  if (!m || !t) return dt__error(DT_ERR_INVALID, "%s: NULL module or tensor", op);
  dt_status st = check_part_name(op, m, name);
  if (st) return st;
  if (m->n_tensors >= MAX_PARTS)
    return dt__error(DT_ERR_INVALID, "%s: more than %d tensors", op, MAX_PARTS);
  snprintf(m->tensor_names[m->n_tensors], MAX_NAME, "%s", name);
  m->is_buffer[m->n_tensors] = buffer;
  m->tensors[m->n_tensors++] = dt_tensor_retain(t);
  return DT_OK;
}

dt_status dt_module_add_parameter(dt_module *m, const char *name, dt_tensor *t) {
  return add_tensor("module_add_parameter", m, name, t, false);
}

dt_status dt_module_add_buffer(dt_module *m, const char *name, dt_tensor *t) {
  return add_tensor("module_add_buffer", m, name, t, true);
}

/* Adds a new tensor (handing over the creation reference). */
static dt_status add_owned(dt_module *m, const char *name, dt_tensor *t, bool buffer,
                           dt_status created) {
  if (created) return created;
  dt_status st = add_tensor("module", m, name, t, buffer);
  dt_tensor_release(t);
  return st;
}

/* ---- Inspection -------------------------------------------------------------------------------
 */

void dt__module_set_release(dt_module *m, void (*release)(void *user)) {
  if (m) m->release_user = release;
}

bool dt__module_released_by(const dt_module *m, void (*release)(void *user)) {
  return m && release && m->release_user == release;
}

const char *dt_module_type(const dt_module *m) { return m ? m->type : NULL; }
void *dt_module_user(const dt_module *m) { return m ? m->user : NULL; }
int dt_module_child_count(const dt_module *m) { return m ? m->n_children : 0; }
dt_module *dt_module_child(const dt_module *m, int i) {
  return m && i >= 0 && i < m->n_children ? m->children[i] : NULL;
}
const char *dt_module_child_name(const dt_module *m, int i) {
  return m && i >= 0 && i < m->n_children ? m->child_names[i] : NULL;
}

static dt_tensor *own_tensor(const dt_module *m, const char *name, int buffer) {
  for (int i = 0; m && name && i < m->n_tensors; i++) {
    if ((buffer < 0 || m->is_buffer[i] == (buffer == 1)) && strcmp(m->tensor_names[i], name) == 0)
      return m->tensors[i];
  }
  return NULL;
}

dt_tensor *dt_module_parameter(const dt_module *m, const char *name) {
  return own_tensor(m, name, 0);
}
dt_tensor *dt_module_buffer(const dt_module *m, const char *name) { return own_tensor(m, name, 1); }

dt_module *dt_module_find(const dt_module *m, const char *fqn) {
  if (!m || !fqn) return NULL;
  while (*fqn) {
    const char *dot = strchr(fqn, '.');
    size_t len = dot ? (size_t)(dot - fqn) : strlen(fqn);
    const dt_module *next = NULL;
    for (int i = 0; i < m->n_children; i++) {
      if (strlen(m->child_names[i]) == len && memcmp(m->child_names[i], fqn, len) == 0)
        next = m->children[i];
    }
    if (!next) return NULL;
    m = next;
    fqn += len + (dot ? 1 : 0);
    if (dot && !*fqn) return NULL;
  }
  return (dt_module *)m;
}

dt_tensor *dt_module_get_tensor(const dt_module *m, const char *fqn) {
  if (!m || !fqn) return NULL;
  const char *dot = strrchr(fqn, '.');
  if (!dot) return own_tensor(m, fqn, -1);
  char path[256];
  size_t len = (size_t)(dot - fqn);
  if (len >= sizeof path) return NULL;
  memcpy(path, fqn, len);
  path[len] = '\0';
  return own_tensor(dt_module_find(m, path), dot + 1, -1);
}

dt_status dt_module_set_tensor(dt_module *m, const char *name, dt_tensor *t) {
  if (!m || !name || !t) return dt__error(DT_ERR_INVALID, "dt_module_set_tensor: NULL argument");
  for (int i = 0; i < m->n_tensors; i++) {
    if (strcmp(m->tensor_names[i], name) == 0) {
      dt_tensor_retain(t);
      dt_tensor_release(m->tensors[i]);
      m->tensors[i] = t;
      return DT_OK;
    }
  }
  return dt__error(DT_ERR_INVALID, "dt_module_set_tensor: %s has no parameter or buffer '%s'",
                   m->type, name);
}

static dt_status visit_tensors(const dt_module *m, char *prefix, size_t len, bool buffers,
                               dt_tensor_visit_fn fn, void *user) {
  for (int i = 0; i < m->n_tensors; i++) {
    if (m->is_buffer[i] != buffers) continue;
    snprintf(prefix + len, 512 - len, "%s%s", len ? "." : "", m->tensor_names[i]);
    dt_status st = fn(prefix, m->tensors[i], buffers, user);
    if (st) return st;
  }
  for (int i = 0; i < m->n_children; i++) {
    int n = snprintf(prefix + len, 512 - len, "%s%s", len ? "." : "", m->child_names[i]);
    dt_status st = visit_tensors(m->children[i], prefix, len + (size_t)n, buffers, fn, user);
    if (st) return st;
  }
  prefix[len] = '\0';
  return DT_OK;
}

dt_status dt_module_visit_tensors(const dt_module *m, dt_tensor_visit_fn fn, void *user) {
  if (!m || !fn) return dt__error(DT_ERR_INVALID, "dt_module_visit_tensors: NULL argument");
  char prefix[512] = "";
  dt_status st = visit_tensors(m, prefix, 0, false, fn, user);
  if (!st) st = visit_tensors(m, prefix, 0, true, fn, user);
  return st;
}

static dt_status visit_modules(dt_module *m, char *prefix, size_t len, dt_module_visit_fn fn,
                               void *user) {
  prefix[len] = '\0';
  dt_status st = fn(prefix, m, user);
  for (int i = 0; i < m->n_children && !st; i++) {
    int n = snprintf(prefix + len, 512 - len, "%s%s", len ? "." : "", m->child_names[i]);
    st = visit_modules(m->children[i], prefix, len + (size_t)n, fn, user);
  }
  return st;
}

dt_status dt_module_visit(dt_module *m, dt_module_visit_fn fn, void *user) {
  if (!m || !fn) return dt__error(DT_ERR_INVALID, "dt_module_visit: NULL argument");
  char prefix[512];
  return visit_modules(m, prefix, 0, fn, user);
}

void *dt__module_hook_user(const dt_module *m, dt_hook_fn pre) {
  for (int i = 0; m && i < m->n_hooks; i++)
    if (m->hooks[i].pre == pre) return m->hooks[i].user;
  return NULL;
}

void dt_module_set_hooks(dt_module *m, dt_hook_fn pre, dt_hook_fn post, void *user,
                         void (*release)(void *user)) {
  if (!m) return;
  clear_hooks(m);
  if (!pre && !post) {
    /* Removing the hooks: user is not kept, but it was handed over. */
    if (release) release(user);
    return;
  }
  m->hooks[0].pre = pre;
  m->hooks[0].post = post;
  m->hooks[0].user = user;
  m->hooks[0].release = release;
  m->n_hooks = 1;
}

dt_status dt_module_add_hooks(dt_module *m, dt_hook_fn pre, dt_hook_fn post, void *user,
                              void (*release)(void *user)) {
  if (!m || (!pre && !post)) {
    if (release) release(user);
    return dt__error(DT_ERR_INVALID, "dt_module_add_hooks: %s",
                     m ? "pre and post are both NULL" : "module is NULL");
  }
  if (m->n_hooks >= DT_MODULE_MAX_HOOKS) {
    if (release) release(user);
    return dt__error(DT_ERR_INVALID,
                     "dt_module_add_hooks: '%s' already has %d hook pairs (at most %d)", m->type,
                     m->n_hooks, DT_MODULE_MAX_HOOKS);
  }
  m->hooks[m->n_hooks].pre = pre;
  m->hooks[m->n_hooks].post = post;
  m->hooks[m->n_hooks].user = user;
  m->hooks[m->n_hooks].release = release;
  m->n_hooks++;
  return DT_OK;
}

/* ---- Forward -----------------------------------------------------------------------------------
 */

/* Replaces *t by what hook makes of it; the old tensor is released either way. */
static dt_status apply_hook(dt_module *m, dt_hook_fn hook, void *user, dt_tensor **t) {
  dt_tensor *next = NULL;
  dt_status st = hook(m, *t, &next, user);
  dt_tensor_release(*t);
  *t = next;
  return st;
}

/* After a failure, the pairs from index `from` outwards whose post hook will not run get it
 * with a NULL input, so that they release what their pre hook took (dt_parallel_fsdp's gathered
 * parameters). What they return is dropped; the first error and its message stand. */
static void unwind_hooks(dt_module *m, int from, dt_status st) {
  char message[1024];
  snprintf(message, sizeof message, "%s", dt_last_error());
  for (int i = from; i < m->n_hooks; i++) {
    dt_tensor *none = NULL;
    if (m->hooks[i].post) m->hooks[i].post(m, NULL, &none, m->hooks[i].user);
    dt_tensor_release(none);
  }
  if (strcmp(message, dt_last_error()) != 0) dt__error(st, "%s", message);
}

static dt_status forward_plain(dt_module *m, dt_tensor *input, dt_tensor **out);

/* Whether any parameter of the tree requires grad (a checkpointed module's node is needed). */
static dt_status any_requires_grad(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  if (!is_buffer && dt_tensor_requires_grad(t)) *(bool *)user = true;
  return DT_OK;
}

dt_status dt_module_forward(dt_module *m, dt_tensor *input, dt_tensor **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_module_forward: out is NULL");
  *out = NULL;
  if (!m || !input) return dt__error(DT_ERR_INVALID, "dt_module_forward: NULL module or input");
  if (!m->forward)
    return dt__error(DT_ERR_INVALID, "dt_module_forward: %s has no forward", m->type);
  if (m->checkpoint && dt_grad_mode_enabled()) {
    bool params = false;
    dt_module_visit_tensors(m, any_requires_grad, &params);
    return dt__checkpoint_forward(m, m->type, params, forward_plain, input, out);
  }
  return forward_plain(m, input, out);
}

dt_status dt_module_set_checkpoint(dt_module *m, bool enabled) {
  if (!m) return dt__error(DT_ERR_INVALID, "dt_module_set_checkpoint: module is NULL");
  if (enabled && !m->forward) {
    return dt__error(DT_ERR_INVALID, "dt_module_set_checkpoint: %s has no forward to recompute",
                     m->type);
  }
  m->checkpoint = enabled;
  return DT_OK;
}

bool dt_module_checkpointed(const dt_module *m) { return m && m->checkpoint; }

static dt_status forward_plain(dt_module *m, dt_tensor *input, dt_tensor **out) {
  /* The last pair added is the outermost: pre hooks run from the last added to the first,
   * post hooks from the first to the last. */
  dt_tensor *x = dt_tensor_retain(input), *y = NULL;
  dt_status st = DT_OK;
  int i = m->n_hooks - 1;
  for (; i >= 0 && !st; i--) {
    if (m->hooks[i].pre) st = apply_hook(m, m->hooks[i].pre, m->hooks[i].user, &x);
  }
  if (st) {
    dt_tensor_release(x);
    unwind_hooks(m, i + 2, st); /* the pairs outside the failed one */
    return st;
  }
  st = m->forward(m, x, &y);
  dt_tensor_release(x);
  if (st) {
    unwind_hooks(m, 0, st);
    return st;
  }
  for (i = 0; i < m->n_hooks && !st; i++) {
    if (m->hooks[i].post) st = apply_hook(m, m->hooks[i].post, m->hooks[i].user, &y);
  }
  if (st) {
    dt_tensor_release(y);
    unwind_hooks(m, i, st); /* the pairs outside the failed one */
    return st;
  }
  *out = y;
  return DT_OK;
}

static dt_status linear_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  return dt_linear(x, dt_module_parameter(m, "weight"), dt_module_parameter(m, "bias"), out);
}

static dt_status relu_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  return dt_relu(x, out);
}
static dt_status gelu_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  return dt_gelu(x, out);
}

static dt_status sequential_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor *cur = dt_tensor_retain(x);
  for (int i = 0; i < m->n_children; i++) {
    dt_tensor *next = NULL;
    dt_status st = dt_module_forward(m->children[i], cur, &next);
    dt_tensor_release(cur);
    if (st) return st;
    cur = next;
  }
  *out = cur;
  return DT_OK;
}

static dt_status embedding_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  return dt_embedding(dt_module_parameter(m, "weight"), x, out);
}

static dt_status layer_norm_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  return dt_layer_norm(x, 1, &m->size, dt_module_parameter(m, "weight"),
                       dt_module_parameter(m, "bias"), m->eps, out);
}

static dt_status rms_norm_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  return dt_rms_norm(x, 1, &m->size, dt_module_parameter(m, "weight"), m->eps, out);
}

static dt_status batch_norm_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  return dt_batch_norm(x, dt_module_buffer(m, "running_mean"), dt_module_buffer(m, "running_var"),
                       dt_module_parameter(m, "weight"), dt_module_parameter(m, "bias"), m->eps,
                       out);
}

/* ---- Built-in modules
 * ----------------------------------------------------------------------------- */

/* Uniform in [-bound, bound) from the seed's stream. */
static dt_status uniform(int ndim, const int64_t *shape, double bound, uint64_t seed,
                         dt_tensor **out) {
  dt_status st = dt_rand(ndim, shape, DT_F32, seed, out);
  if (!st) st = dt_mul_scalar_(*out, 2 * bound);
  if (!st) st = dt_add_scalar_(*out, -bound);
  if (st) {
    dt_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

static dt_status finish(dt_module *m, dt_status st, dt_module **out) {
  if (st) {
    dt_module_destroy(m);
    return st;
  }
  *out = m;
  return DT_OK;
}

dt_status dt_nn_linear(int64_t in_features, int64_t out_features, bool bias, uint64_t seed,
                       dt_module **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_nn_linear: out is NULL");
  *out = NULL;
  if (in_features < 1 || out_features < 1) {
    return dt__error(DT_ERR_INVALID,
                     "dt_nn_linear: in_features and out_features must be >= 1 (got %lld, %lld)",
                     (long long)in_features, (long long)out_features);
  }
  dt_module *m = NULL;
  dt_status st = dt_module_create("Linear", linear_forward, NULL, &m);
  if (st) return st;
  double bound = 1.0 / sqrt((double)in_features);
  int64_t wshape[2] = {out_features, in_features};
  dt_tensor *t = NULL;
  st = uniform(2, wshape, bound, seed, &t);
  st = add_owned(m, "weight", t, false, st);
  if (!st && bias) {
    t = NULL;
    st = uniform(1, &out_features, bound, seed ^ 0x5bd1e995u, &t);
    st = add_owned(m, "bias", t, false, st);
  }
  return finish(m, st, out);
}

static dt_status simple(const char *type, dt_forward_fn fn, dt_module **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", type);
  *out = NULL;
  return dt_module_create(type, fn, NULL, out);
}

dt_status dt_nn_relu(dt_module **out) { return simple("ReLU", relu_forward, out); }
dt_status dt_nn_gelu(dt_module **out) { return simple("GELU", gelu_forward, out); }

static dt_status container(const char *type, dt_forward_fn fn, int n, dt_module *const *children,
                           dt_module **out) {
  dt_status st = DT_OK;
  if (!out)
    st = dt__error(DT_ERR_INVALID, "%s: out is NULL", type);
  else
    *out = NULL;
  if (!st && (n < 0 || n > MAX_PARTS || (n > 0 && !children))) {
    st = dt__error(DT_ERR_INVALID, "%s: %d children (expected 0..%d)", type, n, MAX_PARTS);
  }
  dt_module *m = NULL;
  if (!st) st = dt_module_create(type, fn, NULL, &m);
  for (int i = 0; i < n && children; i++) {
    if (st || !children[i]) {
      dt_module_destroy(children[i]);
      if (!st) st = dt__error(DT_ERR_INVALID, "%s: child %d is NULL", type, i);
      continue;
    }
    char name[16];
    snprintf(name, sizeof name, "%d", i);
    st = dt_module_add_child(m, name, children[i]);
  }
  if (st) {
    dt_module_destroy(m);
    return st;
  }
  *out = m;
  return DT_OK;
}

dt_status dt_nn_sequential(int n, dt_module *const *children, dt_module **out) {
  return container("Sequential", sequential_forward, n, children, out);
}

dt_status dt_nn_module_list(int n, dt_module *const *children, dt_module **out) {
  return container("ModuleList", NULL, n, children, out);
}

dt_status dt_nn_embedding(int64_t num_embeddings, int64_t embedding_dim, uint64_t seed,
                          dt_module **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_nn_embedding: out is NULL");
  *out = NULL;
  if (num_embeddings < 1 || embedding_dim < 1) {
    return dt__error(DT_ERR_INVALID, "dt_nn_embedding: sizes must be >= 1 (got %lld, %lld)",
                     (long long)num_embeddings, (long long)embedding_dim);
  }
  dt_module *m = NULL;
  dt_status st = dt_module_create("Embedding", embedding_forward, NULL, &m);
  if (st) return st;
  int64_t shape[2] = {num_embeddings, embedding_dim};
  dt_tensor *t = NULL;
  st = dt_randn(2, shape, DT_F32, seed, &t);
  st = add_owned(m, "weight", t, false, st);
  return finish(m, st, out);
}

static dt_status check_norm(const char *type, int64_t n, double eps, dt_module **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", type);
  *out = NULL;
  if (n < 1)
    return dt__error(DT_ERR_INVALID, "%s: size must be >= 1 (got %lld)", type, (long long)n);
  if (!(eps > 0) || !isfinite(eps))
    return dt__error(DT_ERR_INVALID, "%s: eps must be positive (got %g)", type, eps);
  return DT_OK;
}

/* Adds a new tensor of `shape` filled with `value` as parameter or buffer `name`; passes an
 * earlier error st through untouched. */
static dt_status add_filled(dt_module *m, const char *name, int ndim, const int64_t *shape,
                            dt_dtype dtype, double value, bool buffer, dt_status st) {
  if (st) return st;
  dt_tensor *t = NULL;
  st = dt_full(ndim, shape, value, dtype, &t);
  return add_owned(m, name, t, buffer, st);
}

/* What LayerNorm and BatchNorm1d share: checked arguments (out too), eps, and an affine
 * weight (ones) and bias (zeros) of n elements. *m is what was made, for finish(). */
static dt_status norm_module(const char *type, dt_forward_fn forward, int64_t n, double eps,
                             dt_module **out, dt_module **m) {
  *m = NULL;
  dt_status st = check_norm(type, n, eps, out);
  if (!st) st = dt_module_create(type, forward, NULL, m);
  if (st) return st;
  (*m)->eps = eps;
  st = add_filled(*m, "weight", 1, &n, DT_F32, 1.0, false, st);
  return add_filled(*m, "bias", 1, &n, DT_F32, 0.0, false, st);
}

dt_status dt_nn_layer_norm(int64_t normalized_dim, double eps, dt_module **out) {
  dt_module *m;
  dt_status st = norm_module("LayerNorm", layer_norm_forward, normalized_dim, eps, out, &m);
  if (!st) m->size = normalized_dim;
  return finish(m, st, out);
}

dt_status dt_nn_rms_norm(int64_t dim, double eps, dt_module **out) {
  dt_module *m = NULL;
  dt_status st = check_norm("dt_nn_rms_norm", dim, eps, out);
  if (!st) st = dt_module_create("RMSNorm", rms_norm_forward, NULL, &m);
  if (st) return st;
  m->eps = eps;
  m->size = dim;
  st = add_filled(m, "weight", 1, &dim, DT_F32, 1.0, false, st);
  return finish(m, st, out);
}

dt_status dt_nn_batch_norm1d(int64_t num_features, double eps, dt_module **out) {
  dt_module *m;
  dt_status st = norm_module("BatchNorm1d", batch_norm_forward, num_features, eps, out, &m);
  st = add_filled(m, "running_mean", 1, &num_features, DT_F32, 0.0, true, st);
  st = add_filled(m, "running_var", 1, &num_features, DT_F32, 1.0, true, st);
  st = add_filled(m, "num_batches_tracked", 0, NULL, DT_I64, 0.0, true, st);
  return finish(m, st, out);
}

dt_status dt_nn_mlp(int64_t in_features, int64_t hidden, int64_t out_features, bool hidden_bias,
                    bool output_bias, uint64_t seed, dt_module **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_nn_mlp: out is NULL");
  *out = NULL;
  dt_module *parts[3] = {NULL, NULL, NULL};
  dt_status st = dt_nn_linear(in_features, hidden, hidden_bias, seed, &parts[0]);
  if (!st) st = dt_nn_relu(&parts[1]);
  if (!st) st = dt_nn_linear(hidden, out_features, output_bias, seed + 1, &parts[2]);
  if (st) {
    for (int i = 0; i < 3; i++) dt_module_destroy(parts[i]);
    return st;
  }
  return dt_nn_sequential(3, parts, out);
}
