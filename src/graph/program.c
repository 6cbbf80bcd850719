/* Programs: a graph plus the state dict its parameter and buffer nodes name. */
#include <stdio.h>
#include <string.h>

#include "graph/graph_impl.h"

void dt_program_destroy(dt_program *program) {
  if (!program) return;
  dt__free_strings(program->state_names, program->n_state);
  dt__tensors_free(program->state_tensors, program->n_state);
  for (int i = 0; i < program->n_modules; i++) {
    dt__free(program->modules[i].fqn);
    dt__free(program->modules[i].type);
  }
  dt__free(program->modules);
  dt_graph_destroy(program->graph);
  dt__free(program);
}

/* The entry for a parameter/buffer node: the state-dict entry of that name, checked
 * against the node's declared type (symbols never appear in parameters). */
static dt_status check_entry(const char *fn, const dt_node *node, const dt_tensor *t) {
  dt_value_type have;
  dt__type_from_tensor(&have, t);
  if (t->spec) {
    have.ndim = t->spec->ndim;
    memcpy(have.shape, t->spec->shape, sizeof(int64_t) * (size_t)t->spec->ndim);
  }
  if (!dt__type_equal(&have, &node->types[0])) {
    char a[256], b[256];
    return dt__error(DT_ERR_INVALID, "%s: state entry '%s' is %s but the graph declares %s", fn,
                     node->name, dt__type_format(a, sizeof a, &have),
                     dt__type_format(b, sizeof b, &node->types[0]));
  }
  return DT_OK;
}

dt_status dt__program_create_owned(const char *fn, dt_graph *graph, int n, const char *const *names,
                                   dt_tensor *const *tensors, dt_program **out) {
  *out = NULL;
  dt_program *p = dt__calloc(sizeof *p);
  int needed = 0;
  for (int i = 0; i < graph->n_nodes; i++) {
    needed += graph->nodes[i].kind == DT_NODE_PARAMETER || graph->nodes[i].kind == DT_NODE_BUFFER;
  }
  if (p) {
    p->graph = graph;
    p->state_names = dt__calloc(sizeof(char *) * (size_t)(needed ? needed : 1));
    p->state_tensors = dt__calloc(sizeof(dt_tensor *) * (size_t)(needed ? needed : 1));
  }
  if (!p || !p->state_names || !p->state_tensors) {
    if (p) p->graph = NULL;
    dt_program_destroy(p);
    dt_graph_destroy(graph);
    return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  }
  dt_status st = DT_OK;
  for (int i = 0; i < graph->n_nodes && !st; i++) {
    const dt_node *node = &graph->nodes[i];
    if (node->kind != DT_NODE_PARAMETER && node->kind != DT_NODE_BUFFER) continue;
    int k = 0;
    while (k < n && (!names[k] || strcmp(names[k], node->name) != 0)) k++;
    if (k == n || !tensors[k]) {
      st = dt__error(DT_ERR_INVALID, "%s: %s '%s' has no state-dict entry", fn,
                     node->kind == DT_NODE_PARAMETER ? "parameter" : "buffer", node->name);
      break;
    }
    st = check_entry(fn, node, tensors[k]);
    if (st) break;
    p->state_names[p->n_state] = dt__strdup(node->name);
    if (!p->state_names[p->n_state]) {
      st = dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
      break;
    }
    p->state_tensors[p->n_state++] = dt_tensor_retain(tensors[k]);
  }
  if (st) {
    dt_program_destroy(p);
    return st;
  }
  *out = p;
  return DT_OK;
}

dt_status dt_program_create(const dt_graph *graph, int n, const char *const *names,
                            dt_tensor *const *tensors, dt_program **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_program_create: out is NULL");
  *out = NULL;
  if (!graph || n < 0 || (n > 0 && (!names || !tensors))) {
    return dt__error(DT_ERR_INVALID, "dt_program_create: NULL graph or state dict");
  }
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < i; j++) {
      if (names[i] && names[j] && strcmp(names[i], names[j]) == 0) {
        return dt__error(
            DT_ERR_INVALID,
            "dt_program_create: state dict name '%s' appears twice (entries %d and %d)", names[i],
            j, i);
      }
    }
  }
  dt_graph *copy = NULL;
  dt_status st = dt_graph_clone(graph, &copy);
  if (st) return st;
  return dt__program_create_owned("dt_program_create", copy, n, names, tensors, out);
}

dt_status dt__program_set_modules(const char *fn, dt_program *p, int n, const char *const *fqns,
                                  const char *const *types) {
  p->modules = dt__calloc(sizeof *p->modules * (size_t)(n ? n : 1));
  if (!p->modules) return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  for (int i = 0; i < n; i++) {
    p->modules[i].fqn = dt__strdup(fqns[i]);
    p->modules[i].type = dt__strdup(types[i]);
    p->n_modules++;
    if (!p->modules[i].fqn || !p->modules[i].type)
      return dt__error(DT_ERR_NOMEM, "%s: out of memory", fn);
  }
  return DT_OK;
}

const dt_graph *dt_program_graph(const dt_program *program) {
  return program ? program->graph : NULL;
}

dt_tensor *dt_program_state(const dt_program *program, const char *name) {
  if (!program || !name) return NULL;
  for (int i = 0; i < program->n_state; i++) {
    if (strcmp(program->state_names[i], name) == 0) return program->state_tensors[i];
  }
  return NULL;
}

int dt_program_state_count(const dt_program *program) { return program ? program->n_state : 0; }

const char *dt_program_state_name(const dt_program *program, int i) {
  return program && i >= 0 && i < program->n_state ? program->state_names[i] : NULL;
}

dt_tensor *dt_program_state_tensor(const dt_program *program, int i) {
  return program && i >= 0 && i < program->n_state ? program->state_tensors[i] : NULL;
}

const char *dt_program_module_type(const dt_program *program, const char *fqn) {
  if (!program || !fqn) return NULL;
  for (int i = 0; i < program->n_modules; i++) {
    if (strcmp(program->modules[i].fqn, fqn) == 0) return program->modules[i].type;
  }
  return NULL;
}
