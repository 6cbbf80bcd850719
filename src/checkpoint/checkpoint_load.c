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
  bool verify_data; /* the CRC32C of each file, read whole */
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
        op, of->dir, f->name, tensor, want_r, want_g);
  if (strcmp(g, want_g) != 0 || strcmp(r, want_r) != 0)
    return dt__error(
        DT_ERR_INVALID,
        "%s: checkpoint %s is corrupt: %s (read for tensor `%s`) is rank %.20s's file "
        "of generation %.20s; the metadata lists it as rank %s's file of generation %s "
        "(a file swapped, or left from another save)",
        op, of->dir, f->name, tensor, r, g, want_r, want_g);
  if (!of->verify_data) return DT_OK;
  uint32_t crc = dt__crc32c(0, h->image, h->image_size);
  bytes_read_here += h->image_size;
  if (crc != f->crc32c)
    return dt__error(DT_ERR_INVALID,
                     "%s: checkpoint %s is corrupt: %s (read for tensor `%s`) fails its checksum: "
                     "CRC32C 0x%08x, the metadata records 0x%08x (its bytes changed after the "
                     "save)",
                     op, of->dir, f->name, tensor, (unsigned)crc, (unsigned)f->crc32c);
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
    uint64_t have = h->image_size;
    dt_safetensors_destroy(h);
    return dt__error(DT_ERR_INVALID,
                     "%s: checkpoint %s is incomplete or corrupt: %s has %" PRIu64
                     " bytes, the metadata says %" PRIu64,
                     op, of->dir, path, have, f->bytes);
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

/* Copies the overlap of saved block b with the target box [toff, toff + tlen) into dst (the
 * target box, row-major), reading runs of contiguous bytes with pread. */
static dt_status copy_overlap(open_files *of, const char *op, const dt__ckpt_tensor *t,
                              const dt__ckpt_block *b, const int64_t *toff, const int64_t *tlen,
                              char *dst, int64_t *copied) {
  int ndim = t->ndim;
  int64_t lo[DT_MAX_DIMS], len[DT_MAX_DIMS];
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    int64_t a = toff[d] > b->offsets[d] ? toff[d] : b->offsets[d];
    int64_t e1 = toff[d] + tlen[d], e2 = b->offsets[d] + b->lengths[d];
    int64_t e = e1 < e2 ? e1 : e2;
    if (e <= a) return DT_OK;
    lo[d] = a;
    len[d] = e - a;
    numel *= len[d];
  }
  dt_safetensors *h = NULL;
  dt_status st = file_handle(of, op, b->file, t->name, &h);
  if (st) return st;
  /* The block must be in its file where the metadata says, as that file's header says. */
  int index = dt_safetensors_find(h, t->name);
  dt_safetensors_entry_info e;
  if (index < 0 || dt_safetensors_entry(h, index, &e) || h->data_start + e.data_begin != b->begin ||
      h->data_start + e.data_end != b->end || e.dtype != t->dtype)
    return dt__error(DT_ERR_INVALID,
                     "%s: checkpoint %s is corrupt: %s does not hold tensor `%s` at bytes "
                     "[%" PRIu64 ", %" PRIu64 ")",
                     op, of->dir, h->label, t->name, b->begin, b->end);
  size_t elem = dt_dtype_size(t->dtype);
  if (ndim == 0) {
    st = dt__safetensors_read(h, op, b->begin, dst, elem);
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
    st = dt__safetensors_read(h, op, b->begin + (uint64_t)src * elem, dst + dst_at * (int64_t)elem,
                              run);
    if (st) return st;
    bytes_read_here += run;
    int d = k - 1;
    while (d >= 0 && ++index_at[d] == len[d]) index_at[d--] = 0;
    if (d < 0) break;
  }
  *copied += numel;
  return DT_OK;
}

dt_status dt_checkpoint_load(const char *dir, int count, const char *const *names,
                             dt_tensor *const *tensors) {
  return dt_checkpoint_load_ex(dir, count, names, tensors, NULL);
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
  dt__ckpt_meta meta;
  dt_status st = dt__ckpt_meta_read(dir, op, &meta, NULL);
  if (st) return st;
  open_files of = {
      .dir = dir, .meta = &meta, .verify_data = !(options && options->skip_data_checksum)};
  of.handles = dt__calloc(sizeof *of.handles * (size_t)(meta.n_files + 1));
  if (!of.handles) {
    dt__ckpt_meta_free(&meta);
    return dt__error(DT_ERR_NOMEM, "%s: cannot allocate for %d files", op, meta.n_files);
  }
  for (int i = 0; i < count && !st; i++) {
    int found = dt__name_index_find(&meta.names, names[i]);
    const dt__ckpt_tensor *t = found >= 0 ? &meta.tensors[found] : NULL;
    if (!t) {
      st = dt__error(DT_ERR_INVALID, "%s: checkpoint %s has no tensor `%s`", op, dir, names[i]);
      break;
    }
    dt_tensor *target = tensors[i], *local = NULL;
    bool dist = dt_tensor_is_distributed(target);
    int ndim = dist ? dt_dist_ndim(target) : dt_tensor_ndim(target);
    const int64_t *shape = dist ? dt_dist_global_shape(target) : dt_tensor_shape(target);
    bool same = ndim == t->ndim && dt_tensor_dtype(target) == t->dtype;
    for (int d = 0; same && d < ndim; d++) same = shape[d] == t->shape[d];
    if (!same) {
      char saved_shape[160], target_shape[160];
      st = dt__error(DT_ERR_INVALID,
                     "%s: tensor `%s`: the checkpoint holds %s %s, the target is %s %s", op,
                     names[i], dt_dtype_name(t->dtype),
                     dt__format_ints(saved_shape, sizeof saved_shape, t->ndim, t->shape),
                     dt_dtype_name(dt_tensor_dtype(target)),
                     dt__format_ints(target_shape, sizeof target_shape, ndim, shape));
      break;
    }
    int64_t toff[DT_MAX_DIMS], tlen[DT_MAX_DIMS];
    if (dist) {
      dt_mesh *tm = dt_dist_mesh(target);
      const dt_placement *p = dt_dist_placements(target);
      int coords[DT_MAX_DIMS], mesh_ndim = dt_mesh_ndim(tm);
      for (int m = 0; m < mesh_ndim && !st; m++) {
        coords[m] = dt_mesh_coordinate(tm, m);
        if (p[m].kind == DT_STRIDED_SHARD)
          st = dt__error(DT_ERR_UNSUPPORTED,
                         "%s: tensor `%s`: a StridedShard target SS(%d,%d) (mesh dim %d) cannot "
                         "be loaded; load as Shard or Replicate",
                         op, names[i], p[m].dim, p[m].split_factor, m);
        else if (p[m].kind != DT_SHARD && p[m].kind != DT_REPLICATE)
          st = dt__error(DT_ERR_INVALID,
                         "%s: tensor `%s`: a Partial target (mesh dim %d) cannot "
                         "be loaded; load as Replicate",
                         op, names[i], m);
      }
      if (st) break;
      dt__ckpt_block_at(ndim, shape, mesh_ndim, dt_mesh_shape(tm), coords, p, toff, tlen);
      st = dt_dist_to_local(target, &local);
      if (st) break;
    } else {
      for (int d = 0; d < ndim; d++) {
        toff[d] = 0;
        tlen[d] = shape[d];
      }
      local = dt_tensor_retain(target);
    }
    /* Read into a contiguous buffer (the target's own memory when it is contiguous). */
    dt_tensor *buffer = NULL;
    if (dt_tensor_is_contiguous(local))
      buffer = dt_tensor_retain(local);
    else
      st = dt_empty(ndim, tlen, t->dtype, &buffer);
    int64_t copied = 0, want = 1;
    for (int d = 0; d < ndim; d++) want *= tlen[d];
    for (int k = 0; k < t->n_blocks && !st && want > 0; k++)
      st = copy_overlap(&of, op, t, &t->blocks[k], toff, tlen, dt_tensor_data(buffer), &copied);
    if (!st && copied != want)
      st = dt__error(DT_ERR_INVALID,
                     "%s: checkpoint %s is corrupt: the blocks of `%s` cover %" PRId64
                     " of the %" PRId64 " elements this rank needs",
                     op, dir, names[i], copied, want);
    if (!st && buffer != local) st = dt_copy_(local, buffer);
    dt_tensor_release(buffer);
    dt_tensor_release(local);
  }
  for (int f = 0; f < meta.n_files; f++) dt_safetensors_destroy(of.handles[f]);
  dt__free(of.handles);
  dt__ckpt_meta_free(&meta);
  return st;
}
