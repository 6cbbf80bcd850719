/* Private helpers of the core layer: error setting, allocation, logging, assertions. */
#ifndef DT_CORE_IMPL_H
#define DT_CORE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtensor/core.h"

#if defined(__GNUC__)
#define DT_LIKELY(x) __builtin_expect(!!(x), 1)
#define DT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define DT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define DT_NOINLINE __attribute__((noinline))
#else
#define DT_LIKELY(x) (x)
#define DT_UNLIKELY(x) (x)
#define DT_PRINTF(a, b)
#define DT_NOINLINE
#endif

/* Sets the thread's error message (printf-style) and returns `status`, so that a failure
 * reads `return dt__error(DT_ERR_INVALID, "add.Tensor: ...")`. */
DT_PRINTF(2, 3) dt_status dt__error(dt_status status, const char *format, ...);

/* Prepends "prefix: " to the current error message (used to add context on the way up). */
void dt__error_prefix(const char *prefix);

/* Internal invariants only: user input must never reach an assertion. */
void dt__assert_fail(const char *expr, const char *file, int line);
#define DT_ASSERT(expr) ((expr) ? (void)0 : dt__assert_fail(#expr, __FILE__, __LINE__))

/* Allocation through the user's allocator hooks. dt__alloc returns 64-byte aligned memory.
 * dt__calloc zeroes it. Both return NULL on failure without setting an error. */
void *dt__alloc(size_t size);
void *dt__calloc(size_t size);
void *dt__alloc_aligned(size_t size, size_t alignment);
void dt__free(void *ptr);

/* Makes room for one more element in n parallel arrays holding `used` elements each. When
 * used == *capacity, each array is moved to a new block of twice the capacity (first_capacity
 * for an empty one) whose tail is zeroed, and *capacity grows; all arrays move or none does.
 * array_ptrs[i] is the address of the i-th array's pointer (a T ** passed as void *: the
 * pointer is read and written with memcpy), element_sizes[i] its sizeof(T). Returns false
 * when out of memory (the arrays are untouched), without setting an error. */
bool dt__reserve_arrays(int used, int *capacity, int first_capacity, int n, void *const *array_ptrs,
                        const size_t *element_sizes);

/* A heap copy (dt__alloc) of the NUL-terminated string s; NULL when out of memory, without
 * setting an error. */
char *dt__strdup(const char *s);

/* Frees strings[0..n) and then the array itself (NULL entries and a NULL array are fine):
 * the end of an owned, growable list of names. */
void dt__free_strings(char **strings, int n);

/* Frees each of n blocks (NULL ones are fine): a struct's heap fields in one call, through
 * DT__FREE_EACH(a->x, a->y, ...). */
void dt__free_each(int n, void *const *blocks);
#define DT__FREE_EACH(...)                                                                         \
  dt__free_each((int)(sizeof((void *[]){__VA_ARGS__}) / sizeof(void *)), (void *[]){__VA_ARGS__})

/* Logging through the user's callback. */
DT_PRINTF(2, 3) void dt__log(dt_log_level level, const char *format, ...);

/* Integer environment variables, read strictly (src/core/env.c). dt__env_int_parse: true when
 * text is a whole decimal integer in [min, max], stored in *out. dt__env_int: the variable's
 * value; unset or empty: `fallback`; any other value outside the rule is reported once per
 * (variable, value) through the log callback (DT_LOG_WARN, naming the variable, the value, the
 * range and `fallback_text`, e.g. "the default (the cores)") and gives `fallback`. */
bool dt__env_int_parse(const char *text, int64_t min, int64_t max, int64_t *out);
int64_t dt__env_int(const char *name, int64_t min, int64_t max, int64_t fallback,
                    const char *fallback_text);
/* An environment variable naming one of n_words words: its index; -1 when unset or empty, or
 * for any other value, which is reported once per value as dt__env_int does. */
int dt__env_choice(const char *name, const char *const *words, int n_words,
                   const char *fallback_text);

/* Formats `[2, 3, 4]` into buf (always NUL-terminated) and returns buf. */
char *dt__format_ints(char *buf, size_t size, int n, const int64_t *values);

/* splitmix64's finalizer: every input bit reaches every output bit. */
static inline uint64_t dt__hash_finish(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/* 64-bit hash mixing for cache keys (splitmix64 finalizer). */
static inline uint64_t dt__hash_mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return dt__hash_finish(h);
}

/* 64-bit hash of n bytes (FNV-1a, finished with dt__hash_mix so that nearby strings spread
 * over every bit of a power-of-two table index). */
static inline uint64_t dt__hash_bytes(const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return dt__hash_mix(h, n);
}

/* Arenas (arena.c): bump allocation in 8 KiB blocks (larger requests get a block of their
 * own), freed all at once. A zeroed dt__arena is empty. */
typedef struct dt__arena_block dt__arena_block;
typedef struct dt__arena {
  dt__arena_block *head;
  size_t used, capacity;
} dt__arena;

/* Zeroed, 8-byte aligned memory that lives until dt__arena_free; NULL when out of memory. */
void *dt__arena_alloc(dt__arena *arena, size_t size);
/* A copy of s in the arena; NULL when out of memory. */
char *dt__arena_strdup(dt__arena *arena, const char *s);
/* Frees every block; the arena is empty and reusable afterwards. */
void dt__arena_free(dt__arena *arena);

/* ---- Upcalls ------------------------------------------------------------------------------
 *
 * Calls go down: a file calls only layers below it. Four facts of the distributed layer are
 * needed by layers below it, which cannot name it; the distributed layer installs them here,
 * in one place (dt__dist_init, called by every entry point that makes a distributed tensor,
 * before the first one exists). Before that they are NULL and no distributed tensor exists,
 * so the lower layers skip them. Nothing else may call up. */
struct dt_dist_spec;
struct dt_op_call;
struct dt_mesh;

struct dt_tensor;

/*
 * A recorded function that is not an op of the table: the distributed layer's conversions
 * (redistribute, from_local, to_local, full_tensor) record themselves as autograd function
 * nodes through dt__upcall.autograd_record_conversion; the engine calls back through these
 * pointers as it calls an op's formula.
 */
typedef struct dt_autograd_function {
  const char *name; /* in error messages: "redistribute" */
  /* The gradient of the one input from the gradient of the one output (never NULL), with
   * recording off: a new reference in *grad_input with the input's global shape. */
  dt_status (*backward)(void *state, struct dt_tensor *grad_output, struct dt_tensor **grad_input);
  /* Frees state when the node dies (NULL: nothing to free). */
  void (*release)(void *state);
  /* Or, for a node of several inputs and outputs (dt__autograd_record_function_n; backward
   * NULL): grad_inputs[i] (NULL on entry) from grad_outputs[k] (NULL where no gradient came),
   * for the inputs with needs_grad[i], with recording off. */
  dt_status (*backward_n)(void *state, int n_out, struct dt_tensor *const *grad_outputs, int n_in,
                          const bool *needs_grad, struct dt_tensor **grad_inputs);
} dt_autograd_function;

typedef struct dt__upcalls {
  /* tensor -> distributed: a tensor that dies drops its reference to its spec. Specs are
   * refcounted by the distributed layer (they hold a mesh reference), and the tensor layer
   * must free them without knowing their layout. */
  void (*spec_release)(struct dt_dist_spec *spec);
  /* The other half: a layer that copies a distributed tensor's local block (autograd giving a
   * gradient storage of its own) takes a reference to the same spec for the copy. Autograd
   * stands above distributed now and could call it directly; the entry keeps spec references
   * in one place. */
  struct dt_dist_spec *(*spec_retain)(struct dt_dist_spec *spec);
  /* ops -> distributed: dt__dispatch found a distributed argument. The op table and the
   * local path live in ops; sharding propagation, redistribution and wrapping live above. */
  dt_status (*dist_dispatch)(struct dt_op_call *call);
  /* mesh -> distributed: dt_mesh_destroy on this thread. The distributed layer's per-thread
   * plan cache holds specs, so mesh references; dropping them lets the mesh go with its
   * last tensor. */
  void (*mesh_destroyed)(const struct dt_mesh *mesh);
  /* ops -> autograd: dt__dispatch while some tensor carries autograd state
   * (dt__autograd_live != 0, ops/op_impl.h): records the op for backward, refuses in-place
   * ops on tensors that require grad, bumps storage versions. Installed by autograd itself
   * when it attaches state to a tensor (before that nothing requires grad), so the
   * distributed layer must install its own entries one by one, not the whole struct. */
  dt_status (*autograd_dispatch)(struct dt_op_call *call);
  /* distributed -> autograd. Autograd stands on the distributed layer (its formulas
   * redistribute, the engine seeds distributed gradients), but the conversions are public
   * functions of the distributed layer that are not ops of the table: after one made output
   * from input it records fn as output's node when input requires grad under grad mode (the
   * node takes a reference to spec as its state, released by fn->release); otherwise it does
   * nothing. Installed with autograd_dispatch, when autograd first attaches state to a tensor:
   * before that nothing requires grad. */
  dt_status (*autograd_record_conversion)(const dt_autograd_function *fn, struct dt_dist_spec *spec,
                                          struct dt_tensor *input, struct dt_tensor *output);
  /* distributed -> autograd: distribute_tensor's copy of a tensor that requires grad is a new
   * leaf that requires grad (PyTorch's). Installed with the entry above. */
  dt_status (*autograd_copy_requires_grad)(const struct dt_tensor *from, struct dt_tensor *to);
} dt__upcalls;

extern dt__upcalls dt__upcall;

/* ---- Intra-op threads (thread_pool.c) ---------------------------------------------------- */

/* A piece of a kernel's work: elements (or rows) [begin, end) of its range. */
typedef void (*dt_chunk_fn)(void *ctx, int64_t begin, int64_t end);

/* Elements per chunk below which splitting an elementwise loop does not pay for the wake-up
 * of a pool thread (about 10-30 us of work). Row kernels pass this divided by the row length. */
#define DT_PARALLEL_GRAIN 32768

/* Runs fn over [0, n) split into contiguous chunks of at least `grain` (up to 4 per thread,
 * the last one shorter), run by the calling thread and at most dt__intra_threads() - 1 pool
 * threads; returns when every chunk has finished. Chunks must not fail and may run in any
 * order, on any of those threads; with one thread (or one chunk) fn(ctx, 0, n) runs inline.
 * fn may call dt__parallel_for itself. */
void dt__parallel_for(int64_t n, int64_t grain, dt_chunk_fn fn, void *ctx);

/* The threads one kernel call may use now: dt_set_num_threads's setting (else DT_NUM_THREADS,
 * read at the process's first call, else the cores) capped at cores / live rank threads, at
 * least 1. */
int dt__intra_threads(void);

/* Counts rank threads in or out of the process (dt_comm_spawn: +world_size, then back). */
void dt__rank_threads_add(int delta);

/* The threads the BLAS should use for a GEMM called now, given `base`, the count it was
 * configured with (its own default or OPENBLAS_NUM_THREADS, or dt__blas_set_threads): the
 * kernels' count (dt__intra_threads) when dt_set_num_threads or DT_NUM_THREADS chose one, so
 * that one setting covers both as torch.set_num_threads does; otherwise base, capped at
 * cores / rank threads like the kernels. */
int dt__blas_threads_for(int base);

#endif /* DT_CORE_IMPL_H */
