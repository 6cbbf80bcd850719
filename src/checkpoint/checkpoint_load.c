/*
 * Loading a distributed checkpoint: each rank intersects its block of every target with the
 * saved blocks and preads only the overlap, from data files that are checked against the
 * metadata first (their size, identity and checksum).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint_meta.h"
#include "dtensor/comm.h"
#include "dtensor/ops.h"

static _Thread_local uint64_t bytes_read_here;

uint64_t dt_checkpoint_bytes_read(void) { return bytes_read_here; }

/* The data files a load opened, by metadata file index; each validated on first use. */
typedef struct open_files {
  const char *dir;
  const dt__ckpt_meta *meta;
  bool verify_data;     /* the CRC32C of each file, read whole */
  bool require_records; /* version 3: every block is recorded in its file */
  dt_safetensors **handles;
} open_files;

/* The checks of a file that has an identity (version 2): it says it is the generation and
 * rank the metadata lists it as, and its bytes have the recorded CRC32C. */
static dt_status check_identity(open_files *of, const char *op, const dt__ckpt_file *f,
                                dt_safetensors *h, const char *tensor) {
  const char *g = dt_safetensors_metadata_find(h, DT__CKPT_KEY_GENERATION);
  const char *r = dt_safetensors_metadata_find(h, DT__CKPT_KEY_RANK);
  char want_g[32], want_r[16];
  snprintf(want_g, sizeof want_g, "%" PRId64, f->generation);
  snprintf(want_r, sizeof want_r, "%d", f->rank);
  if (!g || !r)
    return dt__error(
        DT_ERR_INVALID,
        "%s: checkpoint %s is corrupt: %s (read for tensor `%s`) carries no "
        "generation and rank; the metadata lists it as rank %s's file of generation %s",
        op, of->dir, dt__ckpt_shown(0, f->name), dt__ckpt_shown(1, tensor), want_r, want_g);
  if (strcmp(g, want_g) != 0 || strcmp(r, want_r) != 0)
    return dt__error(DT_ERR_INVALID,
                     "%s: checkpoint %s is corrupt: %s (read for tensor `%s`) is rank %s's file "
                     "of generation %s; the metadata lists it as rank %s's file of generation %s "
                     "(a file swapped, or left from another save)",
                     op, of->dir, dt__ckpt_shown(0, f->name), dt__ckpt_shown(1, tensor),
                     dt__ckpt_shown(2, r), dt__ckpt_shown(3, g), want_r, want_g);
  if (!of->verify_data) return DT_OK;
  uint32_t crc = dt__crc32c(0, h->image, h->image_size);
  bytes_read_here += h->image_size;
  if (crc != f->crc32c)
    return dt__error(DT_ERR_INVALID,
                     "%s: checkpoint %s is corrupt: %s (read for tensor `%s`) fails its checksum: "
                     "CRC32C 0x%08x, the metadata records 0x%08x (its bytes changed after the "
                     "save)",
                     op, of->dir, dt__ckpt_shown(0, f->name), dt__ckpt_shown(1, tensor),
                     (unsigned)crc, (unsigned)f->crc32c);
  return DT_OK;
}

static dt_status file_handle(open_files *of, const char *op, int index, const char *tensor,
                             dt_safetensors **out) {
  if (of->handles[index]) {
    *out = of->handles[index];
    return DT_OK;
  }
  const dt__ckpt_file *f = &of->meta->files[index];
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", of->dir, f->name);
  dt_safetensors *h = NULL;
  dt_status st = dt_safetensors_open(path, &h);
  if (st) {
    char message[512];
    snprintf(message, sizeof message, "%s", dt_last_error());
    return dt__error(DT_ERR_INVALID, "%s: checkpoint %s is incomplete or corrupt: %s", op, of->dir,
                     message);
  }
  if (h->image_size != f->bytes) {
    st = dt__error(DT_ERR_INVALID,
                   "%s: checkpoint %s is incomplete or corrupt: %s has %zu bytes, the metadata "
                   "says %" PRIu64,
                   op, of->dir, h->label, h->image_size, f->bytes);
    dt_safetensors_destroy(h);
    return st;
  }
  if (f->has_identity) {
    st = check_identity(of, op, f, h, tensor);
    if (st) {
      dt_safetensors_destroy(h);
      return st;
    }
  }
  of->handles[index] = h;
  *out = h;
  return DT_OK;
}

/* The overlap of saved block b with the target box [toff, toff + tlen): its start lo and
 * lengths len; false when they do not meet. */
static bool overlap_of(int ndim, const dt__ckpt_block *b, const int64_t *toff, const int64_t *tlen,
                       int64_t *lo, int64_t *len) {
  for (int d = 0; d < ndim; d++) {
    int64_t a = toff[d] > b->offsets[d] ? toff[d] : b->offsets[d];
    int64_t e1 = toff[d] + tlen[d], e2 = b->offsets[d] + b->lengths[d];
    int64_t e = e1 < e2 ? e1 : e2;
    if (e <= a) return false;
    lo[d] = a;
    len[d] = e - a;
  }
  return true;
}

/* Block k of t must be in its file where the metadata says, as that file's header says, and
 * (version 3) the file's own record of the block must be the metadata's: FSDP ranks write
 * files of one layout, so a "file" or "offsets" changed in the metadata would otherwise read
 * another block's bytes without a word. */
static dt_status check_block_file(open_files *of, const char *op, const dt__ckpt_tensor *t, int k,
                                  dt_safetensors *h) {
  const dt__ckpt_block *b = &t->blocks[k];
  int index = dt_safetensors_find(h, t->name);
  dt_safetensors_entry_info e;
  if (index < 0 || dt_safetensors_entry(h, index, &e) || h->data_start + e.data_begin != b->begin ||
      h->data_start + e.data_end != b->end || e.dtype != t->dtype)
    return dt__error(DT_ERR_INVALID,
                     "%s: checkpoint %s is corrupt: %s does not hold tensor `%s` at bytes "
                     "[%" PRIu64 ", %" PRIu64 ")",
                     op, of->dir, h->label, dt__ckpt_shown(0, t->name), b->begin, b->end);
  size_t key_size = sizeof DT__CKPT_KEY_BLOCK + strlen(t->name);
  char *key = dt__alloc(key_size);
  if (!key) return dt__error(DT_ERR_NOMEM, "%s: cannot allocate a block's key", op);
  snprintf(key, key_size, "%s%s", DT__CKPT_KEY_BLOCK, t->name);
  const char *theirs = dt_safetensors_metadata_find(h, key);
  dt__free(key);
  if (!theirs && !of->require_records) return DT_OK;
  char ours[DT__CKPT_RECORD_MAX];
  dt__ckpt_block_record(t->ndim, b->offsets, b->lengths, ours, sizeof ours);
  if (theirs && strcmp(theirs, ours) == 0) return DT_OK;
  const char *file = of->meta->files[b->file].name;
  if (!theirs)
    return dt__error(DT_ERR_INVALID,
                     "%s: checkpoint %s is corrupt: the metadata says block %d of tensor `%s` "
                     "(%s) is in %s (file %d); that file records no block of `%s`",
                     op, of->dir, k, dt__ckpt_shown(0, t->name), ours, dt__ckpt_shown(1, file),
                     b->file, dt__ckpt_shown(0, t->name));
  /* The file's record came from a file: it is escaped like every such text. */
  return dt__error(DT_ERR_INVALID,
                   "%s: checkpoint %s is corrupt: the metadata says block %d of tensor `%s` (%s) "
                   "is in %s (file %d); that file holds the block of `%s` at %s (a block's "
                   "\"file\" or \"offsets\" changed in the metadata)",
                   op, of->dir, k, dt__ckpt_shown(0, t->name), ours, dt__ckpt_shown(1, file),
                   b->file, dt__ckpt_shown(0, t->name), dt__ckpt_shown(2, theirs));
}

/* Copies the overlap [lo, lo + len) of saved block b into dst (the target box at toff of
 * lengths tlen, row-major), reading runs of contiguous bytes with pread. */
static dt_status copy_overlap(dt_safetensors *h, const char *op, const dt__ckpt_tensor *t,
                              const dt__ckpt_block *b, const int64_t *lo, const int64_t *len,
                              const int64_t *toff, const int64_t *tlen, char *dst,
                              int64_t *copied) {
  int ndim = t->ndim;
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) numel *= len[d];
  size_t elem = dt_dtype_size(t->dtype);
  if (ndim == 0) {
    dt_status st = dt__safetensors_read(h, op, b->begin, dst, elem);
    if (!st) *copied += 1;
    return st;
  }
  /* k: dims after k are whole in the overlap, the saved block and the target, so a run of
   * len[k] * (their product) elements is contiguous on both sides. */
  int k = ndim - 1;
  while (k > 0 && len[k] == b->lengths[k] && len[k] == tlen[k]) k--;
  int64_t inner = 1;
  for (int d = k + 1; d < ndim; d++) inner *= len[d];
  size_t run = (size_t)(len[k] * inner) * elem;
  int64_t index_at[DT_MAX_DIMS] = {0};
  for (;;) {
    int64_t src = 0, dst_at = 0;
    for (int d = 0; d < ndim; d++) {
      int64_t g = lo[d] + (d < k ? index_at[d] : 0);
      src = src * b->lengths[d] + (d <= k ? g - b->offsets[d] : 0);
      dst_at = dst_at * tlen[d] + (d <= k ? g - toff[d] : 0);
    }
    dt_status st = dt__safetensors_read(h, op, b->begin + (uint64_t)src * elem,
                                        dst + dst_at * (int64_t)elem, run);
    if (st) return st;
    bytes_read_here += run;
    int d = k - 1;
    while (d >= 0 && ++index_at[d] == len[d]) index_at[d--] = 0;
    if (d < 0) break;
  }
  *copied += numel;
  return DT_OK;
}

/* The saved tensor `name` and this rank's box [toff, toff + tlen) of target: refused when
 * the checkpoint lacks the name, the dtype or global shape differ, or the target's placements
 * cannot be loaded. */
static dt_status target_box(const char *op, const char *dir, const dt__ckpt_meta *meta,
                            const char *name, dt_tensor *target, const dt__ckpt_tensor **out,
                            int64_t *toff, int64_t *tlen) {
  int found = dt__name_index_find(&meta->names, name);
  const dt__ckpt_tensor *t = found >= 0 ? &meta->tensors[found] : NULL;
  if (!t) return dt__error(DT_ERR_INVALID, "%s: checkpoint %s has no tensor `%s`", op, dir, name);
  *out = t;
  bool dist = dt_tensor_is_distributed(target);
  int ndim = dist ? dt_dist_ndim(target) : dt_tensor_ndim(target);
  const int64_t *shape = dist ? dt_dist_global_shape(target) : dt_tensor_shape(target);
  bool same = ndim == t->ndim && dt_tensor_dtype(target) == t->dtype;
  for (int d = 0; same && d < ndim; d++) same = shape[d] == t->shape[d];
  if (!same) {
    char saved_shape[160], target_shape[160];
    return dt__error(DT_ERR_INVALID,
                     "%s: tensor `%s`: the checkpoint holds %s %s, the target is %s %s", op, name,
                     dt_dtype_name(t->dtype),
                     dt__format_ints(saved_shape, sizeof saved_shape, t->ndim, t->shape),
                     dt_dtype_name(dt_tensor_dtype(target)),
                     dt__format_ints(target_shape, sizeof target_shape, ndim, shape));
  }
  if (!dist) {
    for (int d = 0; d < ndim; d++) {
      toff[d] = 0;
      tlen[d] = shape[d];
    }
    return DT_OK;
  }
  dt_mesh *tm = dt_dist_mesh(target);
  const dt_placement *p = dt_dist_placements(target);
  int coords[DT_MAX_DIMS], mesh_ndim = dt_mesh_ndim(tm);
  for (int m = 0; m < mesh_ndim; m++) {
    coords[m] = dt_mesh_coordinate(tm, m);
    if (p[m].kind == DT_STRIDED_SHARD)
      return dt__error(DT_ERR_UNSUPPORTED,
                       "%s: tensor `%s`: a StridedShard target SS(%d,%d) (mesh dim %d) cannot "
                       "be loaded; load as Shard or Replicate",
                       op, name, p[m].dim, p[m].split_factor, m);
    if (p[m].kind != DT_SHARD && p[m].kind != DT_REPLICATE)
      return dt__error(DT_ERR_INVALID,
                       "%s: tensor `%s`: a Partial target (mesh dim %d) cannot "
                       "be loaded; load as Replicate",
                       op, name, m);
  }
  dt__ckpt_block_at(ndim, shape, mesh_ndim, dt_mesh_shape(tm), coords, p, toff, tlen);
  return DT_OK;
}

/* Fills target i from the blocks its box overlaps (their files checked already). */
static dt_status load_one(open_files *of, const char *op, const dt__ckpt_tensor *t,
                          dt_tensor *target, const int64_t *toff, const int64_t *tlen) {
  dt_tensor *local = NULL, *buffer = NULL;
  dt_status st = dt_tensor_is_distributed(target) ? dt_dist_to_local(target, &local)
                                                  : (local = dt_tensor_retain(target), DT_OK);
  if (st) return st;
  /* Read into a contiguous buffer (the target's own memory when it is contiguous). */
  if (dt_tensor_is_contiguous(local))
    buffer = dt_tensor_retain(local);
  else
    st = dt_empty(t->ndim, tlen, t->dtype, &buffer);
  int64_t copied = 0, want = 1;
  for (int d = 0; d < t->ndim; d++) want *= tlen[d];
  for (int k = 0; k < t->n_blocks && !st && want > 0; k++) {
    int64_t lo[DT_MAX_DIMS], len[DT_MAX_DIMS];
    const dt__ckpt_block *b = &t->blocks[k];
    if (!overlap_of(t->ndim, b, toff, tlen, lo, len)) continue;
    st = copy_overlap(of->handles[b->file], op, t, b, lo, len, toff, tlen, dt_tensor_data(buffer),
                      &copied);
  }
  if (!st && copied != want)
    st = dt__error(DT_ERR_INVALID,
                   "%s: checkpoint %s is corrupt: the blocks of `%s` cover %" PRId64
                   " of the %" PRId64 " elements this rank needs",
                   op, of->dir, dt__ckpt_shown(0, t->name), copied, want);
  if (!st && buffer != local) st = dt_copy_(local, buffer);
  dt_tensor_release(buffer);
  dt_tensor_release(local);
  return st;
}

dt_status dt_checkpoint_load(const char *dir, int count, const char *const *names,
                             dt_tensor *const *tensors) {
  return dt_checkpoint_load_ex(dir, count, names, tensors, NULL);
}

/* The group the ranks of a load agree over: the world of the distributed targets' mesh, NULL
 * when every target is local (a load by one process, without communication). Targets on meshes
 * of two worlds are refused: no one group covers the ranks that must agree. */
static dt_status load_group(const char *op, int count, const char *const *names,
                            dt_tensor *const *tensors, dt_comm **out) {
  *out = NULL;
  int first = -1;
  for (int i = 0; i < count; i++) {
    if (!dt_tensor_is_distributed(tensors[i])) continue;
    dt_comm *world = dt_mesh_world(dt_dist_mesh(tensors[i]));
    if (first < 0) {
      first = i;
      *out = world;
    } else if (world != *out) {
      *out = NULL;
      return dt__error(DT_ERR_INVALID,
                       "%s: tensors `%s` and `%s` are on meshes of two worlds (%d and %d ranks); "
                       "load the tensors of each world in a call of their own",
                       op, names[first], names[i],
                       dt_comm_size(dt_mesh_world(dt_dist_mesh(tensors[first]))),
                       dt_comm_size(world));
    }
  }
  return DT_OK;
}

/* Every rank of the group returns the same status: the lowest failing rank's, its message
 * prefixed "rank R:" on the others. */
static dt_status agree(dt_comm *group, const char *op, dt_status mine) {
  dt_objects *all = NULL;
  bool heard = false;
  dt_status st = dt__ckpt_phase_agree(group, op, mine, NULL, 0, &all, &heard);
  dt_free(all);
  return st;
}

/* Every target, every block it overlaps and that block's file, checked before any data is
 * copied. */
static dt_status check_targets(open_files *of, const char *op, int count, const char *const *names,
                               dt_tensor *const *tensors) {
  dt_status st = DT_OK;
  for (int i = 0; i < count && !st; i++) {
    const dt__ckpt_tensor *t = NULL;
    int64_t toff[DT_MAX_DIMS], tlen[DT_MAX_DIMS], lo[DT_MAX_DIMS], len[DT_MAX_DIMS];
    st = target_box(op, of->dir, of->meta, names[i], tensors[i], &t, toff, tlen);
    for (int k = 0; !st && k < t->n_blocks; k++) {
      if (!overlap_of(t->ndim, &t->blocks[k], toff, tlen, lo, len)) continue;
      dt_safetensors *h = NULL;
      st = file_handle(of, op, t->blocks[k].file, t->name, &h);
      if (!st) st = check_block_file(of, op, t, k, h);
    }
  }
  return st;
}

dt_status dt_checkpoint_load_ex(const char *dir, int count, const char *const *names,
                                dt_tensor *const *tensors,
                                const dt_checkpoint_load_options *options) {
  static const char op[] = "dt_checkpoint_load";
  if (!dir) return dt__error(DT_ERR_INVALID, "%s: dir is NULL", op);
  if (count < 0 || (count > 0 && (!names || !tensors)))
    return dt__error(DT_ERR_INVALID, "%s: count %d with %s", op, count,
                     count < 0 ? "a negative count"
                     : !names  ? "NULL names"
                               : "NULL tensors");
  for (int i = 0; i < count; i++)
    if (!names[i] || !tensors[i])
      return dt__error(DT_ERR_INVALID, "%s: %s[%d] is NULL", op, !names[i] ? "names" : "tensors",
                       i);
  dt_comm *group = NULL;
  dt_status st = load_group(op, count, names, tensors, &group);
  if (st) return st;
  dt__ckpt_meta meta;
  st = dt__ckpt_meta_read(dir, op, &meta, NULL);
  open_files of = {.dir = dir,
                   .meta = &meta,
                   .verify_data = !(options && options->skip_data_checksum),
                   .require_records = meta.version >= 3};
  if (!st) {
    of.handles = dt__calloc(sizeof *of.handles * (size_t)(meta.n_files + 1));
    if (!of.handles)
      st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate for %d files", op, meta.n_files);
  }
  /* First the checks, so a damaged checkpoint is refused before a target changes. Each rank
   * checks only the files its blocks come from, so with distributed targets the ranks agree
   * on the verdict before any of them copies: either every rank loads or none changes a byte,
   * and all return the failing rank's error. */
  if (!st) st = check_targets(&of, op, count, names, tensors);
  if (group) st = agree(group, op, st);
  bool copying = !st;
  for (int i = 0; i < count && !st; i++) {
    const dt__ckpt_tensor *t = NULL;
    int64_t toff[DT_MAX_DIMS], tlen[DT_MAX_DIMS];
    st = target_box(op, dir, &meta, names[i], tensors[i], &t, toff, tlen);
    if (!st) st = load_one(&of, op, t, tensors[i], toff, tlen);
  }
  /* An I/O error while copying is known on every rank too, though the others copied theirs. */
  if (group && copying) st = agree(group, op, st);
  for (int f = 0; of.handles && f < meta.n_files; f++) dt_safetensors_destroy(of.handles[f]);
  dt__free(of.handles);
  dt__ckpt_meta_free(&meta);
  return st;
}
