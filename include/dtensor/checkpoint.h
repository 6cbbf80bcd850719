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

#include <stdbool.h>
#include <stdint.h>

#include "dtensor/core.h"
#include "dtensor/dist.h"
#include "dtensor/mesh.h"
#include "dtensor/nn.h"
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
  DT_SAFETENSORS_BORROW = 1, /* zero copy: a view of the private (copy-on-write) memory map */
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

/* Closes the handle. Tensors borrowed from it (DT_SAFETENSORS_BORROW) stay valid: the memory
 * map is shared by the handle and the borrowed tensors, and unmapped when the last of them is
 * released. NULL is ignored. */
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
 * dt_safetensors_bytes_read); BORROW returns a view of the private memory map (a write through
 * it copies the touched pages and never reaches the file; other BORROWs of the same tensor
 * from the same handle see it, COPY loads do not). Errors: DT_ERR_INVALID (NULL, unknown name,
 * a BORROW of a tensor whose bytes are not aligned to its element size), DT_ERR_IO,
 * DT_ERR_NOMEM. */
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

/* ---- State dicts ------------------------------------------------------------------------- */

/* Options of dt_state_dict_load; zero-initialized (or NULL) means PyTorch's default,
 * strict=True. */
typedef struct dt_state_dict_options {
  bool non_strict; /* true: missing and unexpected keys are reported, not refused */
} dt_state_dict_options;

/* What dt_state_dict_load found: the missing keys (the module has them, the file not) and the
 * unexpected ones (the file has them, the module not), each a comma-separated list or NULL
 * when empty. Owned by the report; free with dt_state_dict_report_clear. */
typedef struct dt_state_dict_report {
  int n_missing;
  int n_unexpected;
  char *missing;
  char *unexpected;
} dt_state_dict_report;

/* Loads the file's tensors into module's parameters and buffers by FQN ("0.weight",
 * "mlps.0.0.bias"), PyTorch's load_state_dict: the values are copied in place (under no_grad)
 * into the tensors the module holds, so every parameter keeps its handle, placements and
 * requires_grad, and an optimizer or FSDP unit holding it sees the new values. A distributed
 * parameter (dt_parallel_tp_module, dt_parallel_fsdp, dt_parallel_ddp, 2-D) keeps its mesh and
 * placements, and each rank reads only its block (dt_safetensors_load_distributed) into its
 * shard. Every value is read and checked before any is copied, so on failure the module is
 * unchanged. report may be NULL.
 * Errors: DT_ERR_INVALID (NULL module or file; in strict mode any missing or unexpected key,
 * all named in the message; a dtype or shape that differs from the module's, naming the key
 * and both), the errors of dt_safetensors_load, DT_ERR_NOMEM. */
DT_API dt_status dt_state_dict_load(dt_module *module, dt_safetensors *file,
                                    const dt_state_dict_options *options,
                                    dt_state_dict_report *report);

/* Frees the report's lists and zeroes it. NULL is ignored. */
DT_API void dt_state_dict_report_clear(dt_state_dict_report *report);

/* Saves module's parameters and buffers under their FQNs as one safetensors file (as
 * dt_safetensors_save does). Distributed tensors are gathered first, which is collective
 * over their mesh; then only the rank at coordinate 0 of the meshes writes. Errors:
 * DT_ERR_INVALID (NULL arguments), those of dt_dist_full_tensor and dt_safetensors_save. */
DT_API dt_status dt_state_dict_save(const dt_module *module, const char *path);

/* ---- Distributed checkpoints (PyTorch DCP's model) ---------------------------------------- */

/* Saves `count` tensors under `names` into directory `dir` (created if absent), from every
 * rank of `mesh`'s world: collective over that group. Each rank writes only the blocks of its
 * shards in one safetensors file "__<generation>_<rank>.safetensors" (a block's tensor keeps
 * its FQN, its shape is the block's), replicated data once: only the replica with coordinate
 * 0 on every Replicate mesh dim writes a block, and local tensors are written by rank 0. Rank
 * 0 then writes "metadata.json": every tensor's global shape, dtype, mesh shape, placements,
 * and each block's offsets and lengths in the global tensor with its file and byte range.
 * Crash safety: data files have names of a generation past every one the committed
 * metadata names, are fsynced and renamed in place; metadata.json is renamed over the old one
 * last (the commit), then the files of older generations are removed. A crash at any point
 * leaves the previous checkpoint or the new one; a save that fails otherwise removes the
 * files it wrote. Only a missing metadata.json means "no checkpoint yet": one that cannot be
 * read or parsed fails the save before anything is written. Every rank returns the same
 * status from the same collective (the lowest failing rank's, its message prefixed
 * "rank R:" on the others). Every distributed tensor must live on a mesh over the same world
 * as `mesh`; the arguments must be the same on every rank.
 * Errors: DT_ERR_INVALID (NULL arguments, duplicate names, a Partial placement: reduce it
 * first), DT_ERR_IO (naming the path and errno's reason), DT_ERR_NOMEM, the collective
 * errors. */
DT_API dt_status dt_checkpoint_save(const char *dir, dt_mesh *mesh, int count,
                                    const char *const *names, dt_tensor *const *tensors);

/* Loads tensors `names` of the checkpoint in `dir` into `tensors`, in place: a distributed
 * tensor (any mesh, placements Shard/Replicate, world size) receives the values of its own
 * block, a local tensor the whole tensor. Each rank computes the overlap of its block with
 * the saved blocks and preads only those bytes (after the checks of dt_checkpoint_load_ex,
 * which by default reads each data file it uses once to verify its checksum). With only
 * local targets it is not collective. With distributed targets it is collective over the world
 * of their mesh (every rank of it calls it with the same names; targets on meshes of two
 * worlds are refused): each rank checks the files its own blocks come from, and the ranks
 * agree on the verdict before any of them copies, so either every rank loads or none changes
 * a byte, and every rank returns the lowest failing rank's status (its message, "rank R: ..."
 * on the others). Errors: DT_ERR_INVALID (NULL arguments; a name the checkpoint lacks; a
 * dtype or global shape that differs, naming the tensor; a Partial target; a missing,
 * truncated or corrupt checkpoint: the message names the file and what is wrong), DT_ERR_IO,
 * DT_ERR_NOMEM, and a failed agreement's DT_ERR_COMM or DT_ERR_TIMEOUT. Every check passes
 * before a target changes, so a refused checkpoint leaves the targets as they were; only an
 * I/O error while copying can leave part of the new values (every rank returns it then). */
DT_API dt_status dt_checkpoint_load(const char *dir, int count, const char *const *names,
                                    dt_tensor *const *tensors);

/* Options of dt_checkpoint_load_ex; zero-initialise (or pass NULL) for the defaults. */
typedef struct dt_checkpoint_load_options {
  /* Skip the CRC32C of each data file. By default a load reads every file it needs data from
   * once in full to check its checksum before trusting it; skipped, each rank reads only the
   * bytes its blocks overlap. The files' identities, sizes, headers and the tiling of the
   * blocks are checked either way. */
  bool skip_data_checksum;
} dt_checkpoint_load_options;

/* dt_checkpoint_load with options (NULL: the defaults). Before any data is copied, the
 * metadata is checked (each tensor's blocks tile it exactly: no overlap, no gap; each block
 * inside its tensor and its file), and each data file a rank reads from must be the one the
 * metadata lists: its size, its own record of generation and rank (written in its
 * __metadata__), and, unless skipped, the CRC32C of its bytes. Metadata of version 3 (what a
 * save writes) also carries its own CRC32C, checked first, and each data file records which
 * block of which tensor it holds, compared with the metadata's block (a changed "file" or
 * "offsets" is refused naming both claims); versions 1 and 2 lack both and are read without
 * them (docs/checkpoints.md). A failure is DT_ERR_INVALID naming the checkpoint, the file
 * and the tensor. */
DT_API dt_status dt_checkpoint_load_ex(const char *dir, int count, const char *const *names,
                                       dt_tensor *const *tensors,
                                       const dt_checkpoint_load_options *options);

/* Data bytes this thread read in dt_checkpoint_load calls so far: the blocks' bytes copied
 * and, when checksums are verified, each verified file's size (for tests and benchmarks that
 * check a load reads only its overlap). */
DT_API uint64_t dt_checkpoint_bytes_read(void);

/* ---- DLPack (zero-copy exchange with other frameworks) -------------------------------------
 * The structs are those of <dlpack/dlpack.h> (Debian's libdlpack-dev; include it to read
 * them). DLManagedTensor is in every DLPack version; DLManagedTensorVersioned exists from
 * DLPack 1.0 on: the *_versioned functions need a library built against a >= 1.0 header and
 * return DT_ERR_UNSUPPORTED otherwise (dt_dlpack_header_version says which header that was).
 * CPU memory (kDLCPU) and, in a CUDA build, CUDA memory (kDLCUDA with its device id) are
 * exchanged, with the dtypes F32, F64, BF16, F16, I64, I32, U8 and BOOL. The stream handshake
 * without a stream argument: exporting a CUDA tensor waits for its device's queued work, and
 * importing kDLCUDA memory waits for the device before any of its ops (dt_cuda_synchronize).
 * BOOL travels as kDLBool 8 when the header has that code, as kDLUInt 8 otherwise (DLPack
 * 0.6), so with an old header a bool tensor comes back as uint8. */
struct DLManagedTensor;
struct DLManagedTensorVersioned;

/* DLPACK_VERSION of the header the library was built with (60 for 0.6, 100 for 1.0), or 0
 * when it was built without DLPack. */
DT_API int dt_dlpack_header_version(void);

/* Exports t (a local tensor, or a distributed tensor's local shard) without copying: the
 * managed tensor holds a reference to the tensor's storage, and its deleter (call it exactly
 * once) drops that reference. Shape and strides are in elements; device kDLCPU (kDLCUDA and
 * the device index for a CUDA tensor); data points at the storage and byte_offset is 0. Errors:
 * DT_ERR_INVALID (NULL), DT_ERR_NOMEM, DT_ERR_UNSUPPORTED (no DLPack header at build time;
 * *_versioned: a header before 1.0). */
DT_API dt_status dt_dlpack_export(dt_tensor *t, struct DLManagedTensor **out);
DT_API dt_status dt_dlpack_export_versioned(dt_tensor *t, struct DLManagedTensorVersioned **out);

/* Imports a managed tensor without copying. Everything is checked first: a CPU device
 * (kDLCPU, kDLCUDAHost, kDLROCMHost) or kDLCUDA memory of a present CUDA device (the result is
 * then a CUDA tensor that never frees that memory), a known dtype with one lane, 0 <= ndim <=
 * DT_MAX_DIMS, sizes >= 0, strides >= 0 (NULL = contiguous), data non-NULL unless the tensor is
 * empty, byte_offset a multiple of the element size, no overflow of shape x strides. On success the
 * tensor owns `managed`: its deleter is called exactly once, when the last handle or view
 * made from the result is released. On an error nothing is called and the caller keeps
 * ownership of `managed` (call its deleter yourself). The versioned form also requires the
 * producer's major version to match and accepts DLPACK_FLAG_BITMASK_READ_ONLY (the tensor
 * must then not be written). Errors: DT_ERR_INVALID (NULL, a bad field, named in the
 * message), DT_ERR_DTYPE, DT_ERR_UNSUPPORTED (another device type, a CUDA device this process
 * does not have, a header before 1.0 for the versioned form), DT_ERR_NOMEM. */
DT_API dt_status dt_dlpack_import(struct DLManagedTensor *managed, dt_tensor **out);
DT_API dt_status dt_dlpack_import_versioned(struct DLManagedTensorVersioned *managed,
                                            dt_tensor **out);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_CHECKPOINT_H */
