/*
 * libFuzzer target for a distributed checkpoint's metadata.json parser (dt__ckpt_meta_parse).
 * Any input must parse into metadata that passed every check (each tensor's blocks inside it,
 * inside their file and tiling it exactly, unique names found through the index) and writes
 * back into text that parses to the same metadata; or give an error with a message. Never a
 * crash, a leak, a hang or undefined behaviour (built with ASan + UBSan): fuzz/run.sh
 * checkpoint_meta.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint_meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size ? size : 1); /* exact size: ASan sees a read past the end */
  if (!text) return 0;
  if (size) memcpy(text, data, size);
  dt__ckpt_meta meta;
  dt_status st = dt__ckpt_meta_parse("fuzz", text, size, &meta);
  free(text);
  if (st != DT_OK) {
    if (dt_last_error()[0] == '\0' || meta.n_tensors != 0) abort(); /* a message, nothing kept */
    return 0;
  }
  for (int i = 0; i < meta.n_tensors; i++) {
    const dt__ckpt_tensor *t = &meta.tensors[i];
    if (dt__name_index_find(&meta.names, t->name) != i) abort();
    uint64_t numel = 1, covered = 0;
    for (int d = 0; d < t->ndim; d++) numel *= (uint64_t)t->shape[d];
    for (int k = 0; k < t->n_blocks; k++) {
      const dt__ckpt_block *b = &t->blocks[k];
      uint64_t n = 1;
      for (int d = 0; d < t->ndim; d++) {
        if (b->offsets[d] + b->lengths[d] > t->shape[d]) abort();
        n *= (uint64_t)b->lengths[d];
      }
      if (b->file < 0 || b->file >= meta.n_files || b->end > meta.files[b->file].bytes) abort();
      covered += n;
    }
    if (covered != numel) abort(); /* the blocks tile the tensor */
  }
  /* The writer's text reads back as the same metadata. */
  dt__ckpt_text out = {0};
  dt__ckpt_meta_write(&meta, &out);
  if (!out.failed) {
    dt__ckpt_meta again;
    if (dt__ckpt_meta_parse("fuzz (written back)", out.data, out.length, &again) != DT_OK) abort();
    if (again.n_tensors != meta.n_tensors || again.n_files != meta.n_files) abort();
    dt__ckpt_meta_free(&again);
  }
  dt__free(out.data);
  dt__ckpt_meta_free(&meta);
  return 0;
}
