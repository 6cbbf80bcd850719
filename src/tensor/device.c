/* The device layer: the memory of each device kind, the one copy between devices, device
 * names, and the checks host code makes before it reads element memory. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "tensor/device_impl.h"

static int cpu_count(void) { return 1; }

/* The CPU's entry names it and says the host reads it; its tensors never go through the
 * function pointers (one allocation per tensor, memcpy for copies). */
static const dt_device_memory cpu_memory = {
    .name = "cpu", .host_accessible = true, .count = cpu_count};

static const dt_device_memory *memories[DT__DEVICE_KINDS] = {[DT_DEVICE_CPU] = &cpu_memory};

const dt_device_memory *dt__device_memory(int kind) {
  return kind >= 0 && kind < DT__DEVICE_KINDS ? memories[kind] : NULL;
}

dt_status dt__device_register_memory(int kind, const dt_device_memory *memory) {
  if (kind <= DT_DEVICE_CPU || kind >= DT__DEVICE_KINDS)
    return dt__error(DT_ERR_INVALID, "dt__device_register_memory: kind %d cannot be registered",
                     kind);
  if (memory && (!memory->name || !memory->count || !memory->alloc || !memory->free ||
                 !memory->to_host || !memory->from_host || !memory->within))
    return dt__error(DT_ERR_INVALID, "dt__device_register_memory: kind %d lacks a function", kind);
  memories[kind] = memory;
  return DT_OK;
}

const char *dt_device_kind_name(int kind) {
  const dt_device_memory *m = dt__device_memory(kind);
  if (m) return m->name;
  return kind == DT_DEVICE_CUDA ? "cuda" : NULL;
}

const char *dt_device_format(dt_device device, char *buf, size_t size) {
  if (!buf || size == 0) return "";
  const char *name = dt_device_kind_name((int)device.kind);
  if (device.kind == DT_DEVICE_CPU && device.index == 0)
    snprintf(buf, size, "cpu");
  else if (name)
    snprintf(buf, size, "%s:%d", name, device.index);
  else
    snprintf(buf, size, "device kind %d:%d", (int)device.kind, device.index);
  return buf;
}

const char *dt__device_key_format(uint32_t key, char *buf, size_t size) {
  return dt_device_format(dt__device_of_key(key), buf, size);
}

dt_status dt_device_parse(const char *text, dt_device *out) {
  if (!text || !out)
    return dt__error(DT_ERR_INVALID, "dt_device_parse: %s is NULL", text ? "out" : "text");
  const char *colon = strchr(text, ':');
  size_t len = colon ? (size_t)(colon - text) : strlen(text);
  long index = 0;
  if (colon) {
    char *end = NULL;
    /* Digits only: strtol alone took "cuda: 1" and "cuda:+1". */
    if (colon[1] >= '0' && colon[1] <= '9') index = strtol(colon + 1, &end, 10);
    if (!end || end == colon + 1 || *end != '\0' || index < 0 || index > 0xffffff)
      return dt__error(DT_ERR_INVALID, "dt_device_parse: bad device index in \"%s\"", text);
  }
  for (int kind = 0; kind < DT__DEVICE_KINDS; kind++) {
    const char *name = dt_device_kind_name(kind);
    if (name && strlen(name) == len && strncmp(name, text, len) == 0) {
      if (kind == DT_DEVICE_CPU && index != 0)
        return dt__error(DT_ERR_INVALID, "dt_device_parse: \"%s\": the CPU is device 0", text);
      *out = (dt_device){(dt_device_kind)kind, (int)index};
      return DT_OK;
    }
  }
  return dt__error(DT_ERR_INVALID, "dt_device_parse: unknown device \"%s\" (expected cpu or cuda)",
                   text);
}

bool dt_device_available(dt_device device) {
  const dt_device_memory *m = dt__device_memory((int)device.kind);
  return m && device.index >= 0 && device.index < m->count();
}

dt_status dt__device_check_available(const char *op, dt_device device) {
  if (DT_LIKELY(device.kind == DT_DEVICE_CPU && device.index == 0)) return DT_OK;
  char name[48];
  dt_device_format(device, name, sizeof name);
  const dt_device_memory *m = dt__device_memory((int)device.kind);
  if (!m && device.kind == DT_DEVICE_CUDA) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: device %s is not available: this libdtensor was built without CUDA "
                     "(configure with -DDT_WITH_CUDA=ON)",
                     op, name);
  }
  if (!m) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s: no device of kind %d is registered (device %d:%d)",
                     op, (int)device.kind, (int)device.kind, (int)device.index);
  }
  int count = m->count();
  if (count == 0 && m->absent) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s: device %s is not available: %s", op, name,
                     m->absent());
  }
  if (device.index < 0 || device.index >= count) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s: device %s is not present (%d device%s of kind %s)",
                     op, name, count, count == 1 ? "" : "s", m->name);
  }
  return DT_OK;
}

dt_status dt__check_host_readable(const char *op, const dt_tensor *t) {
  if (DT_LIKELY(t->storage->device == 0)) return DT_OK;
  const dt_device_memory *m = dt__device_memory((int)(t->storage->device & 0xffu));
  if (m && m->host_accessible) return DT_OK;
  char name[48];
  return dt__error(DT_ERR_UNSUPPORTED,
                   "%s: the tensor is on %s, whose memory the host cannot read; copy it to the "
                   "CPU first (dt_to_device)",
                   op, dt__device_key_format(t->storage->device, name, sizeof name));
}

dt_status dt__device_copy(dt_device dst_device, void *dst, dt_device src_device, const void *src,
                          size_t nbytes) {
  if (nbytes == 0) return DT_OK;
  bool dst_cpu = dst_device.kind == DT_DEVICE_CPU, src_cpu = src_device.kind == DT_DEVICE_CPU;
  if (dst_cpu && src_cpu) {
    memcpy(dst, src, nbytes);
    return DT_OK;
  }
  const dt_device_memory *dm = dt__device_memory((int)dst_device.kind);
  const dt_device_memory *sm = dt__device_memory((int)src_device.kind);
  if ((!dst_cpu && !dm) || (!src_cpu && !sm))
    return dt__error(DT_ERR_INTERNAL, "dt__device_copy: a copy to or from an unregistered device");
  if (src_cpu) return dm->from_host(dst_device.index, dst, src, nbytes);
  if (dst_cpu) return sm->to_host(src_device.index, dst, src, nbytes);
  if (dst_device.kind == src_device.kind)
    return dm->within(dst_device.index, dst, src_device.index, src, nbytes);
  /* Two kinds: through the host. */
  void *staging = dt__alloc(nbytes);
  if (!staging)
    return dt__error(DT_ERR_NOMEM, "dt__device_copy: cannot allocate %zu bytes of staging", nbytes);
  dt_status st = sm->to_host(src_device.index, staging, src, nbytes);
  if (!st) st = dm->from_host(dst_device.index, dst, staging, nbytes);
  dt__free(staging);
  return st;
}

dt_device dt_tensor_device(const dt_tensor *t) {
  return t ? dt__device_of_key(t->storage->device) : DT_DEVICE_CPU_VALUE;
}
