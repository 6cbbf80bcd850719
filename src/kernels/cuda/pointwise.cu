/*
 * Pointwise CUDA kernels: unary, gelu_backward, binary with broadcasting and type promotion,
 * copies with conversion, where, masked_fill and fill. One functor per family, instantiated
 * for 32- and 64-bit indexing only; dtypes and ops are switched at run time inside the
 * functor (a switch every thread of a warp takes alike), which keeps nvcc's instantiations to
 * a handful. The element arithmetic is kernels/math/unary.h's and binary.h's, the conversions
 * tensor/element.h's: the CPU's own.
 */
#include "kernels/cuda/indexer.cuh"
#include "kernels/math/binary.h"
#include "kernels/math/unary.h"

/* ---- unary ---------------------------------------------------------------------------------- */

struct dt_cuda_unary_fn {
  dt_unary_op op;
  int dtype;
  __device__ void operator()(char **p) const {
    switch (dtype) {
    case DT_F32: *(float *)p[0] = dt__unary_f32(op, *(const float *)p[1]); break;
    case DT_F64: *(double *)p[0] = dt__unary_f64(op, *(const double *)p[1]); break;
    case DT_BF16:
      *(uint16_t *)p[0] =
          dt__elem_f32_to_bf16(dt__unary_f32(op, dt__elem_bf16_to_f32(*(const uint16_t *)p[1])));
      break;
    case DT_F16:
      *(uint16_t *)p[0] =
          dt__elem_f32_to_f16(dt__unary_f32(op, dt__elem_f16_to_f32(*(const uint16_t *)p[1])));
      break;
    default: dt__elem_store_i64(dtype, p[0], dt__unary_i64(op, dt__elem_load_i64(dtype, p[1])));
    }
  }
};

extern "C" int dt__cuda_launch_unary(void *stream, dt_unary_op op, const dt_cuda_ref *out,
                                     const dt_cuda_ref *a) {
  const dt_cuda_ref *ops[] = {out, a};
  dt_cuda_space s;
  dt_cuda_space_init(&s, 2, ops);
  return dt_cuda_launch_elementwise<2>((cudaStream_t)stream, &s, dt_cuda_unary_fn{op, a->dtype});
}

/* ---- gelu_backward ----------------------------------------------------------------------------
 */

/* float32 as the CPU's contiguous loop (vmath.h's CDF); the other dtypes in double. */
struct dt_cuda_gelu_backward_fn {
  bool tanh_form;
  int dtype;
  __device__ void operator()(char **p) const {
    if (dtype == DT_F32) {
      float x = *(const float *)p[2];
      float d = tanh_form ? dt__gelu_tanh_grad_f32(x) : dt__gelu_grad_f32(x);
      *(float *)p[0] = *(const float *)p[1] * d;
      return;
    }
    double v = dt__elem_load_f64(dtype, p[1]) *
               dt__gelu_grad_f64(tanh_form, dt__elem_load_f64(dtype, p[2]));
    dt__elem_store_f64(dtype, p[0], v);
  }
};

extern "C" int dt__cuda_launch_gelu_backward(void *stream, bool tanh_form, const dt_cuda_ref *out,
                                             const dt_cuda_ref *g, const dt_cuda_ref *x) {
  const dt_cuda_ref *ops[] = {out, g, x};
  dt_cuda_space s;
  dt_cuda_space_init(&s, 3, ops);
  return dt_cuda_launch_elementwise<3>((cudaStream_t)stream, &s,
                                       dt_cuda_gelu_backward_fn{tanh_form, out->dtype});
}

/* ---- binary -----------------------------------------------------------------------------------
 */

/* The CPU's strided loop (kernels/cpu/binary.c): integer results in int64, floating ones in
 * double, then stored in the output dtype. A scalar operand lives in the functor. */
struct dt_cuda_binary_fn {
  dt_binary_op op;
  int a_dtype, b_dtype, out_dtype;
  bool integer, has_scalar;
  double alpha;
  union {
    double f64;
    int64_t i64;
    float f32;
    uint16_t f16;
  } scalar;
  __device__ void operator()(char **p) const {
    const char *b = has_scalar ? (const char *)&scalar : p[2];
    if (integer) {
      int64_t v = dt__binary_i64(op, dt__elem_load_i64(a_dtype, p[1]),
                                 dt__elem_load_i64(b_dtype, b), (int64_t)alpha);
      dt__elem_store_i64(out_dtype, p[0], v);
      return;
    }
    double v =
        dt__binary_f64(op, dt__elem_load_f64(a_dtype, p[1]), dt__elem_load_f64(b_dtype, b), alpha);
    dt__elem_store_f64(out_dtype, p[0], v);
  }
};

extern "C" int dt__cuda_launch_binary(void *stream, dt_binary_op op, double alpha,
                                      const dt_cuda_ref *out, const dt_cuda_ref *a,
                                      const dt_cuda_ref *b, dt_cuda_scalar sc) {
  dt_cuda_binary_fn f;
  f.op = op;
  f.alpha = alpha;
  f.a_dtype = a->dtype;
  f.b_dtype = b ? b->dtype : sc.dtype;
  f.out_dtype = out->dtype;
  f.has_scalar = b == nullptr;
  f.scalar.f64 = 0;
  if (!b) dt__elem_store_f64(sc.dtype, &f.scalar, sc.value);
  bool operands_integer = !dt_cuda_floating(f.a_dtype) && !dt_cuda_floating(f.b_dtype);
  f.integer =
      dt__binary_is_integer(dt_cuda_floating(out->dtype), out->dtype == DT_BOOL, operands_integer);
  const dt_cuda_ref *ops[] = {out, a, b};
  dt_cuda_space s;
  dt_cuda_space_init(&s, 3, ops);
  return dt_cuda_launch_elementwise<3>((cudaStream_t)stream, &s, f);
}

/* ---- copies, where, masked_fill, fill -----------------------------------------------------------
 */

/* One element of src_dtype at s into dst_dtype at d: raw bytes when the dtypes agree, through
 * int64 into an integer dtype, through double into a floating one (kernels/cpu/copy.c). */
static __device__ __forceinline__ void dt_cuda_convert(int dst_dtype, char *d, int src_dtype,
                                                       const char *s) {
  if (dst_dtype == src_dtype) {
    switch (dt_cuda_esize(dst_dtype)) {
    case 8: *(uint64_t *)d = *(const uint64_t *)s; return;
    case 4: *(uint32_t *)d = *(const uint32_t *)s; return;
    case 2: *(uint16_t *)d = *(const uint16_t *)s; return;
    default: *(uint8_t *)d = *(const uint8_t *)s; return;
    }
  }
  if (!dt_cuda_floating(dst_dtype) && !dt_cuda_floating(src_dtype)) {
    dt__elem_store_i64(dst_dtype, d, dt__elem_load_i64(src_dtype, s));
  } else {
    dt__elem_store_f64(dst_dtype, d, dt__elem_load_f64(src_dtype, s));
  }
}

struct dt_cuda_copy_fn {
  int dst_dtype, src_dtype;
  __device__ void operator()(char **p) const { dt_cuda_convert(dst_dtype, p[0], src_dtype, p[1]); }
};

extern "C" int dt__cuda_launch_copy(void *stream, const dt_cuda_ref *dst, const dt_cuda_ref *src) {
  const dt_cuda_ref *ops[] = {dst, src};
  dt_cuda_space s;
  dt_cuda_space_init(&s, 2, ops);
  return dt_cuda_launch_elementwise<2>((cudaStream_t)stream, &s,
                                       dt_cuda_copy_fn{dst->dtype, src->dtype});
}

struct dt_cuda_where_fn {
  int out_dtype, a_dtype, b_dtype;
  __device__ void operator()(char **p) const {
    bool c = *(const uint8_t *)p[1] != 0;
    dt_cuda_convert(out_dtype, p[0], c ? a_dtype : b_dtype, c ? p[2] : p[3]);
  }
};

extern "C" int dt__cuda_launch_where(void *stream, const dt_cuda_ref *out, const dt_cuda_ref *cond,
                                     const dt_cuda_ref *a, const dt_cuda_ref *b) {
  const dt_cuda_ref *ops[] = {out, cond, a, b};
  dt_cuda_space s;
  dt_cuda_space_init(&s, 4, ops);
  return dt_cuda_launch_elementwise<4>((cudaStream_t)stream, &s,
                                       dt_cuda_where_fn{out->dtype, a->dtype, b->dtype});
}

/* The fill value encoded once in the output dtype (tensor/element.h), then moved as bytes. */
struct dt_cuda_fill_fn {
  int dtype;
  bool has_a, has_mask;
  uint64_t value;
  __device__ void operator()(char **p) const {
    bool fill = !has_mask || *(const uint8_t *)p[2] != 0;
    const char *src = fill ? (const char *)&value : p[1];
    if (!fill && !has_a) return;
    dt_cuda_convert(dtype, p[0], dtype, src);
  }
};

extern "C" int dt__cuda_launch_masked_fill(void *stream, const dt_cuda_ref *out,
                                           const dt_cuda_ref *a, const dt_cuda_ref *mask,
                                           double value) {
  dt_cuda_fill_fn f;
  f.dtype = out->dtype;
  f.has_a = a != nullptr;
  f.has_mask = mask != nullptr;
  f.value = 0;
  dt__elem_store_f64(out->dtype, &f.value, value);
  const dt_cuda_ref *ops[] = {out, a, mask};
  dt_cuda_space s;
  dt_cuda_space_init(&s, 3, ops);
  return dt_cuda_launch_elementwise<3>((cudaStream_t)stream, &s, f);
}

extern "C" const char *dt__cuda_error_text(int error) {
  return cudaGetErrorString((cudaError_t)error);
}
