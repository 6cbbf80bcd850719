/*
 * The tests' stand-in device kind, "mirror": host memory that the library must treat as
 * unreadable (not host-accessible), MIRROR_DEVICES devices (8 unless the test defines another
 * count before including this), copies by memcpy, live blocks counted so that a test can check
 * that nothing leaked. Each test registers it (dt__device_register_memory(MIRROR,
 * &mirror_memory)) with the kernels and mover it needs, and unregisters it after.
 */
#ifndef DT_TESTS_MIRROR_DEVICE_H
#define DT_TESTS_MIRROR_DEVICE_H

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/device_impl.h"

#define MIRROR DT__DEVICE_RUNTIME_KIND
#ifndef MIRROR_DEVICES
#define MIRROR_DEVICES 8
#endif

static atomic_int live_blocks;

static int mirror_count(void) { return MIRROR_DEVICES; }
static void *mirror_alloc(int index, size_t nbytes) {
  (void)index;
  void *p = malloc(nbytes ? nbytes : 1);
  if (p) atomic_fetch_add(&live_blocks, 1);
  return p;
}
static void mirror_free(int index, void *p) {
  (void)index;
  atomic_fetch_sub(&live_blocks, 1);
  free(p);
}
static dt_status mirror_to_host(int index, void *host, const void *dev, size_t n) {
  (void)index;
  memcpy(host, dev, n);
  return DT_OK;
}
static dt_status mirror_from_host(int index, void *dev, const void *host, size_t n) {
  (void)index;
  memcpy(dev, host, n);
  return DT_OK;
}
static dt_status mirror_within(int di, void *dst, int si, const void *src, size_t n) {
  (void)di, (void)si;
  memcpy(dst, src, n);
  return DT_OK;
}

static const dt_device_memory mirror_memory = {.name = "mirror",
                                               .host_accessible = false,
                                               .count = mirror_count,
                                               .alloc = mirror_alloc,
                                               .free = mirror_free,
                                               .to_host = mirror_to_host,
                                               .from_host = mirror_from_host,
                                               .within = mirror_within};

#endif /* DT_TESTS_MIRROR_DEVICE_H */
