// N-d strided copies on the device (launch.h): one thread per element of a grid-stride loop,
// each splitting its flat index into coordinates of the shared shape. Geometry travels by
// value in the kernel's parameters (no device allocation, no copy before the launch).
#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"

namespace {

struct copy_geometry {
  int ndim;
  int64_t shape[DT__CUDA_MAX_DIMS];
  int64_t dst_strides[DT__CUDA_MAX_DIMS];
  int64_t src_strides[DT__CUDA_MAX_DIMS];
};

template <typename T>
__global__ void copy_strided(T *__restrict__ dst, const T *__restrict__ src, copy_geometry g,
                             int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    int64_t rest = i, d_off = 0, s_off = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
      const int64_t size = g.shape[d];
      const int64_t c = rest % size;
      rest /= size;
      d_off += c * g.dst_strides[d];
      s_off += c * g.src_strides[d];
    }
    dst[d_off] = src[s_off];
  }
}

template <typename T>
cudaError_t launch(char *dst, const char *src, const copy_geometry &g, int64_t n,
                   cudaStream_t stream) {
  constexpr int threads = 256;
  // Enough blocks to fill any current GPU several times over; the loop covers the rest.
  const int64_t wanted = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65536 ? wanted : 65536);
  copy_strided<T><<<blocks, threads, 0, stream>>>(reinterpret_cast<T *>(dst),
                                                  reinterpret_cast<const T *>(src), g, n);
  return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t dt__cuda_launch_copy_strided(char *dst, const dt_cuda_strided *dst_view,
                                                    const char *src,
                                                    const dt_cuda_strided *src_view,
                                                    size_t elem_size, int64_t n,
                                                    cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (dst_view->ndim != src_view->ndim || dst_view->ndim < 0 ||
      dst_view->ndim > DT__CUDA_MAX_DIMS) {
    return cudaErrorInvalidValue;
  }
  copy_geometry g{};
  g.ndim = dst_view->ndim;
  for (int d = 0; d < g.ndim; d++) {
    g.shape[d] = dst_view->shape[d];
    g.dst_strides[d] = dst_view->strides[d];
    g.src_strides[d] = src_view->strides[d];
  }
  switch (elem_size) {
  case 1: return launch<uint8_t>(dst, src, g, n, stream);
  case 2: return launch<uint16_t>(dst, src, g, n, stream);
  case 4: return launch<uint32_t>(dst, src, g, n, stream);
  case 8: return launch<uint64_t>(dst, src, g, n, stream);
  default: return cudaErrorInvalidValue;
  }
}
