/* The device kinds' fused routines (device_routines.h): one registered table per kind. */
#include "kernels/device_routines.h"

static const dt_device_routines *routines[DT__DEVICE_KINDS];

dt_status dt__device_routines_register(int kind, const dt_device_routines *r) {
  if (kind <= DT_DEVICE_CPU || kind >= DT__DEVICE_KINDS) {
    return dt__error(DT_ERR_INVALID, "dt__device_routines_register: kind %d cannot be registered",
                     kind);
  }
  routines[kind] = r;
  return DT_OK;
}

const dt_device_routines *dt__device_routines(int kind) {
  return kind > DT_DEVICE_CPU && kind < DT__DEVICE_KINDS ? routines[kind] : NULL;
}
