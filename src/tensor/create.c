/* Creation of local tensors: empty, zeros, ones, full, arange, from_data. */
#include <inttypes.h>
#include <math.h>

#include "tensor/device_impl.h"

dt_status dt__check_create(const char *op, int ndim, const int64_t *shape, dt_dtype dtype,
                           dt_tensor **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  dt_status st = dt__check_shape(op, ndim, shape);
  if (st) return st;
  if (!dt__dtype_valid(dtype))
    return dt__error(DT_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
  return DT_OK;
}

/* Fills a contiguous tensor with one value, converted once to its dtype. */
static void fill_contiguous(dt_tensor *t, double value) {
  int64_t n = dt__tensor_numel(t);
  size_t esize = dt__dtype_sizes[t->dtype];
  char *p = dt__tensor_base(t);
  if (n == 0) return;
  if (value == 0.0 && !signbit(value)) {
    memset(p, 0, (size_t)n * esize);
    return;
  }
  char element[8];
  dt__store_from_double(t->dtype, element, value);
  if (esize == 4) {
    uint32_t v;
    memcpy(&v, element, 4);
    for (int64_t i = 0; i < n; i++) ((uint32_t *)p)[i] = v;
  } else if (esize == 8) {
    uint64_t v;
    memcpy(&v, element, 8);
    for (int64_t i = 0; i < n; i++) ((uint64_t *)p)[i] = v;
  } else if (esize == 2) {
    uint16_t v;
    memcpy(&v, element, 2);
    for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = v;
  } else {
    memset(p, element[0], (size_t)n);
  }
}

dt_status dt__check_fill_value(const char *op, double v, dt_dtype dtype) {
  double lo = 0, hi = 0;
  switch (dtype) {
  case DT_I64: lo = -9223372036854775808.0, hi = 9223372036854775808.0; break;
  case DT_I32: lo = -2147483648.0, hi = 2147483648.0; break;
  case DT_U8: lo = 0, hi = 256; break;
  default: return DT_OK;
  }
  if (!(trunc(v) >= lo && trunc(v) < hi)) {
    return dt__error(DT_ERR_INVALID, "%s: value %g cannot be converted to %s without overflow", op,
                     v, dt_dtype_name(dtype));
  }
  return DT_OK;
}

dt_status dt_empty(int ndim, const int64_t *shape, dt_dtype dtype, dt_tensor **out) {
  dt_status st = dt__check_create("empty", ndim, shape, dtype, out);
  if (st) return st;
  return dt__tensor_new(ndim, shape, dtype, out);
}

static dt_status full_named(const char *op, int ndim, const int64_t *shape, double value,
                            dt_dtype dtype, dt_tensor **out) {
  dt_status st = dt__check_create(op, ndim, shape, dtype, out);
  if (!st) st = dt__check_fill_value(op, value, dtype);
  if (!st) st = dt__tensor_new(ndim, shape, dtype, out);
  if (st) return st;
  fill_contiguous(*out, value);
  return DT_OK;
}

dt_status dt_full(int ndim, const int64_t *shape, double value, dt_dtype dtype, dt_tensor **out) {
  return full_named("full", ndim, shape, value, dtype, out);
}

dt_status dt_zeros(int ndim, const int64_t *shape, dt_dtype dtype, dt_tensor **out) {
  return full_named("zeros", ndim, shape, 0.0, dtype, out);
}

dt_status dt_ones(int ndim, const int64_t *shape, dt_dtype dtype, dt_tensor **out) {
  return full_named("ones", ndim, shape, 1.0, dtype, out);
}

dt_status dt__arange_count(const char *op, double start, double end, double step, dt_dtype dtype,
                           int64_t *n) {
  if (!dt__dtype_valid(dtype))
    return dt__error(DT_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
  if (step == 0.0 || !isfinite(start) || !isfinite(end) || !isfinite(step)) {
    return dt__error(DT_ERR_INVALID, "%s: start %g, end %g, step %g must be finite with step != 0",
                     op, start, end, step);
  }
  if ((step > 0 && end < start) || (step < 0 && end > start)) {
    return dt__error(DT_ERR_INVALID, "%s: step %g does not lead from %g to %g", op, step, start,
                     end);
  }
  double count = ceil((end - start) / step);
  if (count > 1e15) return dt__error(DT_ERR_INVALID, "%s: %g elements is too many", op, count);
  if (dtype == DT_BOOL)
    return dt__error(DT_ERR_DTYPE, "%s: dtype bool has no range of values (as PyTorch's arange)",
                     op);
  /* An integer dtype must hold every value (the stores would saturate or wrap: PyTorch refuses
   * a bound that does not convert). */
  double lo = dtype == DT_I32 ? -2147483648.0 : dtype == DT_U8 ? 0.0 : -9223372036854775808.0;
  double hi = dtype == DT_I32 ? 2147483647.0 : dtype == DT_U8 ? 255.0 : 9223372036854775807.0;
  double last = count > 0 ? start + (count - 1) * step : start;
  if (!dt_dtype_is_floating(dtype) &&
      (start < lo || start > hi || last < lo || last > hi || (dtype == DT_I64 && last >= hi)))
    return dt__error(DT_ERR_INVALID, "%s: values from %.17g to %.17g do not fit %s [%.17g, %.17g]",
                     op, start, last, dt_dtype_name(dtype), lo, hi);
  *n = (int64_t)count;
  return DT_OK;
}

void dt__arange_fill(dt_tensor *t, double start, double step, int64_t first) {
  char *p = dt__tensor_base(t);
  size_t esize = dt__dtype_sizes[t->dtype];
  int64_t n = t->shape[0];
  for (int64_t i = 0; i < n; i++)
    dt__store_from_double(t->dtype, p + i * (int64_t)esize, start + (double)(first + i) * step);
}

dt_status dt_arange(double start, double end, double step, dt_dtype dtype, dt_tensor **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_arange: out is NULL");
  *out = NULL;
  int64_t n = 0;
  dt_status st = dt__arange_count("dt_arange", start, end, step, dtype, &n);
  if (!st) st = dt__tensor_new(1, &n, dtype, out);
  if (st) return st;
  dt__arange_fill(*out, start, step, 0);
  return DT_OK;
}

dt_status dt_from_data(const void *data, int ndim, const int64_t *shape, dt_dtype dtype,
                       dt_tensor **out) {
  dt_status st = dt__check_create("from_data", ndim, shape, dtype, out);
  if (st) return st;
  int64_t numel = dt__numel(ndim, shape);
  if (!data && numel > 0)
    return dt__error(DT_ERR_INVALID, "dt_from_data: data is NULL for %" PRId64 " elements", numel);
  st = dt__tensor_new(ndim, shape, dtype, out);
  if (st) return st;
  if (numel > 0) memcpy(dt__tensor_base(*out), data, (size_t)numel * dt__dtype_sizes[dtype]);
  return DT_OK;
}

/* ---- On a device ------------------------------------------------------------------------- */

/* The options' device, checked: NULL options are the CPU. */
static dt_status options_device(const char *op, const dt_tensor_options *options,
                                dt_device *device) {
  *device = options ? options->device : DT_DEVICE_CPU_VALUE;
  return dt__device_check_available(op, *device);
}

/* A CPU tensor's contents moved into a new tensor of its shape on device (the CPU: itself). */
static dt_status move_to(dt_device device, dt_tensor **t) {
  if (device.kind == DT_DEVICE_CPU) return DT_OK;
  dt_tensor *host = *t, *moved = NULL;
  *t = NULL;
  dt_status st = dt__tensor_new_on(device, host->ndim, host->shape, host->dtype, &moved);
  if (!st) {
    st = dt__device_copy(device, moved->storage->data, DT_DEVICE_CPU_VALUE, dt__tensor_base(host),
                         moved->storage->nbytes);
  }
  dt_tensor_release(host);
  if (st) {
    dt_tensor_release(moved);
    return st;
  }
  *t = moved;
  return DT_OK;
}

dt_status dt_empty_ex(int ndim, const int64_t *shape, dt_dtype dtype,
                      const dt_tensor_options *options, dt_tensor **out) {
  dt_device device;
  dt_status st = dt__check_create("empty", ndim, shape, dtype, out);
  if (!st) st = options_device("empty", options, &device);
  if (st) return st;
  return dt__tensor_new_on(device, ndim, shape, dtype, out);
}

dt_status dt_full_ex(int ndim, const int64_t *shape, double value, dt_dtype dtype,
                     const dt_tensor_options *options, dt_tensor **out) {
  dt_device device;
  dt_status st = dt__check_create("full", ndim, shape, dtype, out);
  if (!st) st = options_device("full", options, &device);
  if (!st) st = full_named("full", ndim, shape, value, dtype, out);
  if (!st) st = move_to(device, out);
  return st;
}

dt_status dt_from_data_ex(const void *data, int ndim, const int64_t *shape, dt_dtype dtype,
                          const dt_tensor_options *options, dt_tensor **out) {
  dt_device device;
  dt_status st = dt__check_create("from_data", ndim, shape, dtype, out);
  if (!st) st = options_device("from_data", options, &device);
  if (st) return st;
  if (device.kind == DT_DEVICE_CPU) return dt_from_data(data, ndim, shape, dtype, out);
  int64_t numel = dt__numel(ndim, shape);
  if (!data && numel > 0)
    return dt__error(DT_ERR_INVALID, "dt_from_data_ex: data is NULL for %" PRId64 " elements",
                     numel);
  st = dt__tensor_new_on(device, ndim, shape, dtype, out);
  if (!st)
    st = dt__device_copy(device, (*out)->storage->data, DT_DEVICE_CPU_VALUE, data,
                         (*out)->storage->nbytes);
  if (st) {
    dt_tensor_release(*out);
    *out = NULL;
  }
  return st;
}
