/*
 * Distributed checkpoints (PyTorch DCP's model): every rank saves the blocks of its shards
 * into its own safetensors file, rank 0 commits a metadata file naming every block, and a
 * load on any mesh and placements reads, per rank, only the bytes its block overlaps.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint_meta.h"
#include "dtensor/comm.h"
#include "dtensor/ops.h"

/* The block [offset, offset + length) of a tensor of `shape` that mesh coordinates `coords`
 * hold under `placements`: sharded dims split in mesh-dim order, torch.chunk sizes, as the
 * dist layer does. */
void dt__ckpt_block_at(int ndim, const int64_t *shape, int mesh_ndim, const int *mesh_shape,
                       const int *coords, const dt_placement *placements, int64_t *offset,
                       int64_t *length) {
  for (int d = 0; d < ndim; d++) {
    offset[d] = 0;
    length[d] = shape[d];
  }
  for (int m = 0; m < mesh_ndim; m++) {
    if (placements[m].kind != DT_SHARD) continue;
    int dim = placements[m].dim < 0 ? placements[m].dim + ndim : placements[m].dim;
    int64_t n = mesh_shape[m], piece = (length[dim] + n - 1) / n;
    int64_t start = piece * coords[m];
    if (start > length[dim]) start = length[dim];
    int64_t l = length[dim] - start;
    if (l > piece) l = piece;
    offset[dim] += start;
    length[dim] = l;
  }
}

static bool injected(int step) { return atomic_load(&dt__checkpoint_fail_step) == step; }

/* The injected steps model a crash: the save stops where it is and cleans up nothing. */
static bool crash_injected(void) { return atomic_load(&dt__checkpoint_fail_step) != 0; }

static dt_status fail_injected(const char *op, int step) {
  return dt__error(DT_ERR_IO, "%s: injected failure at step %d", op, step);
}

static void format_placements(int mesh_ndim, const dt_placement *p, char *buf, size_t size) {
  size_t at = 0;
  buf[0] = '\0';
  for (int m = 0; m < mesh_ndim && at < size; m++) {
    char one[32];
    dt_placement_format(p[m], one, sizeof one);
    at += (size_t)snprintf(buf + at, size - at, "%s%s", m ? ", " : "", one);
  }
}

/* Rank 0's start of a save: the directory exists (made if absent) and the committed
 * generation is known; any doubt about the committed checkpoint fails the save here, before
 * anything is written. */
static dt_status start_save(const char *dir, const char *op, int64_t *generation) {
  *generation = 0;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return dt__error(DT_ERR_IO, "%s: cannot create %s: %s", op, dir, strerror(errno));
  struct stat sb;
  if (stat(dir, &sb) != 0)
    return dt__error(DT_ERR_IO, "%s: cannot use %s: %s", op, dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode))
    return dt__error(DT_ERR_IO, "%s: cannot create %s: it exists and is not a directory", op, dir);
  dt_status st = dt__ckpt_committed_generation(dir, op, generation);
  if (st) return st;
  if (*generation == INT64_MAX)
    return dt__error(DT_ERR_INVALID, "%s: %s: the committed generation has no successor", op, dir);
  *generation += 1;
  return DT_OK;
}

/* What each rank tells the others after writing its file: the report, then its blocks. */
typedef struct rank_report {
  int32_t n_blocks;
  uint32_t crc32c; /* of the whole file, read back from it */
  uint64_t file_bytes;
} rank_report;

typedef struct rank_block {
  int32_t tensor;
  int32_t pad;
  uint64_t begin, end;
  int64_t offsets[DT_MAX_DIMS], lengths[DT_MAX_DIMS];
} rank_block;

/* Writes the shard file: the blocks' local tensors under their FQNs, and in __metadata__
 * whose and which generation the file is and, per block, which block of the global tensor it
 * holds, so that a swapped file, or a block's "file" or "offsets" changed in the metadata,
 * is named as such on load. */
static dt_status save_shard_file(const char *op, const char *path, int64_t generation, int rank,
                                 int n_local, const char **local_names, dt_tensor **locals,
                                 const rank_block *blocks, dt_tensor *const *tensors) {
  int n_keys = 2 + n_local;
  const char **keys = dt__calloc(sizeof *keys * (size_t)n_keys);
  const char **values = dt__calloc(sizeof *values * (size_t)n_keys);
  char *strings = NULL;
  size_t at = 0, size = 0;
  for (int k = 0; k < n_local; k++)
    size += sizeof DT__CKPT_KEY_BLOCK + strlen(local_names[k]) + DT__CKPT_RECORD_MAX;
  if (keys && values) strings = dt__alloc(size + 64);
  if (!strings) {
    DT__FREE_EACH(keys, values);
    return dt__error(DT_ERR_NOMEM, "%s: cannot allocate the records of %d blocks", op, n_local);
  }
  char g[32], r[16];
  snprintf(g, sizeof g, "%" PRId64, generation);
  snprintf(r, sizeof r, "%d", rank);
  keys[0] = DT__CKPT_KEY_GENERATION, values[0] = g;
  keys[1] = DT__CKPT_KEY_RANK, values[1] = r;
  for (int k = 0; k < n_local; k++) {
    const rank_block *b = &blocks[k];
    dt_tensor *t = tensors[b->tensor];
    int ndim = dt_tensor_is_distributed(t) ? dt_dist_ndim(t) : dt_tensor_ndim(t);
    keys[2 + k] = strings + at;
    at +=
        (size_t)snprintf(strings + at, size + 64 - at, "%s%s", DT__CKPT_KEY_BLOCK, local_names[k]) +
        1;
    values[2 + k] = strings + at;
    dt__ckpt_block_record(ndim, b->offsets, b->lengths, strings + at, DT__CKPT_RECORD_MAX);
    at += strlen(strings + at) + 1;
  }
  dt_status st =
      dt__safetensors_save_owned(op, path, n_local, local_names, locals, n_keys, keys, values);
  DT__FREE_EACH(keys, values, strings);
  return st;
}

/* Writes this rank's blocks into `path` and fills the report and blocks of *message (sized
 * for count blocks). *wrote tells whether a file was attempted (so a failed save removes
 * it). */
static dt_status write_shard(const char *op, const char *path, int64_t generation, int rank,
                             int count, const char *const *names, dt_tensor *const *tensors,
                             unsigned char *message, size_t *message_size, bool *wrote) {
  rank_report *report = (rank_report *)message;
  rank_block *blocks = (rank_block *)(message + sizeof(rank_report));
  dt_tensor **locals = dt__calloc(sizeof *locals * (size_t)(count + 1));
  const char **local_names = dt__calloc(sizeof *local_names * (size_t)(count + 1));
  int n_local = 0;
  dt_status st = DT_OK;
  *wrote = false;
  if (!locals || !local_names) {
    st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate for %d tensors", op, count);
    goto done;
  }
  /* The lowest-coordinate replica writes each block, once. */
  for (int i = 0; i < count && !st; i++) {
    dt_tensor *t = tensors[i];
    rank_block *b = &blocks[n_local];
    memset(b, 0, sizeof *b);
    if (dt_tensor_is_distributed(t)) {
      dt_mesh *tm = dt_dist_mesh(t);
      const dt_placement *p = dt_dist_placements(t);
      int coords[DT_MAX_DIMS], mesh_ndim = dt_mesh_ndim(tm);
      bool writer = true;
      for (int m = 0; m < mesh_ndim; m++) {
        coords[m] = dt_mesh_coordinate(tm, m);
        if (p[m].kind == DT_REPLICATE && coords[m] != 0) writer = false;
      }
      dt__ckpt_block_at(dt_dist_ndim(t), dt_dist_global_shape(t), mesh_ndim, dt_mesh_shape(tm),
                        coords, p, b->offsets, b->lengths);
      if (!writer) continue;
      st = dt_dist_to_local(t, &locals[n_local]);
    } else {
      if (rank != 0) continue;
      for (int d = 0; d < dt_tensor_ndim(t); d++) b->lengths[d] = dt_tensor_size(t, d);
      locals[n_local] = dt_tensor_retain(t);
    }
    if (st) break;
    /* An empty block (an uneven shard past the end) holds nothing to write. */
    if (dt_tensor_numel(locals[n_local]) == 0) {
      dt_tensor_release(locals[n_local]);
      locals[n_local] = NULL;
      continue;
    }
    b->tensor = i;
    local_names[n_local] = names[i];
    n_local++;
  }
  if (!st && n_local > 0) {
    *wrote = true;
    st = save_shard_file(op, path, generation, rank, n_local, local_names, locals, blocks, tensors);
    /* The byte ranges and the checksum come from the file as written, so they are what
     * readers will see. */
    dt_safetensors *written = NULL;
    if (!st) st = dt_safetensors_open(path, &written);
    for (int k = 0; !st && k < n_local; k++) {
      dt_safetensors_entry_info e;
      st = dt_safetensors_entry(written, dt_safetensors_find(written, local_names[k]), &e);
      blocks[k].begin = written->data_start + e.data_begin;
      blocks[k].end = written->data_start + e.data_end;
    }
    if (!st) {
      report->file_bytes = written->image_size;
      report->crc32c = dt__crc32c(0, written->image, written->image_size);
    }
    dt_safetensors_destroy(written);
  }
done:
  report->n_blocks = st ? 0 : n_local;
  *message_size = sizeof(rank_report) + sizeof(rank_block) * (size_t)report->n_blocks;
  for (int k = 0; locals && k < n_local; k++) dt_tensor_release(locals[k]);
  dt__free(locals);
  dt__free(local_names);
  return st;
}

/* Rank 0 composes the metadata from every rank's report and commits it; *committed tells
 * whether metadata.json now names the new generation. */
static dt_status commit_save(const char *dir, const char *op, int64_t generation, int count,
                             const char *const *names, dt_tensor *const *tensors,
                             const dt_objects *all, time_t started, bool *committed) {
  *committed = false;
  dt__ckpt_meta meta = {.version = DT__CKPT_VERSION, .generation = generation, .n_tensors = count};
  dt__ckpt_text text = {0};
  dt_status st = DT_OK;
  meta.tensors = dt__calloc(sizeof *meta.tensors * (size_t)(count + 1));
  meta.files = dt__calloc(sizeof *meta.files * (size_t)(all->count + 1));
  if (!meta.tensors || !meta.files) {
    st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate the metadata", op);
    goto done;
  }
  for (int i = 0; i < count && !st; i++) {
    dt__ckpt_tensor *mt = &meta.tensors[i];
    dt_tensor *t = tensors[i];
    mt->name = (char *)names[i]; /* borrowed: the names are not freed below */
    mt->dtype = dt_tensor_dtype(t);
    if (dt_tensor_is_distributed(t)) {
      dt_mesh *tm = dt_dist_mesh(t);
      mt->ndim = dt_dist_ndim(t);
      memcpy(mt->shape, dt_dist_global_shape(t), sizeof(int64_t) * (size_t)mt->ndim);
      mt->mesh_ndim = dt_mesh_ndim(tm);
      memcpy(mt->mesh, dt_mesh_shape(tm), sizeof(int) * (size_t)mt->mesh_ndim);
      format_placements(mt->mesh_ndim, dt_dist_placements(t), mt->placements,
                        sizeof mt->placements);
    } else {
      mt->ndim = dt_tensor_ndim(t);
      memcpy(mt->shape, dt_tensor_shape(t), sizeof(int64_t) * (size_t)mt->ndim);
    }
    mt->blocks = dt__calloc(sizeof *mt->blocks * (size_t)(all->count + 1));
    if (!mt->blocks) st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate the metadata", op);
  }
  for (int r = 0; r < all->count && !st; r++) {
    size_t length = 0;
    const unsigned char *payload = dt__ckpt_phase_payload(all, r, &length);
    rank_report rr = {0};
    if (payload && length >= sizeof rr) memcpy(&rr, payload, sizeof rr);
    if (!payload || length < sizeof rr || rr.n_blocks < 0 || rr.n_blocks > count ||
        length != sizeof rr + sizeof(rank_block) * (size_t)rr.n_blocks) {
      st = dt__error(DT_ERR_COMM, "%s: rank %d's report is malformed (%zu bytes)", op, r, length);
      break;
    }
    if (rr.n_blocks == 0) continue;
    dt__ckpt_file *f = &meta.files[meta.n_files];
    f->name = dt__alloc(64);
    if (!f->name) {
      st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate the metadata", op);
      break;
    }
    snprintf(f->name, 64, "__%" PRId64 "_%d.safetensors", generation, r);
    f->bytes = rr.file_bytes;
    f->has_identity = true;
    f->generation = generation;
    f->rank = r;
    f->crc32c = rr.crc32c;
    int file = meta.n_files++;
    for (int k = 0; k < rr.n_blocks; k++) {
      rank_block rb;
      memcpy(&rb, payload + sizeof rr + sizeof rb * (size_t)k, sizeof rb);
      if (rb.tensor < 0 || rb.tensor >= count || meta.tensors[rb.tensor].n_blocks >= all->count) {
        st = dt__error(DT_ERR_COMM, "%s: rank %d's report names tensor %d of %d", op, r, rb.tensor,
                       count);
        break;
      }
      dt__ckpt_tensor *mt = &meta.tensors[rb.tensor];
      dt__ckpt_block *b = &mt->blocks[mt->n_blocks++];
      b->file = file;
      memcpy(b->offsets, rb.offsets, sizeof b->offsets);
      memcpy(b->lengths, rb.lengths, sizeof b->lengths);
      b->begin = rb.begin;
      b->end = rb.end;
    }
  }
  if (st) goto done;
  dt__ckpt_meta_write(&meta, &text);
  if (text.failed) {
    st = dt__error(DT_ERR_NOMEM, "%s: cannot allocate the metadata text", op);
    goto done;
  }
  st = dt__ckpt_commit_metadata(dir, op, text.data, text.length, committed);
  if (st) goto done;
  if (injected(DT__CKPT_STEP_COMMITTED)) {
    st = fail_injected(op, DT__CKPT_STEP_COMMITTED);
    goto done;
  }
  dt__ckpt_remove_old_files(dir, generation, started);
done:
  for (int i = 0; meta.tensors && i < count; i++) meta.tensors[i].name = NULL;
  dt__free(text.data);
  dt__ckpt_meta_free(&meta);
  return st;
}

dt_status dt_checkpoint_save(const char *dir, dt_mesh *mesh, int count, const char *const *names,
                             dt_tensor *const *tensors) {
  static const char op[] = "dt_checkpoint_save";
  if (!dir || !mesh) return dt__error(DT_ERR_INVALID, "%s: %s is NULL", op, !dir ? "dir" : "mesh");
  if (count < 0 || (count > 0 && (!names || !tensors)))
    return dt__error(DT_ERR_INVALID, "%s: count %d with %s", op, count,
                     count < 0 ? "a negative count"
                     : !names  ? "NULL names"
                               : "NULL tensors");
  dt_comm *world = dt_mesh_world(mesh);
  for (int i = 0; i < count; i++) {
    if (!names[i] || !tensors[i])
      return dt__error(DT_ERR_INVALID, "%s: %s[%d] is NULL", op, !names[i] ? "names" : "tensors",
                       i);
    if (!dt_tensor_is_distributed(tensors[i])) continue;
    dt_mesh *tm = dt_dist_mesh(tensors[i]);
    if (dt_comm_size(dt_mesh_world(tm)) != dt_comm_size(world))
      return dt__error(DT_ERR_INVALID,
                       "%s: tensor `%s` lives on a mesh of %d ranks, not the %d of mesh", op,
                       names[i], dt_comm_size(dt_mesh_world(tm)), dt_comm_size(world));
    const dt_placement *p = dt_dist_placements(tensors[i]);
    for (int m = 0; m < dt_mesh_ndim(tm); m++) {
      if (p[m].kind == DT_STRIDED_SHARD)
        return dt__error(DT_ERR_UNSUPPORTED,
                         "%s: tensor `%s` is StridedShard SS(%d,%d) on mesh dim %d: "
                         "redistribute it to Replicate or Shard before saving",
                         op, names[i], p[m].dim, p[m].split_factor, m);
      if (p[m].kind != DT_SHARD && p[m].kind != DT_REPLICATE)
        return dt__error(DT_ERR_INVALID,
                         "%s: tensor `%s` is Partial on mesh dim %d: redistribute it to "
                         "Replicate or Shard before saving",
                         op, names[i], m);
    }
  }
  /* Duplicate names through an index: 100,000 names cost 100,000 lookups, not 5e9 compares. */
  dt__name_index seen;
  if (dt__name_index_init(&seen, count))
    return dt__error(DT_ERR_NOMEM, "%s: cannot index %d names", op, count);
  for (int i = 0; i < count; i++) {
    if (dt__name_index_add(&seen, names[i], i) != -1) {
      dt__name_index_free(&seen);
      return dt__error(DT_ERR_INVALID, "%s: name `%s` appears twice", op, names[i]);
    }
  }
  dt__name_index_free(&seen);
  if (strlen(dir) > 4000)
    return dt__error(DT_ERR_INVALID, "%s: dir `%.100s...` is too long", op, dir);
  int rank = dt_comm_rank(world);

  /* 1. The start: rank 0 makes the directory and reads the committed generation; the new
   * one is past it, so no file the save writes is one the committed metadata names. */
  int64_t generation = 0;
  time_t started = time(NULL);
  dt_status mine = rank == 0 ? start_save(dir, op, &generation) : DT_OK;
  dt_objects *all = NULL;
  bool heard = false;
  dt_status st =
      dt__ckpt_phase_agree(world, op, mine, &generation, sizeof generation, &all, &heard);
  if (st) return st;
  size_t length = 0;
  const unsigned char *payload = dt__ckpt_phase_payload(all, 0, &length);
  if (length == sizeof generation) memcpy(&generation, payload, sizeof generation);
  dt_free(all);
  if (generation <= 0) return dt__error(DT_ERR_COMM, "%s: rank 0 sent no generation", op);
  if (injected(DT__CKPT_STEP_BEFORE_DATA)) return fail_injected(op, DT__CKPT_STEP_BEFORE_DATA);

  /* 2. Every rank writes its blocks and reports them. */
  char path[4200];
  snprintf(path, sizeof path, "%s/__%" PRId64 "_%d.safetensors", dir, generation, rank);
  size_t message_size = sizeof(rank_report) + sizeof(rank_block) * (size_t)(count + 1);
  unsigned char *message = dt__calloc(message_size);
  bool wrote = false;
  mine = message ? write_shard(op, path, generation, rank, count, names, tensors, message,
                               &message_size, &wrote)
                 : dt__error(DT_ERR_NOMEM, "%s: cannot allocate for %d tensors", op, count);
  st = dt__ckpt_phase_agree(world, op, mine, message, message ? message_size : 0, &all, &heard);
  dt__free(message);
  if (!st && injected(DT__CKPT_STEP_DATA_WRITTEN)) {
    dt_free(all);
    return fail_injected(op, DT__CKPT_STEP_DATA_WRITTEN);
  }
  if (st) {
    if (wrote && heard && !crash_injected()) (void)unlink(path);
    return st;
  }

  /* 3. Rank 0 commits; every rank learns the verdict, and a save that did not commit removes
   * the files it wrote. */
  bool committed = false;
  mine = rank == 0
             ? commit_save(dir, op, generation, count, names, tensors, all, started, &committed)
             : DT_OK;
  dt_free(all);
  int32_t flag = committed;
  st = dt__ckpt_phase_agree(world, op, mine, &flag, sizeof flag, &all, &heard);
  dt_free(all);
  if (st && wrote && heard && !crash_injected()) (void)unlink(path);
  return st;
}
