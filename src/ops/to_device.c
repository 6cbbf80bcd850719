/* dt_to_device: the one way a tensor crosses devices. The source is made contiguous on its own
 * device (its kernel table's contiguous), then its bytes go through dt__device_copy. */
#include "ops/op_impl.h"
#include "tensor/device_impl.h"

dt_status dt_to_device(dt_tensor *t, dt_device device, dt_tensor **out) {
  static const char op[] = "dt_to_device";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  if (!t) return dt__error(DT_ERR_INVALID, "%s: t is NULL", op);
  dt_status st = dt__device_check_available(op, device);
  if (st) return st;
  if (t->spec) {
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: t is distributed; move its local shard (dt_dist_to_local) and make a "
                     "distributed tensor of it on a mesh of the target device",
                     op);
  }
  if (t->storage->device == dt__device_key(device)) {
    *out = dt_tensor_retain(t);
    return DT_OK;
  }
  dt_tensor *src = NULL, *dst = NULL;
  st = dt_contiguous(t, &src);
  if (st) {
    dt__error_prefix(op);
    return st;
  }
  st = dt__tensor_new_on(device, src->ndim, src->shape, src->dtype, &dst);
  if (!st) {
    st = dt__device_copy(device, dst->storage->data, dt__device_of_key(src->storage->device),
                         dt__tensor_base(src), dst->storage->nbytes);
  }
  dt_tensor_release(src);
  if (st) {
    dt_tensor_release(dst);
    return st;
  }
  *out = dst;
  return DT_OK;
}
