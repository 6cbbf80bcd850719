/*
 * State dicts: a safetensors file loaded into a module tree by FQN (PyTorch's
 * load_state_dict), and a module's parameters and buffers saved as one file.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint/checkpoint_impl.h"
#include "checkpoint/checkpoint_meta.h"
#include "autograd/autograd_impl.h"
#include "core/core_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/nn.h"
#include "dtensor/ops.h"

/* A growing comma-separated list of keys, for the report and messages. */
typedef struct key_list {
  dt__ckpt_text text; /* NUL-terminated once a key is in */
  int count;
} key_list;

static void key_list_add(key_list *list, const char *key) {
  dt__ckpt_text *t = &list->text;
  size_t n = strlen(key);
  if (!dt__ckpt_text_reserve(t, n + 3)) return;
  if (list->count) {
    memcpy(t->data + t->length, ", ", 2);
    t->length += 2;
  }
  memcpy(t->data + t->length, key, n);
  t->length += n;
  t->data[t->length] = '\0';
  list->count++;
}

/* One parameter or buffer of the module and, once read, its new value. */
typedef struct slot {
  const char *fqn; /* borrowed from the visit: copied into `names` */
  dt_tensor *target;
  dt_tensor *value;
  bool found;
} slot;

typedef struct slot_list {
  slot *items;
  int count, capacity;
  char *names; /* every FQN, NUL-separated; grown as slots are added */
  size_t names_length, names_capacity;
  size_t *name_offsets;
  bool failed;
} slot_list;

static dt_status collect_slot(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)is_buffer;
  slot_list *list = user;
  if (!dt__reserve_arrays(list->count, &list->capacity, 16, 2,
                          (void *[]){&list->items, &list->name_offsets},
                          (size_t[]){sizeof *list->items, sizeof *list->name_offsets})) {
    return dt__error(DT_ERR_NOMEM, "dt_state_dict_load: cannot allocate for %d tensors",
                     list->capacity ? list->capacity * 2 : 16);
  }
  size_t n = strlen(fqn) + 1;
  if (list->names_length + n > list->names_capacity) {
    size_t capacity = (list->names_length + n) * 2;
    char *names = dt__alloc(capacity);
    if (!names) return dt__error(DT_ERR_NOMEM, "dt_state_dict_load: cannot allocate names");
    if (list->names_length) memcpy(names, list->names, list->names_length);
    dt__free(list->names);
    list->names = names;
    list->names_capacity = capacity;
  }
  memcpy(list->names + list->names_length, fqn, n);
  list->name_offsets[list->count] = list->names_length;
  list->names_length += n;
  list->items[list->count].target = t;
  list->count++;
  return DT_OK;
}

static void slot_list_free(slot_list *list) {
  for (int i = 0; i < list->count; i++) dt_tensor_release(list->items[i].value);
  dt__free(list->items);
  dt__free(list->name_offsets);
  dt__free(list->names);
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t size) {
  size_t at = (size_t)snprintf(buf, size, "[");
  for (int d = 0; d < ndim && at < size; d++)
    at += (size_t)snprintf(buf + at, size - at, "%s%" PRId64, d ? ", " : "", shape[d]);
  if (at < size) snprintf(buf + at, size - at, "]");
}

void dt_state_dict_report_clear(dt_state_dict_report *report) {
  if (!report) return;
  dt__free(report->missing);
  dt__free(report->unexpected);
  memset(report, 0, sizeof *report);
}

dt_status dt_state_dict_load(dt_module *module, dt_safetensors *file,
                             const dt_state_dict_options *options, dt_state_dict_report *report) {
  static const char op[] = "dt_state_dict_load";
  if (report) memset(report, 0, sizeof *report);
  if (!module || !file)
    return dt__error(DT_ERR_INVALID, "%s: %s is NULL", op, !module ? "module" : "file");
  bool strict = !(options && options->non_strict);
  slot_list slots = {0};
  key_list missing = {0}, unexpected = {0};
  dt_status st = dt_module_visit_tensors(module, collect_slot, &slots);
  if (st) goto done;
  for (int i = 0; i < slots.count; i++) slots.items[i].fqn = slots.names + slots.name_offsets[i];
  /* Keys first: in strict mode nothing is read or changed unless the names match exactly. */
  for (int i = 0; i < slots.count; i++) {
    slots.items[i].found = dt_safetensors_find(file, slots.items[i].fqn) >= 0;
    if (!slots.items[i].found) key_list_add(&missing, slots.items[i].fqn);
  }
  for (int e = 0; e < dt_safetensors_count(file); e++) {
    dt_safetensors_entry_info entry;
    dt_safetensors_entry(file, e, &entry);
    bool known = false;
    for (int i = 0; i < slots.count && !known; i++) known = !strcmp(slots.items[i].fqn, entry.name);
    if (!known) key_list_add(&unexpected, entry.name);
  }
  if (missing.text.failed || unexpected.text.failed) {
    st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate the list of keys", op);
    goto done;
  }
  if (strict && (missing.count || unexpected.count)) {
    /* The unexpected keys are the file's names: escaped, as every text from a file. */
    st = dt__error(DT_ERR_INVALID, "%s: %s: %d missing key(s)%s%s, %d unexpected key(s)%s%s", op,
                   file->label, missing.count, missing.count ? ": " : "",
                   missing.count ? dt__ckpt_shown(0, missing.text.data) : "", unexpected.count,
                   unexpected.count ? ": " : "",
                   unexpected.count ? dt__ckpt_shown(1, unexpected.text.data) : "");
    goto done;
  }
  /* Then every value is read and checked before any is installed, so a failure leaves the
   * module as it was. */
  for (int i = 0; i < slots.count; i++) {
    slot *s = &slots.items[i];
    if (!s->found) continue;
    dt_safetensors_entry_info entry;
    dt_safetensors_entry(file, dt_safetensors_find(file, s->fqn), &entry);
    bool dist = dt_tensor_is_distributed(s->target);
    int ndim = dist ? dt_dist_ndim(s->target) : dt_tensor_ndim(s->target);
    const int64_t *shape = dist ? dt_dist_global_shape(s->target) : dt_tensor_shape(s->target);
    bool same_shape = ndim == entry.ndim;
    for (int d = 0; d < ndim && same_shape; d++) same_shape = shape[d] == entry.shape[d];
    if (!same_shape || entry.dtype != dt_tensor_dtype(s->target)) {
      char want[160], have[160];
      shape_text(ndim, shape, want, sizeof want);
      shape_text(entry.ndim, entry.shape, have, sizeof have);
      st = dt__error(DT_ERR_INVALID, "%s: key `%s`: the file holds %s %s, the module expects %s %s",
                     op, s->fqn, dt_dtype_name(entry.dtype), have,
                     dt_dtype_name(dt_tensor_dtype(s->target)), want);
      goto done;
    }
    if (dist) {
      /* Each rank reads only its own block, in the placements the module already has. */
      st = dt_safetensors_load_distributed(file, s->fqn, dt_dist_mesh(s->target),
                                           dt_mesh_ndim(dt_dist_mesh(s->target)),
                                           dt_dist_placements(s->target), &s->value);
    } else {
      st = dt_safetensors_load(file, s->fqn, DT_SAFETENSORS_COPY, &s->value);
    }
    if (st) goto done;
  }
  /* Every value is in hand: copied into the tensors the module already holds, so handles,
   * placements and requires_grad stay, and whoever else holds them (an optimizer, FSDP's
   * units) sees the new values. */
  for (int i = 0; i < slots.count && !st; i++) {
    if (slots.items[i].value)
      st = dt__copy_values_no_grad(slots.items[i].target, slots.items[i].value);
  }
  if (st) {
    dt__error_prefix(op);
    goto done;
  }
  if (report) {
    report->n_missing = missing.count;
    report->n_unexpected = unexpected.count;
    report->missing = missing.text.data;
    report->unexpected = unexpected.text.data;
    missing.text.data = unexpected.text.data = NULL;
  }
done:
  dt__free(missing.text.data);
  dt__free(unexpected.text.data);
  slot_list_free(&slots);
  return st;
}

/* ---- Saving ------------------------------------------------------------------------------- */

dt_status dt_state_dict_save(const dt_module *module, const char *path) {
  static const char op[] = "dt_state_dict_save";
  if (!module || !path)
    return dt__error(DT_ERR_INVALID, "%s: %s is NULL", op, !module ? "module" : "path");
  slot_list slots = {0};
  const char **names = NULL;
  dt_tensor **tensors = NULL;
  dt_status st = dt_module_visit_tensors(module, collect_slot, &slots);
  if (st) goto done;
  names = dt__calloc(sizeof *names * (size_t)(slots.count + 1));
  tensors = dt__calloc(sizeof *tensors * (size_t)(slots.count + 1));
  if (!names || !tensors) {
    st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate for %d tensors", op, slots.count);
    goto done;
  }
  /* Distributed parameters are gathered (collective over their mesh); every rank then holds
   * the same full values and the rank at mesh coordinate 0 writes them. */
  bool writer = true;
  for (int i = 0; i < slots.count; i++) {
    slot *s = &slots.items[i];
    names[i] = slots.names + slots.name_offsets[i];
    if (dt_tensor_is_distributed(s->target)) {
      dt_mesh *mesh = dt_dist_mesh(s->target);
      for (int m = 0; m < dt_mesh_ndim(mesh); m++)
        if (dt_mesh_coordinate(mesh, m) != 0) writer = false;
      st = dt_dist_full_tensor(s->target, &s->value);
      if (st) goto done;
    } else {
      s->value = dt_tensor_retain(s->target);
    }
    tensors[i] = s->value;
  }
  if (writer) {
    st = dt_safetensors_save(path, slots.count, names, tensors, 0, NULL, NULL);
    /* The message names the function the caller called, then the writer's reason. */
    if (st) dt__error_prefix("dt_state_dict_save");
  }
done:
  dt__free(names);
  dt__free(tensors);
  slot_list_free(&slots);
  return st;
}
