/*
 * DLPack: a local tensor (or a distributed tensor's local shard) exported as a managed tensor
 * without copying, and a managed tensor imported as a tensor, honouring the deleter contract
 * both ways. CPU memory travels as kDLCPU, CUDA memory as kDLCUDA with its device id. The
 * stream handshake, in C where no stream is passed: an export of a CUDA tensor waits for its
 * device's queued work (the consumer may then read it on any stream), and an import of
 * kDLCUDA memory waits for the device before libdtensor's stream touches it (the producer's
 * queued writes, on whatever stream of this process, are done). The header is the system's
 * <dlpack/dlpack.h> (Debian's libdlpack-dev); the versioned struct exists only from DLPack 1.0
 * on.
 */
#include <inttypes.h>
#include <string.h>

#include "core/core_impl.h"
#include "dtensor/checkpoint.h"
#include "dtensor/cuda.h"
#include "dtensor/dist.h"
#include "tensor/device_impl.h"

#ifdef DT_HAVE_DLPACK
#include <dlpack/dlpack.h>

/* DLPack 1.x has DLPACK_MAJOR_VERSION/DLPACK_MINOR_VERSION; 0.x only DLPACK_VERSION (60). */
#if defined(DLPACK_MAJOR_VERSION)
#define DT_DLPACK_VERSION (DLPACK_MAJOR_VERSION * 100 + DLPACK_MINOR_VERSION * 10)
#define DT_DLPACK_VERSIONED 1
#else
#define DT_DLPACK_VERSION DLPACK_VERSION
#define DT_DLPACK_VERSIONED 0
#endif
/* kDLBool arrived in DLPack 0.8. */
#define DT_DLPACK_HAS_BOOL (DT_DLPACK_VERSION >= 80)

int dt_dlpack_header_version(void) { return DT_DLPACK_VERSION; }

/* ---- dtypes ------------------------------------------------------------------------------ */

static DLDataType dtype_to_dl(dt_dtype dtype) {
  DLDataType d = {.code = kDLFloat, .bits = 32, .lanes = 1};
  switch (dtype) {
  case DT_F32: break;
  case DT_F64: d.bits = 64; break;
  case DT_BF16: d.code = kDLBfloat, d.bits = 16; break;
  case DT_F16: d.bits = 16; break;
  case DT_I64: d.code = kDLInt, d.bits = 64; break;
  case DT_I32: d.code = kDLInt, d.bits = 32; break;
  case DT_U8: d.code = kDLUInt, d.bits = 8; break;
#if DT_DLPACK_HAS_BOOL
  case DT_BOOL: d.code = kDLBool, d.bits = 8; break;
#else
  /* The header predates kDLBool: bytes of 0/1 travel as uint8, as PyTorch did then. */
  case DT_BOOL: d.code = kDLUInt, d.bits = 8; break;
#endif
  default: break; /* every valid dtype is listed above */
  }
  return d;
}

/* DT_DTYPE_COUNT when the DLPack type has no dtype here. */
static dt_dtype dtype_from_dl(DLDataType d) {
  if (d.lanes != 1) return DT_DTYPE_COUNT;
  switch (d.code) {
  case kDLFloat:
    return d.bits == 32 ? DT_F32 : d.bits == 64 ? DT_F64 : d.bits == 16 ? DT_F16 : DT_DTYPE_COUNT;
  case kDLBfloat: return d.bits == 16 ? DT_BF16 : DT_DTYPE_COUNT;
  case kDLInt: return d.bits == 64 ? DT_I64 : d.bits == 32 ? DT_I32 : DT_DTYPE_COUNT;
  case kDLUInt: return d.bits == 8 ? DT_U8 : DT_DTYPE_COUNT;
#if DT_DLPACK_HAS_BOOL
  case kDLBool: return d.bits == 8 ? DT_BOOL : DT_DTYPE_COUNT;
#endif
  default: return DT_DTYPE_COUNT;
  }
}

/* ---- Export ------------------------------------------------------------------------------ */

/* One allocation per export: the view that keeps the storage alive, the shape and strides the
 * DLTensor points at, and the managed tensor itself. */
typedef struct export_ctx {
  dt_tensor *view;
  DLDevice device;
  int64_t shape[DT_MAX_DIMS];
  int64_t strides[DT_MAX_DIMS];
  DLManagedTensor managed;
#if DT_DLPACK_VERSIONED
  struct DLManagedTensorVersioned versioned; /* no typedef in some 1.x headers */
#endif
} export_ctx;

static DLTensor export_dl_tensor(export_ctx *ctx) {
  dt_tensor *v = ctx->view;
  return (DLTensor){
      .data = dt__tensor_base(v),
      .device = ctx->device,
      .ndim = v->ndim,
      .dtype = dtype_to_dl(v->dtype),
      .shape = ctx->shape,
      .strides = ctx->strides,
      .byte_offset = 0,
  };
}

static void export_ctx_free(export_ctx *ctx) {
  dt_tensor_release(ctx->view);
  dt__free(ctx);
}

static void managed_deleter(DLManagedTensor *self) {
  if (self) export_ctx_free(self->manager_ctx);
}

#if DT_DLPACK_VERSIONED
static void versioned_deleter(struct DLManagedTensorVersioned *self) {
  if (self) export_ctx_free(self->manager_ctx);
}
#endif

/* An export of t: a handle of its own on t's data (the local shard of a distributed tensor),
 * so that what the caller later does with t's handle does not affect the export, and both
 * managed structs (the unversioned and, with DLPack >= 1.0, the versioned one) describing it;
 * the caller hands out the one it was asked for. */
static dt_status export_new(const char *op, dt_tensor *t, bool out_given, export_ctx **out) {
  *out = NULL;
  if (!out_given) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  if (!t) return dt__error(DT_ERR_INVALID, "%s: t is NULL", op);
  /* CPU memory (kDLCPU) and CUDA memory (kDLCUDA) are exported; another device's is refused,
   * never read. */
  dt_device device = dt_tensor_device(t);
  if (device.kind != DT_DEVICE_CPU && device.kind != DT_DEVICE_CUDA) {
    char name[48];
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: the tensor is on %s; only CPU and CUDA tensors are exported", op,
                     dt_device_format(device, name, sizeof name));
  }
  /* The handshake: the tensor's queued writes finish before the consumer reads it. */
  dt_status st = device.kind == DT_DEVICE_CUDA ? dt_cuda_synchronize(device.index) : DT_OK;
  if (st) {
    dt__error_prefix(op);
    return st;
  }
  dt_tensor *view = NULL;
  st = t->spec ? dt_dist_to_local(t, &view)
               : dt__tensor_view(t, t->ndim, t->shape, t->strides, t->offset, &view);
  if (st) {
    dt__error_prefix(op);
    return st;
  }
  export_ctx *ctx = dt__calloc(sizeof *ctx);
  if (!ctx) {
    dt_tensor_release(view);
    return dt__error(DT_ERR_NOMEM, "%s: cannot allocate the managed tensor", op);
  }
  ctx->view = view;
  ctx->device = device.kind == DT_DEVICE_CUDA
                    ? (DLDevice){.device_type = kDLCUDA, .device_id = device.index}
                    : (DLDevice){.device_type = kDLCPU, .device_id = 0};
  for (int i = 0; i < view->ndim; i++) {
    ctx->shape[i] = view->shape[i];
    ctx->strides[i] = view->strides[i];
  }
  ctx->managed = (struct DLManagedTensor){
      .dl_tensor = export_dl_tensor(ctx), .manager_ctx = ctx, .deleter = managed_deleter};
#if DT_DLPACK_VERSIONED
  ctx->versioned = (struct DLManagedTensorVersioned){
      .version = {.major = DLPACK_MAJOR_VERSION, .minor = DLPACK_MINOR_VERSION},
      .manager_ctx = ctx,
      .deleter = versioned_deleter,
      .flags = 0,
      .dl_tensor = export_dl_tensor(ctx)};
#endif
  *out = ctx;
  return DT_OK;
}

dt_status dt_dlpack_export(dt_tensor *t, struct DLManagedTensor **out) {
  export_ctx *ctx = NULL;
  dt_status st = export_new("dt_dlpack_export", t, out != NULL, &ctx);
  if (out) *out = ctx ? &ctx->managed : NULL;
  return st;
}

/* ---- Import ------------------------------------------------------------------------------ */

/* Checks a producer's DLTensor and wraps it; release(user) runs after the last reference. On
 * an error nothing is wrapped and release is not called. */
static dt_status import_dl_tensor(const char *op, const DLTensor *x, void (*release)(void *),
                                  void *user, dt_tensor **out) {
  DLDeviceType dev = x->device.device_type;
  /* Pinned host memory of CUDA and ROCm is ordinary CPU memory to us; kDLCUDA is a CUDA
   * device's (a build with CUDA and that device present, checked below). */
  if (dev != kDLCPU && dev != kDLCUDAHost && dev != kDLROCMHost && dev != kDLCUDA)
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: device type %d (id %d) is neither CPU memory (kDLCPU = %d) nor CUDA "
                     "memory (kDLCUDA = %d); copy the tensor to the CPU first",
                     op, (int)dev, x->device.device_id, (int)kDLCPU, (int)kDLCUDA);
  dt_dtype dtype = dtype_from_dl(x->dtype);
  if (dtype == DT_DTYPE_COUNT)
    return dt__error(DT_ERR_DTYPE,
                     "%s: DLPack dtype (code %u, bits %u, lanes %u) has no libdtensor dtype "
                     "(float 16/32/64, bfloat 16, int 32/64, uint 8, bool 8, one lane)",
                     op, (unsigned)x->dtype.code, (unsigned)x->dtype.bits,
                     (unsigned)x->dtype.lanes);
  if (x->ndim < 0 || x->ndim > DT_MAX_DIMS)
    return dt__error(DT_ERR_INVALID, "%s: ndim %d is outside [0, %d]", op, x->ndim, DT_MAX_DIMS);
  if (x->ndim > 0 && !x->shape)
    return dt__error(DT_ERR_INVALID, "%s: shape is NULL for ndim %d", op, x->ndim);
  size_t elem = dt_dtype_size(dtype);
  bool empty = false;
  for (int i = 0; i < x->ndim; i++) {
    if (x->shape[i] < 0)
      return dt__error(DT_ERR_INVALID, "%s: shape[%d] is %" PRId64 ", negative", op, i,
                       x->shape[i]);
    if (x->shape[i] == 0) empty = true;
    if (x->strides && x->strides[i] < 0)
      return dt__error(DT_ERR_INVALID,
                       "%s: strides[%d] is %" PRId64 ": negative strides are not supported", op, i,
                       x->strides[i]);
  }
  /* The largest element offset the geometry reaches, without overflow. */
  uint64_t last = 0;
  if (!empty) {
    int64_t contiguous = 1;
    for (int i = x->ndim - 1; i >= 0; i--) {
      int64_t stride = x->strides ? x->strides[i] : contiguous;
      uint64_t reach;
      if (__builtin_mul_overflow((uint64_t)(x->shape[i] - 1), (uint64_t)stride, &reach) ||
          __builtin_add_overflow(last, reach, &last) || last > (uint64_t)DT_MAX_NUMEL)
        return dt__error(DT_ERR_INVALID,
                         "%s: shape and strides reach element offsets past %" PRId64
                         " (dim %d: size %" PRId64 ", stride %" PRId64 ")",
                         op, (int64_t)DT_MAX_NUMEL, i, x->shape[i], stride);
      if (!x->strides && __builtin_mul_overflow(contiguous, x->shape[i], &contiguous))
        return dt__error(DT_ERR_INVALID, "%s: the shape's element count overflows", op);
    }
  }
  if (!x->data && !empty)
    return dt__error(DT_ERR_INVALID, "%s: data is NULL for a non-empty tensor", op);
  if (x->byte_offset % elem != 0)
    return dt__error(DT_ERR_INVALID,
                     "%s: byte_offset %" PRIu64 " is not a multiple of the %zu-byte %s element", op,
                     (uint64_t)x->byte_offset, elem, dt_dtype_name(dtype));
  char *data = x->data ? (char *)x->data + x->byte_offset : NULL;
  if ((uintptr_t)data % elem != 0)
    return dt__error(DT_ERR_INVALID, "%s: data + byte_offset %p is not aligned to %zu bytes", op,
                     (void *)data, elem);
  size_t nbytes = empty ? 0 : (size_t)((last + 1) * elem); /* last <= 2^59, elem <= 8 */
  int64_t contiguous_strides[DT_MAX_DIMS];
  const int64_t *strides = x->strides;
  if (!strides) {
    dt__contiguous_strides(x->ndim, x->shape, contiguous_strides);
    strides = contiguous_strides;
  }
  if (dev != kDLCUDA) {
    dt_status st = dt_wrap_ex(data, nbytes, x->ndim, x->shape, strides, dtype, release, user, out);
    if (st) dt__error_prefix(op);
    return st;
  }
  /* The handshake: the producer's queued writes to the memory finish before ours start. */
  dt_device device = {DT_DEVICE_CUDA, x->device.device_id};
  dt_status st = dt__device_check_available(op, device);
  if (!st) st = dt_cuda_synchronize(device.index);
  if (!st)
    st = dt__wrap_on(op, device, data, nbytes, x->ndim, x->shape, strides, dtype, release, user,
                     out);
  return st;
}

static void call_managed_deleter(void *user) {
  DLManagedTensor *m = user;
  if (m->deleter) m->deleter(m);
}

dt_status dt_dlpack_import(struct DLManagedTensor *managed, dt_tensor **out) {
  static const char op[] = "dt_dlpack_import";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  if (!managed) return dt__error(DT_ERR_INVALID, "%s: managed is NULL", op);
  return import_dl_tensor(op, &managed->dl_tensor, call_managed_deleter, managed, out);
}

/* ---- Versioned (DLPack >= 1.0) ------------------------------------------------------------ */

#if DT_DLPACK_VERSIONED
dt_status dt_dlpack_export_versioned(dt_tensor *t, struct DLManagedTensorVersioned **out) {
  export_ctx *ctx = NULL;
  dt_status st = export_new("dt_dlpack_export_versioned", t, out != NULL, &ctx);
  if (out) *out = ctx ? &ctx->versioned : NULL;
  return st;
}

static void call_versioned_deleter(void *user) {
  struct DLManagedTensorVersioned *m = user;
  if (m->deleter) m->deleter(m);
}

dt_status dt_dlpack_import_versioned(struct DLManagedTensorVersioned *managed, dt_tensor **out) {
  static const char op[] = "dt_dlpack_import_versioned";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  if (!managed) return dt__error(DT_ERR_INVALID, "%s: managed is NULL", op);
  /* A different major version may lay the struct out differently: only its version field
   * can be trusted. */
  if (managed->version.major != DLPACK_MAJOR_VERSION)
    return dt__error(DT_ERR_UNSUPPORTED,
                     "%s: the producer's DLPack version %u.%u has another major version than "
                     "this library's %d.%d",
                     op, (unsigned)managed->version.major, (unsigned)managed->version.minor,
                     DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
  return import_dl_tensor(op, &managed->dl_tensor, call_versioned_deleter, managed, out);
}
#else
dt_status dt_dlpack_export_versioned(dt_tensor *t, struct DLManagedTensorVersioned **out) {
  (void)t;
  if (out) *out = NULL;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "dt_dlpack_export_versioned: libdtensor was built against DLPack header "
                   "version %d, which has no DLManagedTensorVersioned (DLPack >= 1.0); use "
                   "dt_dlpack_export (DLManagedTensor)",
                   DT_DLPACK_VERSION);
}

dt_status dt_dlpack_import_versioned(struct DLManagedTensorVersioned *managed, dt_tensor **out) {
  (void)managed;
  if (out) *out = NULL;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "dt_dlpack_import_versioned: libdtensor was built against DLPack header "
                   "version %d, which has no DLManagedTensorVersioned (DLPack >= 1.0); the "
                   "caller keeps the managed tensor",
                   DT_DLPACK_VERSION);
}
#endif

#else /* no DLPack header at build time */

int dt_dlpack_header_version(void) { return 0; }

/* Every entry point says why it cannot work; the caller keeps whatever it passed. */
static dt_status no_dlpack(const char *op) {
  return dt__error(DT_ERR_UNSUPPORTED,
                   "%s: libdtensor was built without <dlpack/dlpack.h> (install libdlpack-dev "
                   "and reconfigure)",
                   op);
}

dt_status dt_dlpack_export(dt_tensor *t, struct DLManagedTensor **out) {
  (void)t;
  if (out) *out = NULL;
  return no_dlpack("dt_dlpack_export");
}

dt_status dt_dlpack_export_versioned(dt_tensor *t, struct DLManagedTensorVersioned **out) {
  (void)t;
  if (out) *out = NULL;
  return no_dlpack("dt_dlpack_export_versioned");
}

dt_status dt_dlpack_import(struct DLManagedTensor *managed, dt_tensor **out) {
  (void)managed;
  if (out) *out = NULL;
  return no_dlpack("dt_dlpack_import");
}

dt_status dt_dlpack_import_versioned(struct DLManagedTensorVersioned *managed, dt_tensor **out) {
  (void)managed;
  if (out) *out = NULL;
  return no_dlpack("dt_dlpack_import_versioned");
}
#endif
