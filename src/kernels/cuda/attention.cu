/*
 * Scaled dot-product attention on CUDA, forward and backward, in double like the CPU's
 * (kernels/cpu/attention.c): the same scores (scale q.k plus the mask, -inf for a dropped
 * pair, causal top-left), the online softmax over key tiles, the log-sum-exp, and the
 * backward from the saved log-sum-exp. Deterministic: no atomics; each block owns its outputs.
 *   forward: one block per query row (b, h, i): a tile of blockDim keys at a time, each thread
 *            one key's score, then each thread a few value columns of the running sum;
 *   dq:      one block per query row, the same walk over keys;
 *   dk, dv:  one block per key row (b, kv head, j), walking every query of the heads that share
 *            that kv head (grouped-query attention) in order.
 * Not the flash kernel a tuned library has (no tensor cores, double math): correct everywhere,
 * fast enough for the models' test sizes.
 */
#include "kernels/cuda/indexer.cuh"

struct dt_cuda_attn {
  dt_cuda_ref q, k, v, mask, out, lse, gs, dq, dk, dv;
  bool has_mask, causal;
  int64_t mask_strides[4];
  double scale;
  int64_t B, H, T, E, Hk, S, Ev;
};

static __device__ __forceinline__ double at4(const dt_cuda_ref &t, int64_t a, int64_t b, int64_t c,
                                             int64_t d) {
  int64_t off = a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + d * t.strides[3];
  return dt__elem_load_f64(t.dtype, t.data + off * dt_cuda_esize(t.dtype));
}

static __device__ __forceinline__ void put4(const dt_cuda_ref &t, int64_t a, int64_t b, int64_t c,
                                            int64_t d, double v) {
  int64_t off = a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + d * t.strides[3];
  dt__elem_store_f64(t.dtype, t.data + off * dt_cuda_esize(t.dtype), v);
}

/* The adjustment of pair (i, j) of head (b, h): 0, -inf (dropped) or the float mask. */
static __device__ double mask_at(const dt_cuda_attn &a, int64_t b, int64_t h, int64_t i,
                                 int64_t j) {
  if (a.causal && j > i) return -INFINITY;
  if (!a.has_mask) return 0;
  const int64_t *s = a.mask_strides;
  int64_t off = b * s[0] + h * s[1] + i * s[2] + j * s[3];
  const char *p = a.mask.data + off * dt_cuda_esize(a.mask.dtype);
  if (a.mask.dtype == DT_BOOL) return *(const uint8_t *)p ? 0 : -INFINITY;
  return dt__elem_load_f64(a.mask.dtype, p);
}

/* scale q_i.k_j + mask, q_i in shared memory. */
static __device__ double score(const dt_cuda_attn &a, const double *q, int64_t b, int64_t h,
                               int64_t kh, int64_t i, int64_t j) {
  double m = mask_at(a, b, h, i, j);
  if (m == -INFINITY) return -INFINITY;
  double dot = 0;
  for (int64_t e = 0; e < a.E; e++) dot += q[e] * at4(a.k, b, kh, j, e);
  return a.scale * dot + m;
}

static __device__ double block_max(double v, double *buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w && buf[threadIdx.x + w] > buf[threadIdx.x])
      buf[threadIdx.x] = buf[threadIdx.x + w];
    __syncthreads();
  }
  double r = buf[0];
  __syncthreads();
  return r;
}

static __device__ double block_sum(double v, double *buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) buf[threadIdx.x] += buf[threadIdx.x + w];
    __syncthreads();
  }
  double r = buf[0];
  __syncthreads();
  return r;
}

/* Query row `row` of the B * H * T rows: batch b, head h, position i, its kv head kh, and the
 * end of the keys it sees (causal: up to i). */
struct dt_cuda_attn_row {
  int64_t b, h, i, kh, end;
};

static __device__ __forceinline__ dt_cuda_attn_row query_row(const dt_cuda_attn &a, int64_t row) {
  dt_cuda_attn_row q;
  q.i = row % a.T, q.h = (row / a.T) % a.H, q.b = row / (a.T * a.H);
  q.kh = q.h / (a.H / a.Hk), q.end = a.causal ? (q.i + 1 < a.S ? q.i + 1 : a.S) : a.S;
  return q;
}

/* This thread's share of a query row's start: the row into q [E], acc [n] zeroed. */
static __device__ __forceinline__ void start_row(const dt_cuda_attn &a, const dt_cuda_attn_row &r,
                                                 double *q, double *acc, int64_t n) {
  for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) q[e] = at4(a.q, r.b, r.h, r.i, e);
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) acc[e] = 0;
}

/* This thread's share of acc[e] = acc[e] * alpha + sum_c w[c] t[b, h, j0 + c, e] for e < n, over
 * the tile's rows c (rows j0 .. end, at most blockDim); zero weights are passed over (a
 * dropped row adds nothing, even where t holds an inf). */
static __device__ __forceinline__ void accumulate_tile(double *acc, int64_t n, double alpha,
                                                       const double *w, const dt_cuda_ref &t,
                                                       int64_t b, int64_t h, int64_t j0,
                                                       int64_t end) {
  int64_t nc = end - j0 < (int64_t)blockDim.x ? end - j0 : (int64_t)blockDim.x;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    double v = acc[e] * alpha;
    for (int64_t c = 0; c < nc; c++)
      if (w[c] != 0) v += w[c] * at4(t, b, h, j0 + c, e);
    acc[e] = v;
  }
}

/* Shared memory: q or k row [E], acc [Ev], g row [Ev], a tile's p [blockDim], ds [blockDim],
 * the reduction buffer [blockDim]. */
__global__ void dt_cuda_attn_forward_kernel(dt_cuda_attn a) {
  extern __shared__ double smem[];
  double *q = smem, *acc = q + a.E, *p = acc + a.Ev, *buf = p + blockDim.x;
  int64_t rows = a.B * a.H * a.T;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    dt_cuda_attn_row r = query_row(a, row);
    int64_t i = r.i, h = r.h, b = r.b, kh = r.kh, end = r.end;
    start_row(a, r, q, acc, a.Ev);
    __syncthreads();
    double m = -INFINITY, l = 0;
    for (int64_t j0 = 0; j0 < end; j0 += blockDim.x) {
      int64_t j = j0 + threadIdx.x;
      double s = j < end ? score(a, q, b, h, kh, i, j) : -INFINITY;
      double mx = block_max(s > m ? s : m, buf);
      if (mx == -INFINITY) continue; /* nothing kept yet (uniform across the block) */
      double pj = j < end ? exp(s - mx) : 0;
      p[threadIdx.x] = pj;
      double alpha = exp(m - mx);
      double sum = block_sum(pj, buf); /* also orders p's writes before the reads below */
      accumulate_tile(acc, a.Ev, alpha, p, a.v, b, kh, j0, end);
      l = l * alpha + sum;
      m = mx;
      __syncthreads();
    }
    for (int64_t e = threadIdx.x; e < a.Ev; e += blockDim.x)
      put4(a.out, b, h, i, e, l == 0 ? 0.0 : acc[e] / l); /* l 0: no key kept */
    if (threadIdx.x == 0) {
      int64_t off = b * a.lse.strides[0] + h * a.lse.strides[1] + i * a.lse.strides[2];
      dt__elem_store_f64(a.lse.dtype, a.lse.data + off * dt_cuda_esize(a.lse.dtype),
                         l > 0    ? m + log(l)
                         : l == 0 ? -INFINITY
                                  : NAN); /* NaN: as the CPU's */
    }
    __syncthreads();
  }
}

/* dq of query row (b, h, i): scale sum_j p_ij (g_i.v_j - delta_i) k_j. */
__global__ void dt_cuda_attn_dq_kernel(dt_cuda_attn a) {
  extern __shared__ double smem[];
  double *q = smem, *acc = q + a.E, *g = acc + a.E, *ds = g + a.Ev;
  int64_t rows = a.B * a.H * a.T;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    dt_cuda_attn_row r = query_row(a, row);
    int64_t i = r.i, h = r.h, b = r.b, kh = r.kh, end = r.end;
    double lse = at4(a.gs, b, h, i, a.Ev), dd = at4(a.gs, b, h, i, a.Ev + 1);
    start_row(a, r, q, acc, a.E);
    for (int64_t e = threadIdx.x; e < a.Ev; e += blockDim.x) g[e] = at4(a.gs, b, h, i, e);
    __syncthreads();
    for (int64_t j0 = 0; lse != -INFINITY && j0 < end; j0 += blockDim.x) {
      int64_t j = j0 + threadIdx.x;
      double d = 0;
      if (j < end) {
        double pj = exp(score(a, q, b, h, kh, i, j) - lse);
        if (pj != 0) {
          double dp = 0;
          for (int64_t e = 0; e < a.Ev; e++) dp += g[e] * at4(a.v, b, kh, j, e);
          d = pj * (dp - dd) * a.scale;
        }
      }
      ds[threadIdx.x] = d;
      __syncthreads();
      accumulate_tile(acc, a.E, 1.0, ds, a.k, b, kh, j0, end);
      __syncthreads();
    }
    for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) put4(a.dq, b, h, i, e, acc[e]);
    __syncthreads();
  }
}

/* dk, dv of key row (b, kh, j): over the queries i of every head h sharing kv head kh,
 * dv_j += p_ij g_i and dk_j += scale p_ij (g_i.v_j - delta_i) q_i. */
__global__ void dt_cuda_attn_dkv_kernel(dt_cuda_attn a) {
  extern __shared__ double smem[];
  double *kr = smem, *vr = kr + a.E, *dk = vr + a.Ev, *dv = dk + a.E, *p = dv + a.Ev,
         *ds = p + blockDim.x;
  int64_t rows = a.B * a.Hk * a.S, rep = a.H / a.Hk;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t j = row % a.S, kh = (row / a.S) % a.Hk, b = row / (a.S * a.Hk);
    for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x)
      kr[e] = at4(a.k, b, kh, j, e), dk[e] = 0;
    for (int64_t e = threadIdx.x; e < a.Ev; e += blockDim.x)
      vr[e] = at4(a.v, b, kh, j, e), dv[e] = 0;
    __syncthreads();
    int64_t first = a.causal ? j : 0; /* causal: only queries i >= j keep key j */
    for (int64_t h = kh * rep; h < (kh + 1) * rep; h++) {
      for (int64_t i0 = first; i0 < a.T; i0 += blockDim.x) {
        int64_t i = i0 + threadIdx.x;
        double pi = 0, d = 0;
        if (i < a.T) {
          double lse = at4(a.gs, b, h, i, a.Ev);
          double m = mask_at(a, b, h, i, j);
          if (lse != -INFINITY && m != -INFINITY) {
            double dot = 0;
            for (int64_t e = 0; e < a.E; e++) dot += at4(a.q, b, h, i, e) * kr[e];
            pi = exp(a.scale * dot + m - lse);
            if (pi != 0) {
              double dp = 0;
              for (int64_t e = 0; e < a.Ev; e++) dp += at4(a.gs, b, h, i, e) * vr[e];
              d = pi * (dp - at4(a.gs, b, h, i, a.Ev + 1)) * a.scale;
            }
          }
        }
        p[threadIdx.x] = pi;
        ds[threadIdx.x] = d;
        __syncthreads();
        accumulate_tile(dv, a.Ev, 1.0, p, a.gs, b, h, i0, a.T);
        accumulate_tile(dk, a.E, 1.0, ds, a.q, b, h, i0, a.T);
        __syncthreads();
      }
    }
    if (a.dk.data)
      for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) put4(a.dk, b, kh, j, e, dk[e]);
    if (a.dv.data)
      for (int64_t e = threadIdx.x; e < a.Ev; e += blockDim.x) put4(a.dv, b, kh, j, e, dv[e]);
    __syncthreads();
  }
}

static void attn_init(dt_cuda_attn *a, const dt_cuda_ref *q, const dt_cuda_ref *k,
                      const dt_cuda_ref *v, const dt_cuda_ref *mask, const int64_t *mask_strides,
                      bool causal, double scale) {
  memset(a, 0, sizeof *a);
  a->q = *q;
  a->k = *k;
  a->v = *v;
  a->has_mask = mask != nullptr;
  if (mask) {
    a->mask = *mask;
    for (int d = 0; d < 4; d++) a->mask_strides[d] = mask_strides[d];
  }
  a->causal = causal;
  a->scale = scale;
  a->B = q->shape[0], a->H = q->shape[1], a->T = q->shape[2], a->E = q->shape[3];
  a->Hk = k->shape[1], a->S = k->shape[2], a->Ev = v->shape[3];
}

/* Shared memory per block, in bytes, or 0 when the head dims are too large for it. */
static size_t attn_smem(int64_t E, int64_t Ev) {
  int64_t n = 2 * E + 2 * Ev + 3 * DT_CUDA_THREADS;
  return n * 8 <= 48 * 1024 ? (size_t)n * 8 : 0;
}

static unsigned attn_blocks(int64_t rows) { return (unsigned)(rows < 65536 ? rows : 65536); }

extern "C" int dt__cuda_launch_attention(void *stream, const dt_cuda_ref *q, const dt_cuda_ref *k,
                                         const dt_cuda_ref *v, const dt_cuda_ref *mask,
                                         const int64_t *mask_strides, bool causal, double scale,
                                         const dt_cuda_ref *out, const dt_cuda_ref *lse) {
  dt_cuda_attn a;
  attn_init(&a, q, k, v, mask, mask_strides, causal, scale);
  a.out = *out;
  a.lse = *lse;
  size_t smem = attn_smem(a.E, a.Ev);
  if (!smem) return (int)cudaErrorInvalidValue;
  int64_t rows = a.B * a.H * a.T;
  if (rows == 0) return 0;
  dt_cuda_attn_forward_kernel<<<attn_blocks(rows), DT_CUDA_THREADS, smem, (cudaStream_t)stream>>>(
      a);
  return (int)cudaGetLastError();
}

extern "C" int dt__cuda_launch_attention_backward(
    void *stream, const dt_cuda_ref *q, const dt_cuda_ref *k, const dt_cuda_ref *v,
    const dt_cuda_ref *mask, const int64_t *mask_strides, bool causal, double scale,
    const dt_cuda_ref *gs, const dt_cuda_ref *dq, const dt_cuda_ref *dk, const dt_cuda_ref *dv) {
  dt_cuda_attn a;
  attn_init(&a, q, k, v, mask, mask_strides, causal, scale);
  a.gs = *gs;
  if (dq) a.dq = *dq;
  if (dk) a.dk = *dk;
  if (dv) a.dv = *dv;
  size_t smem = attn_smem(a.E, a.Ev);
  if (!smem) return (int)cudaErrorInvalidValue;
  cudaStream_t s = (cudaStream_t)stream;
  int64_t q_rows = a.B * a.H * a.T, k_rows = a.B * a.Hk * a.S;
  if (dq && q_rows > 0)
    dt_cuda_attn_dq_kernel<<<attn_blocks(q_rows), DT_CUDA_THREADS, smem, s>>>(a);
  if ((dk || dv) && k_rows > 0)
    dt_cuda_attn_dkv_kernel<<<attn_blocks(k_rows), DT_CUDA_THREADS, smem, s>>>(a);
  return (int)cudaGetLastError();
}
