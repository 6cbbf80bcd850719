/* The metadata of a distributed checkpoint (checkpoint_metadata.c), shared by the saver, the
 * loader and the inspector. */
#ifndef DT_CHECKPOINT_META_H
#define DT_CHECKPOINT_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "checkpoint/checkpoint_impl.h"
#include "core/core_impl.h"
#include "dtensor/comm.h"

#define DT__CKPT_METADATA "metadata.json"

/* The __metadata__ keys of a shard file that say whose it is. */
#define DT__CKPT_KEY_GENERATION "dtensor.generation"
#define DT__CKPT_KEY_RANK "dtensor.rank"
/* Version 3: per block, the key "dtensor.block." + the tensor's FQN, whose value says which
 * block of the global tensor the file holds (dt__ckpt_block_record), so that a block's
 * "file" or "offsets" changed in the metadata is refused naming both claims. */
#define DT__CKPT_KEY_BLOCK "dtensor.block."
/* The longest record: 8 dims of 2 numbers up to 2^62, with the words around them. */
#define DT__CKPT_RECORD_MAX 512

/* The version a save writes: 3 adds the metadata's own CRC32C ("metadata_crc32c", the last
 * member, over every byte before its key) and the files' block records. */
#define DT__CKPT_VERSION 3

typedef struct dt__ckpt_file {
  char *name; /* inside the checkpoint's directory */
  uint64_t bytes;
  /* Version 2: the file's identity and checksum (has_identity); version 1 files lack them. */
  bool has_identity;
  int64_t generation;
  int rank;
  uint32_t crc32c; /* CRC32C of the file's bytes, all of them */
} dt__ckpt_file;

/* One saved block: the box [offsets, offsets + lengths) of the global tensor, stored
 * row-major in file `file` at bytes [begin, end). */
typedef struct dt__ckpt_block {
  int file;
  int64_t offsets[DT_MAX_DIMS];
  int64_t lengths[DT_MAX_DIMS];
  uint64_t begin, end;
} dt__ckpt_block;

typedef struct dt__ckpt_tensor {
  char *name;
  dt_dtype dtype;
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  int mesh_ndim;
  int mesh[DT_MAX_DIMS];
  char placements[128]; /* "S(0), R", for people and the inspector */
  int n_blocks;
  dt__ckpt_block *blocks;
} dt__ckpt_tensor;

typedef struct dt__ckpt_meta {
  int version; /* DT__CKPT_VERSION when written; 2 is read without the metadata's checksum
                * and the block records, 1 without the files' identities too */
  int64_t generation;
  int n_files;
  dt__ckpt_file *files;
  int n_tensors;
  dt__ckpt_tensor *tensors;
  dt__name_index names; /* tensor names -> index, made by dt__ckpt_meta_parse */
} dt__ckpt_meta;

typedef struct dt__ckpt_text {
  char *data;
  size_t length, capacity;
  bool failed;
} dt__ckpt_text;

/* Makes room for `extra` more bytes after t->length (at least doubling the capacity). Returns
 * false and sets t->failed when t has failed before or memory runs out. */
bool dt__ckpt_text_reserve(dt__ckpt_text *t, size_t extra);

/* Parses and validates metadata text (not NUL-terminated); `label` names it in messages.
 * On failure meta is empty. */
dt_status dt__ckpt_meta_parse(const char *label, const char *text, size_t length,
                              dt__ckpt_meta *meta);

/* The checks of parsed metadata (checkpoint_validate.c), each failure naming `label` and the
 * tensor or file: version 2 files carry the metadata's generation and distinct ranks; tensor
 * names are unique (indexed into meta->names); every block names a listed file, lies inside
 * its tensor (no int64 overflow), holds at least one element, has a byte range of its element
 * count times the element size inside its file; and the blocks of each tensor tile it
 * exactly: no two overlap and together they cover every element. */
dt_status dt__ckpt_meta_check(const char *label, int version, dt__ckpt_meta *meta);

/* Reads and parses DIR/metadata.json (checkpoint_files.c). A missing file is DT_ERR_INVALID
 * and sets *absent (may be NULL); any other failure (unreadable, not a regular file, corrupt)
 * leaves *absent false. A FIFO or device in its place is refused without blocking. */
dt_status dt__ckpt_meta_read(const char *dir, const char *op, dt__ckpt_meta *meta, bool *absent);

/* The generation a new save must pass: 0 when DIR has no metadata.json, else the highest
 * generation the committed metadata refers to (its own or a file's name). Any error other
 * than a missing file fails with DT_ERR_IO (or NOMEM) before anything is written. */
dt_status dt__ckpt_committed_generation(const char *dir, const char *op, int64_t *generation);

/* Commits metadata text: DIR/.metadata.json.tmp (a stale one of ours removed first, another
 * user's refused) is created with O_EXCL | O_NOFOLLOW and mode 0666 less the umask, written,
 * fsynced, the directory fsynced, then renamed over metadata.json and the directory fsynced.
 * *committed tells whether the rename happened. */
dt_status dt__ckpt_commit_metadata(const char *dir, const char *op, const char *text, size_t length,
                                   bool *committed);

/* Removes data files of generations other than `generation` and the stale temporaries a
 * crashed writer of this library left (".dt-" and eight letters or digits, the form
 * profile/output_file.c creates): only regular files of this user last written before
 * `started` (the save's start), so a temporary another writer is filling now is kept, and
 * no other name is touched. Unreferenced once the new metadata is committed. */
void dt__ckpt_remove_old_files(const char *dir, int64_t generation, time_t started);

/* fsync of a directory, so that the names created or renamed in it are durable. */
void dt__ckpt_fsync_dir(const char *dir);

/* Opens a file to read without blocking on a FIFO; only a regular file is accepted. The
 * descriptor, or -1 with *err an errno value (EINVAL for a file that is not regular). */
struct stat;
int dt__ckpt_open_regular(const char *path, struct stat *sb, int *err);

/* The block [offset, offset + length) of a tensor of `shape` that mesh coordinates `coords`
 * hold under `placements` (Shard and Replicate): sharded dims split in mesh-dim order,
 * torch.chunk sizes, as the dist layer does (checkpoint.c). */
void dt__ckpt_block_at(int ndim, const int64_t *shape, int mesh_ndim, const int *mesh_shape,
                       const int *coords, const dt_placement *placements, int64_t *offset,
                       int64_t *length);

/* The block record of a block at `offsets` with `lengths` (ndim of each), as a shard's
 * __metadata__ holds it: "offsets [0, 0], lengths [4, 5]". */
void dt__ckpt_block_record(int ndim, const int64_t *offsets, const int64_t *lengths, char *buf,
                           size_t size);

/* The agreement of a checkpoint's ranks (checkpoint_agree.c): gathers (mine, this rank's
 * message, payload) from every rank of comm. Every rank returns the same status: DT_OK when all
 * ranks are fine, else the status of the lowest failing rank; its message is that rank's own,
 * prefixed "rank R:" on the others. On DT_OK *out holds the gather (dt__ckpt_phase_payload
 * reads it; dt_free). *heard tells whether the gather itself worked, that is whether the
 * verdict is known to be the same on every rank. */
dt_status dt__ckpt_phase_agree(dt_comm *comm, const char *op, dt_status mine, const void *payload,
                               size_t payload_length, dt_objects **out, bool *heard);

/* The payload of rank r in a gather of dt__ckpt_phase_agree, or NULL when its object is
 * malformed. */
const unsigned char *dt__ckpt_phase_payload(const dt_objects *all, int r, size_t *length);

/* Writes metadata text; version 3 or more ends with the checksum of the text before it. */
void dt__ckpt_meta_write(const dt__ckpt_meta *meta, dt__ckpt_text *out);
void dt__ckpt_meta_free(dt__ckpt_meta *meta);

#endif
