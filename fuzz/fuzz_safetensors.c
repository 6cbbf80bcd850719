/*
 * libFuzzer target for the safetensors reader. Any input must open into a handle whose every
 * tensor reads back (copied and borrowed) with consistent sizes, or give an error status with
 * a message and no handle; never a crash, a leak, a hang or undefined behaviour (built with
 * ASan + UBSan). The input is copied into an exact-size buffer so that ASan sees any read past
 * the image. Build and run with fuzz/run_safetensors.sh.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *image = malloc(size ? size : 1);
  if (!image) return 0;
  if (size) memcpy(image, data, size);
  dt_safetensors *file = (dt_safetensors *)1;
  dt_status st = dt_safetensors_open_memory(image, size, &file);
  if (st != DT_OK) {
    if (file != NULL || dt_last_error()[0] == '\0') abort(); /* contract: no handle, a message */
    free(image);
    return 0;
  }
  uint64_t covered = 0;
  for (int i = 0; i < dt_safetensors_count(file); i++) {
    dt_safetensors_entry_info entry;
    if (dt_safetensors_entry(file, i, &entry) != DT_OK) abort();
    if (dt_safetensors_find(file, entry.name) != i) abort(); /* names are unique */
    covered += entry.data_end - entry.data_begin;
    dt_tensor *copy = NULL, *borrowed = NULL;
    if (dt_safetensors_load(file, entry.name, DT_SAFETENSORS_COPY, &copy) != DT_OK) abort();
    size_t bytes = (size_t)dt_tensor_numel(copy) * dt_dtype_size(entry.dtype);
    if (bytes != entry.data_end - entry.data_begin) abort();
    /* A borrow may be refused only for misalignment; when given, its bytes equal the copy's. */
    if (dt_safetensors_load(file, entry.name, DT_SAFETENSORS_BORROW, &borrowed) == DT_OK) {
      if (bytes && memcmp(dt_tensor_data(copy), dt_tensor_data(borrowed), bytes) != 0) abort();
      dt_tensor_release(borrowed);
    }
    dt_tensor_release(copy);
  }
  for (int i = 0; i < dt_safetensors_metadata_count(file); i++) {
    const char *key, *value;
    if (dt_safetensors_metadata(file, i, &key, &value) != DT_OK) abort();
    if (dt_safetensors_metadata_find(file, key) != value) abort(); /* keys are unique */
  }
  if (dt_safetensors_bytes_read(file) != covered) abort(); /* every data byte read once */
  dt_safetensors_destroy(file);
  free(image);
  return 0;
}
