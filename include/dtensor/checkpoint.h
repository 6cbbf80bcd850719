/*
 * Checkpoints: safetensors files (the format HuggingFace models ship in), read and written
 * exactly as the reference `safetensors` library does, and loaded whole, borrowed from a
 * memory map, or as one rank's shard of a distributed tensor.
 *
 * File layout: 8 bytes little-endian header length N, N bytes of JSON
 * {"__metadata__": {string: string}, "name": {"dtype", "shape", "data_offsets": [begin, end]}},
 * padded with spaces to a multiple of 8, then the data section, which the tensors' byte
 * ranges cover exactly (no gaps, no overlaps). Everything a file says is validated before it
 * is trusted; see docs/checkpoints.md for the list of checks.
 */
#ifndef DTENSOR_CHECKPOINT_H
#define DTENSOR_CHECKPOINT_H

#include <stdint.h>

#include "dtensor/core.h"
#include "dtensor/dist.h"
#include "dtensor/mesh.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An open, validated safetensors file. Opaque; not written to after opening, so several
 * threads may read tensors from one handle at once. */
typedef struct dt_safetensors dt_safetensors;

/* One tensor entry of a file, as the header describes it. */
typedef struct dt_safetensors_entry_info {
  const char *name; /* borrowed from the handle */
  dt_dtype dtype;
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  uint64_t data_begin; /* byte offsets within the data section */
  uint64_t data_end;
} dt_safetensors_entry_info;

/* How dt_safetensors_load makes its tensor. */
typedef enum dt_safetensors_mode {
  DT_SAFETENSORS_COPY = 0,   /* a new tensor owning a copy of the bytes (read with pread) */
  DT_SAFETENSORS_BORROW = 1, /* zero copy: a view of the read-only memory map */
} dt_safetensors_mode;

/* Opens and validates `path`: header length against the file size, the JSON, dtypes,
 * shapes, offsets, duplicate names. The file is memory mapped read-only.
 * Errors: DT_ERR_INVALID (NULL argument; a malformed file: the message names the file, the
 * tensor and the offending values), DT_ERR_DTYPE (a dtype libdtensor does not have, named
 * with its tensor), DT_ERR_IO (the file cannot be opened, read or mapped), DT_ERR_NOMEM. */
DT_API dt_status dt_safetensors_open(const char *path, dt_safetensors **out);

/* As dt_safetensors_open, for a file image in memory: `data` (`size` bytes) is borrowed and
 * must outlive the handle and every tensor borrowed from it. */
DT_API dt_status dt_safetensors_open_memory(const void *data, size_t size, dt_safetensors **out);

/* Closes the handle. Tensors borrowed from it (DT_SAFETENSORS_BORROW) stay valid: when one
 * of them is still referenced, the memory map is left in place (until process exit) rather
 * than unmapped under it. NULL is ignored. */
DT_API void dt_safetensors_destroy(dt_safetensors *file);

/* Number of tensors, and entry `index` (0 <= index < count, in header order). */
DT_API int dt_safetensors_count(const dt_safetensors *file);
DT_API dt_status dt_safetensors_entry(const dt_safetensors *file, int index,
                                      dt_safetensors_entry_info *entry);
/* The index of tensor `name`, or -1 when absent (or on NULL arguments). */
DT_API int dt_safetensors_find(const dt_safetensors *file, const char *name);

/* The __metadata__ pairs (in header order) and the value for a key (NULL when absent).
 * Strings are borrowed from the handle. */
DT_API int dt_safetensors_metadata_count(const dt_safetensors *file);
DT_API dt_status dt_safetensors_metadata(const dt_safetensors *file, int index, const char **key,
                                         const char **value);
DT_API const char *dt_safetensors_metadata_find(const dt_safetensors *file, const char *key);

/* Tensor `name` as a local contiguous tensor. COPY reads the bytes with pread (counted by
 * dt_safetensors_bytes_read); BORROW returns a view of the read-only map (writing through it
 * faults; copy first to modify). Errors: DT_ERR_INVALID (NULL, unknown name, a BORROW of a
 * tensor whose bytes are not aligned to its element size), DT_ERR_IO, DT_ERR_NOMEM. */
DT_API dt_status dt_safetensors_load(dt_safetensors *file, const char *name,
                                     dt_safetensors_mode mode, dt_tensor **out);

/* Tensor `name` as a distributed tensor on `mesh` with `placements` (mesh ndim of them,
 * Shard and Replicate; torch.chunk sizes for uneven shards). Each rank reads only its own
 * block's bytes: one contiguous range when the block is a run of whole rows, else one pread
 * per run. Not collective (every rank opens the file itself). Errors: those of
 * dt_safetensors_load; DT_ERR_INVALID (a Partial placement, a bad shard dim, a count of
 * placements other than the mesh's ndim). */
DT_API dt_status dt_safetensors_load_distributed(dt_safetensors *file, const char *name,
                                                 dt_mesh *mesh, int n_placements,
                                                 const dt_placement *placements, dt_tensor **out);

/* Tensor data bytes read through this handle so far (COPY and distributed loads). */
DT_API uint64_t dt_safetensors_bytes_read(const dt_safetensors *file);

/* Writes `count` local tensors under `names`, plus optional metadata pairs (keys/values may
 * be NULL when n_metadata is 0), byte for byte as the reference library does: tensors sorted
 * by dtype (widest first) then name, metadata keys sorted, compact JSON padded with spaces to
 * a multiple of 8. The file is written to a temporary beside `path`, fsynced and renamed over
 * it, so a reader sees the old file or the new one; a new file's mode is 0666 & ~umask.
 * Errors: DT_ERR_INVALID (NULL arguments, duplicate or reserved names, a distributed tensor:
 * gather it with dt_dist_full_tensor first), DT_ERR_IO (the message names the path and errno's
 * reason), DT_ERR_NOMEM. */
DT_API dt_status dt_safetensors_save(const char *path, int count, const char *const *names,
                                     dt_tensor *const *tensors, int n_metadata,
                                     const char *const *keys, const char *const *values);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_CHECKPOINT_H */
