/*
 * The checks of a checkpoint's parsed metadata before a byte of data is trusted: the files'
 * identities, unique tensor names, every block inside its tensor and file, and the blocks of
 * each tensor tiling it exactly (a flipped digit in an offset makes two blocks overlap and
 * leaves a gap; a count that merely adds up is not enough).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint_meta.h"

/* The element limit of a tensor, as the safetensors reader's: its bytes fit in int64. */
#define MAX_ELEMENTS ((uint64_t)1 << 59)

static dt_status corrupt(const char *label, const char *tensor, const char *what) {
  return dt__error(DT_ERR_INVALID, "dt_checkpoint_load: %s: tensor `%s`: %s", label,
                   dt__ckpt_shown(0, tensor), what);
}

static int compare_ranks(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static dt_status check_files(const char *label, int version, const dt__ckpt_meta *meta) {
  if (version < 2) return DT_OK;
  int *ranks = dt__alloc(sizeof *ranks * (size_t)(meta->n_files + 1));
  if (!ranks) return dt__error(DT_ERR_NOMEM, "dt_checkpoint_load: cannot allocate for files");
  dt_status st = DT_OK;
  for (int i = 0; i < meta->n_files && !st; i++) {
    const dt__ckpt_file *f = &meta->files[i];
    ranks[i] = f->rank;
    if (!f->has_identity)
      st = dt__error(DT_ERR_INVALID,
                     "dt_checkpoint_load: %s: file %s has no generation, rank and crc32c "
                     "(version 2 requires them)",
                     label, dt__ckpt_shown(0, f->name));
    else if (f->generation != meta->generation)
      st = dt__error(DT_ERR_INVALID,
                     "dt_checkpoint_load: %s: file %s is listed as generation %" PRId64
                     " in a checkpoint of generation %" PRId64,
                     label, dt__ckpt_shown(0, f->name), f->generation, meta->generation);
  }
  qsort(ranks, (size_t)meta->n_files, sizeof *ranks, compare_ranks);
  for (int i = 1; i < meta->n_files && !st; i++)
    if (ranks[i] == ranks[i - 1])
      st = dt__error(DT_ERR_INVALID, "dt_checkpoint_load: %s: two files are listed as rank %d",
                     label, ranks[i]);
  dt__free(ranks);
  return st;
}

/* One block alone: a listed file, inside the tensor, not empty, its bytes in its file. */
static dt_status check_block(const char *label, const dt__ckpt_meta *meta, const dt__ckpt_tensor *t,
                             int k, uint64_t *numel) {
  const dt__ckpt_block *b = &t->blocks[k];
  char what[400], offsets[160], lengths[160];
  dt__format_ints(offsets, sizeof offsets, t->ndim, b->offsets);
  dt__format_ints(lengths, sizeof lengths, t->ndim, b->lengths);
  if (b->file >= meta->n_files) {
    snprintf(what, sizeof what, "block %d names file %d of %d", k, b->file, meta->n_files);
    return corrupt(label, t->name, what);
  }
  uint64_t n = 1;
  for (int d = 0; d < t->ndim; d++) {
    /* Both are at most 2^62; their sum is never formed, so it cannot overflow. */
    if (b->offsets[d] > t->shape[d] || b->lengths[d] > t->shape[d] - b->offsets[d]) {
      snprintf(what, sizeof what,
               "block %d (offsets %s, lengths %s) passes the shape in dim %d (size %" PRId64 ")", k,
               offsets, lengths, d, t->shape[d]);
      return corrupt(label, t->name, what);
    }
    if (b->lengths[d] == 0) {
      snprintf(what, sizeof what, "block %d (offsets %s, lengths %s) is empty", k, offsets,
               lengths);
      return corrupt(label, t->name, what);
    }
    n *= (uint64_t)b->lengths[d]; /* at most the tensor's element count, checked below 2^59 */
  }
  const dt__ckpt_file *f = &meta->files[b->file];
  if (b->end < b->begin || b->end - b->begin != n * dt_dtype_size(t->dtype) || b->end > f->bytes) {
    snprintf(what, sizeof what,
             "block %d: byte range [%" PRIu64 ", %" PRIu64 ") does not hold its %" PRIu64
             " elements inside file %s (%" PRIu64 " bytes)",
             k, b->begin, b->end, n, dt__ckpt_shown(1, f->name), f->bytes);
    return corrupt(label, t->name, what);
  }
  *numel = n;
  return DT_OK;
}

static bool boxes_meet(int ndim, const dt__ckpt_block *a, const dt__ckpt_block *b) {
  for (int d = 0; d < ndim; d++)
    if (a->offsets[d] >= b->offsets[d] + b->lengths[d] ||
        b->offsets[d] >= a->offsets[d] + a->lengths[d])
      return false;
  return true;
}

typedef struct start {
  int64_t at;
  int block;
} start;

static int compare_starts(const void *a, const void *b) {
  const start *x = a, *y = b;
  if (x->at != y->at) return x->at < y->at ? -1 : 1;
  return (x->block > y->block) - (x->block < y->block);
}

/* No two blocks overlap: a sweep along the dim with the most distinct block starts compares
 * each block only with those whose range in that dim meets its own (a grid of R1 x R2 blocks
 * costs about n * min(R1, R2) comparisons, not n^2). */
static dt_status check_disjoint(const char *label, const dt__ckpt_tensor *t) {
  int n = t->n_blocks;
  if (n < 2) return DT_OK;
  start *s = dt__alloc(sizeof *s * (size_t)n);
  if (!s) return dt__error(DT_ERR_NOMEM, "dt_checkpoint_load: cannot allocate for %d blocks", n);
  int sweep = 0, best = -1;
  for (int d = 0; d < t->ndim; d++) {
    for (int k = 0; k < n; k++) s[k] = (start){t->blocks[k].offsets[d], k};
    qsort(s, (size_t)n, sizeof *s, compare_starts);
    int distinct = 1;
    for (int k = 1; k < n; k++) distinct += s[k].at != s[k - 1].at;
    if (distinct > best) {
      best = distinct;
      sweep = d;
    }
  }
  for (int k = 0; k < n; k++) s[k] = (start){t->ndim ? t->blocks[k].offsets[sweep] : 0, k};
  qsort(s, (size_t)n, sizeof *s, compare_starts);
  dt_status st = DT_OK;
  for (int i = 0; i < n && !st; i++) {
    const dt__ckpt_block *a = &t->blocks[s[i].block];
    int64_t end = t->ndim ? a->offsets[sweep] + a->lengths[sweep] : 1;
    for (int j = i + 1; j < n && s[j].at < end && !st; j++) {
      const dt__ckpt_block *b = &t->blocks[s[j].block];
      if (!boxes_meet(t->ndim, a, b)) continue;
      char what[500], ao[160], al[160], bo[160], bl[160];
      int first = s[i].block < s[j].block ? s[i].block : s[j].block;
      int second = s[i].block < s[j].block ? s[j].block : s[i].block;
      const dt__ckpt_block *x = &t->blocks[first], *y = &t->blocks[second];
      snprintf(what, sizeof what,
               "blocks %d (offsets %s, lengths %s) and %d (offsets %s, lengths %s) overlap", first,
               dt__format_ints(ao, sizeof ao, t->ndim, x->offsets),
               dt__format_ints(al, sizeof al, t->ndim, x->lengths), second,
               dt__format_ints(bo, sizeof bo, t->ndim, y->offsets),
               dt__format_ints(bl, sizeof bl, t->ndim, y->lengths));
      st = corrupt(label, t->name, what);
    }
  }
  dt__free(s);
  return st;
}

static dt_status check_tensor(const char *label, const dt__ckpt_meta *meta,
                              const dt__ckpt_tensor *t) {
  uint64_t numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] != 0 && numel > MAX_ELEMENTS / (uint64_t)t->shape[d]) {
      char what[200], shape[160];
      snprintf(what, sizeof what, "shape %s passes 2^59 elements",
               dt__format_ints(shape, sizeof shape, t->ndim, t->shape));
      return corrupt(label, t->name, what);
    }
    numel *= (uint64_t)t->shape[d];
  }
  /* Each block alone, then the sum of their elements (stopped past the tensor's: more than
   * it holds means an overlap, which check_disjoint then names). */
  uint64_t covered = 0;
  for (int k = 0; k < t->n_blocks; k++) {
    uint64_t n = 0;
    dt_status st = check_block(label, meta, t, k, &n);
    if (st) return st;
    if (covered <= numel) covered += n;
  }
  dt_status st = check_disjoint(label, t);
  if (st) return st;
  if (covered != numel) {
    char what[200];
    snprintf(what, sizeof what,
             "the blocks cover %" PRIu64 " of its %" PRIu64 " elements (a gap between them)",
             covered, numel);
    return corrupt(label, t->name, what);
  }
  return DT_OK;
}

dt_status dt__ckpt_meta_check(const char *label, int version, dt__ckpt_meta *meta) {
  meta->version = version;
  dt_status st = check_files(label, version, meta);
  if (st) return st;
  if (dt__name_index_init(&meta->names, meta->n_tensors))
    return dt__error(DT_ERR_NOMEM, "dt_checkpoint_load: cannot index %d tensors", meta->n_tensors);
  for (int i = 0; i < meta->n_tensors; i++) {
    const dt__ckpt_tensor *t = &meta->tensors[i];
    if (dt__name_index_add(&meta->names, t->name, i) != -1)
      return dt__error(DT_ERR_INVALID, "dt_checkpoint_load: %s: tensor `%s` is listed twice", label,
                       dt__ckpt_shown(0, t->name));
    st = check_tensor(label, meta, t);
    if (st) return st;
  }
  return DT_OK;
}
