// The threads backend's reduction kernel on CUDA memory (threads_cuda.h): one thread per
// element (grid-stride), reading the element of every source in rank order, then writing the
// result to every destination. Semantics are comm/reduce.c's, written again for the device;
// the 16-bit conversions are tensor/element.h's, the CPU's.
#include <cuda_runtime.h>
#include <stdint.h>

#include "comm/threads/threads_cuda.h"
#include "tensor/element.h"

namespace {

// Pointers passed by value when they fit in the kernel's parameters (worlds up to 32 ranks).
constexpr int kInline = 32;

struct InlinePtrs {
  const void *src[kInline];
  void *dst[kInline];
  __device__ const void *s(int i) const { return src[i]; }
  __device__ void *d(int i) const { return dst[i]; }
};

// Larger worlds: the pointers in a device table.
struct TablePtrs {
  const void *const *src;
  void *const *dst;
  __device__ const void *s(int i) const { return src[i]; }
  __device__ void *d(int i) const { return dst[i]; }
};

// How a dtype's elements combine: T the element, A the accumulator, U the type sums and
// products are done in (unsigned for integers, so that they wrap).
template <typename T_, typename A_, typename U_, bool Floating, bool Boolean = false>
struct Arith {
  using T = T_;
  using A = A_;
  using U = U_;
  static constexpr bool floating = Floating;
  static constexpr bool boolean = Boolean;
};

template <typename T_, typename A_, typename U_, bool Floating>
struct Plain : Arith<T_, A_, U_, Floating> {
  __device__ static A_ load(T_ v) { return (A_)v; }
  __device__ static T_ store(A_ v) { return (T_)v; }
};

// bfloat16 and float16 compute in float, converted as on the CPU (tensor/element.h).
struct BF16 : Arith<uint16_t, float, float, true> {
  __device__ static float load(uint16_t v) { return dt__elem_bf16_to_f32(v); }
  __device__ static uint16_t store(float v) { return dt__elem_f32_to_bf16(v); }
};

struct F16 : Arith<uint16_t, float, float, true> {
  __device__ static float load(uint16_t v) { return dt__elem_f16_to_f32(v); }
  __device__ static uint16_t store(float v) { return dt__elem_f32_to_f16(v); }
};

// bool: any nonzero byte reads as true; sum, avg and max are "or", prod and min "and".
struct Bool : Arith<uint8_t, uint8_t, uint32_t, false, true> {
  __device__ static uint8_t load(uint8_t v) { return v != 0; }
  __device__ static uint8_t store(uint8_t v) { return v; }
};

template <class Tr>
__device__ typename Tr::A combine(int op, typename Tr::A acc, typename Tr::A v) {
  using A = typename Tr::A;
  using U = typename Tr::U;
  if constexpr (Tr::boolean) {
    bool any = op == DT_REDUCE_SUM || op == DT_REDUCE_MAX || op == DT_REDUCE_AVG;
    return any ? (A)(acc | v) : (A)(acc & v);
  } else {
    switch (op) {
      case DT_REDUCE_SUM:
      case DT_REDUCE_AVG:
        return (A)((U)acc + (U)v);
      case DT_REDUCE_PROD:
        return (A)((U)acc * (U)v);
      case DT_REDUCE_MAX:
        if constexpr (Tr::floating) {
          return (v > acc || v != v) ? v : acc;
        } else {
          return v > acc ? v : acc;
        }
      default:  // DT_REDUCE_MIN
        if constexpr (Tr::floating) {
          return (v < acc || v != v) ? v : acc;
        } else {
          return v < acc ? v : acc;
        }
    }
  }
}

template <class Tr, class P>
__global__ void reduce_kernel(P p, int op, int nsrc, int ndst, int64_t n, int world) {
  using T = typename Tr::T;
  using A = typename Tr::A;
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    A acc = Tr::load(static_cast<const T *>(p.s(0))[i]);
    for (int r = 1; r < nsrc; r++) acc = combine<Tr>(op, acc, Tr::load(static_cast<const T *>(p.s(r))[i]));
    if constexpr (Tr::floating) {
      if (op == DT_REDUCE_AVG) acc = (A)(acc / (A)world);
    }
    T out = Tr::store(acc);
    for (int d = 0; d < ndst; d++) static_cast<T *>(p.d(d))[i] = out;
  }
}

template <class Tr, class P>
cudaError_t launch(const P &p, dt_reduce_op op, int nsrc, int ndst, int64_t n, int world,
                   cudaStream_t stream) {
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 4096) blocks = 4096;  // grid-stride beyond: enough to fill any current GPU
  reduce_kernel<Tr, P><<<(unsigned)blocks, threads, 0, stream>>>(p, (int)op, nsrc, ndst, n, world);
  return cudaGetLastError();
}

template <class P>
cudaError_t dispatch(const P &p, dt_dtype dtype, dt_reduce_op op, int nsrc, int ndst, int64_t n,
                     int world, cudaStream_t stream) {
  switch (dtype) {
    case DT_F32: return launch<Plain<float, float, float, true>>(p, op, nsrc, ndst, n, world, stream);
    case DT_F64:
      return launch<Plain<double, double, double, true>>(p, op, nsrc, ndst, n, world, stream);
    case DT_BF16: return launch<BF16>(p, op, nsrc, ndst, n, world, stream);
    case DT_F16: return launch<F16>(p, op, nsrc, ndst, n, world, stream);
    case DT_I64:
      return launch<Plain<int64_t, int64_t, uint64_t, false>>(p, op, nsrc, ndst, n, world, stream);
    case DT_I32:
      return launch<Plain<int32_t, int32_t, uint32_t, false>>(p, op, nsrc, ndst, n, world, stream);
    case DT_U8:
      return launch<Plain<uint8_t, uint8_t, uint32_t, false>>(p, op, nsrc, ndst, n, world, stream);
    case DT_BOOL: return launch<Bool>(p, op, nsrc, ndst, n, world, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

extern "C" cudaError_t dt__cuda_reduce_launch(dt_dtype dtype, dt_reduce_op op, int nsrc,
                                              const void *const *src, int ndst, void *const *dst,
                                              int64_t n, int world, cudaStream_t stream) {
  if (n <= 0 || nsrc <= 0 || ndst <= 0) return cudaSuccess;
  if (nsrc <= kInline && ndst <= kInline) {
    InlinePtrs p = {};
    for (int i = 0; i < nsrc; i++) p.src[i] = src[i];
    for (int i = 0; i < ndst; i++) p.dst[i] = dst[i];
    return dispatch(p, dtype, op, nsrc, ndst, n, world, stream);
  }
  // The table lives in stream-ordered memory: copied from the host (a pageable source is
  // consumed before cudaMemcpyAsync returns), freed after the kernel in stream order.
  size_t bytes = sizeof(void *) * (size_t)(nsrc + ndst);
  void **host = static_cast<void **>(malloc(bytes));
  if (!host) return cudaErrorMemoryAllocation;
  for (int i = 0; i < nsrc; i++) host[i] = const_cast<void *>(src[i]);
  for (int i = 0; i < ndst; i++) host[nsrc + i] = dst[i];
  void *table = nullptr;
  cudaError_t e = cudaMallocAsync(&table, bytes, stream);
  if (e == cudaSuccess) e = cudaMemcpyAsync(table, host, bytes, cudaMemcpyHostToDevice, stream);
  free(host);
  if (e != cudaSuccess) {
    if (table) cudaFreeAsync(table, stream);
    return e;
  }
  TablePtrs p = {static_cast<const void *const *>(table), static_cast<void *const *>(table) + nsrc};
  e = dispatch(p, dtype, op, nsrc, ndst, n, world, stream);
  cudaError_t f = cudaFreeAsync(table, stream);
  return e != cudaSuccess ? e : f;
}
