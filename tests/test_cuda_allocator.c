/*
 * The CUDA caching allocator's bookkeeping on the CPU: the same code a GPU runs over cudaMalloc,
 * driven here over a fake backing allocator (malloc with a byte budget, counting live segments
 * and the cross-stream waits it is asked for). Rounding, size classes, splitting, best fit,
 * stream-ordered reuse, coalescing, empty_cache, the retry after out of memory, the figures,
 * and no leaks, against hand-computed values and a model of the live blocks.
 *
 * Includes kernels/cuda/caching_allocator.h (private): the allocator has no public face but
 * dt_cuda_memory_stats, and its bookkeeping must be tested without a GPU.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/caching_allocator.h"

#define MIB ((size_t)1 << 20)

typedef struct fake_backing {
  size_t budget; /* bytes the fake device has */
  size_t used;
  int live_segments;
  int n_waits;
  uintptr_t last_owner, last_freer;
  pthread_mutex_t lock;
} fake_backing;

/* Segments carry their size in a header before the address handed out. */
static void *fake_alloc(void *context, size_t nbytes) {
  fake_backing *f = context;
  pthread_mutex_lock(&f->lock);
  void *p = NULL;
  if (f->used + nbytes <= f->budget) {
    char *raw = malloc(nbytes + 64);
    if (raw) {
      memcpy(raw, &nbytes, sizeof nbytes);
      f->used += nbytes;
      f->live_segments++;
      p = raw + 64;
    }
  }
  pthread_mutex_unlock(&f->lock);
  return p;
}

static void fake_free(void *context, void *ptr) {
  fake_backing *f = context;
  char *raw = (char *)ptr - 64;
  size_t nbytes;
  memcpy(&nbytes, raw, sizeof nbytes);
  pthread_mutex_lock(&f->lock);
  f->used -= nbytes;
  f->live_segments--;
  pthread_mutex_unlock(&f->lock);
  free(raw);
}

static void fake_wait(void *context, uintptr_t owner, uintptr_t freer) {
  fake_backing *f = context;
  pthread_mutex_lock(&f->lock);
  f->n_waits++;
  f->last_owner = owner;
  f->last_freer = freer;
  pthread_mutex_unlock(&f->lock);
}

static fake_backing fake;
static dt_caching_allocator *a;

static void setup_budget(size_t budget) {
  fake = (fake_backing){.budget = budget};
  pthread_mutex_init(&fake.lock, NULL);
  dt_block_backing b = {
      .context = &fake, .alloc = fake_alloc, .free = fake_free, .stream_wait = fake_wait};
  a = dt__caching_allocator_create(&b);
  cr_assert_not_null(a);
}

static void setup(void) { setup_budget((size_t)1 << 40); }

static void teardown(void) {
  cr_assert_eq(dt__caching_allocator_destroy(a), 0, "blocks still allocated at the end");
  cr_assert_eq(fake.live_segments, 0, "%d segments not given back", fake.live_segments);
  cr_assert_eq(fake.used, 0);
}

static dt_cuda_allocator_stats stats(void) {
  dt_cuda_allocator_stats s;
  dt__caching_allocator_stats(a, &s);
  return s;
}

#define S1 ((uintptr_t)0x1000)
#define S2 ((uintptr_t)0x2000)

TestSuite(cuda_allocator, .init = setup, .fini = teardown);

Test(cuda_allocator, small_blocks_round_to_512_and_share_a_2mib_segment) {
  cr_assert_null(dt__caching_allocator_alloc(a, 0, S1));
  char *p1 = dt__caching_allocator_alloc(a, 1, S1);
  cr_assert_not_null(p1);
  cr_assert_eq(dt__caching_allocator_block_size(a, p1), 512);
  dt_cuda_allocator_stats s = stats();
  cr_assert_eq(s.n_cuda_malloc, 1);
  cr_assert_eq(s.reserved, 2 * MIB);
  cr_assert_eq(s.allocated, 512);
  /* The next block is split from the rest of the same segment, right after the first. */
  char *p2 = dt__caching_allocator_alloc(a, 1000, S1);
  cr_assert_eq(p2, p1 + 512);
  cr_assert_eq(dt__caching_allocator_block_size(a, p2), 1024);
  char *p3 = dt__caching_allocator_alloc(a, MIB, S1); /* the largest small request */
  cr_assert_eq(p3, p1 + 1536);
  s = stats();
  cr_assert_eq(s.n_cuda_malloc, 1);
  cr_assert_eq(s.allocated, 1536 + MIB);
  cr_assert_eq(s.n_blocks, 3);
  cr_assert_eq(s.n_allocs, 3);
  /* Less than 1 MiB - 1536 is left: a second 1 MiB needs a second segment. */
  char *p4 = dt__caching_allocator_alloc(a, MIB, S1);
  cr_assert_eq(stats().n_cuda_malloc, 2);
  cr_assert_eq(stats().reserved, 4 * MIB);
  char *all[] = {p1, p2, p3, p4};
  for (int i = 0; i < 4; i++) cr_assert(dt__caching_allocator_free(a, all[i], S1));
  cr_assert_eq(stats().allocated, 0);
  cr_assert_eq(stats().n_blocks, 0);
  cr_assert_eq(dt__caching_allocator_empty_cache(a), 2);
}

Test(cuda_allocator, a_freed_block_is_reused_on_its_stream_only) {
  char *p = dt__caching_allocator_alloc(a, 4000, S1);
  cr_assert(dt__caching_allocator_free(a, p, S1));
  /* Any size of the same class fits in the freed space: the same address, no new segment. */
  char *q = dt__caching_allocator_alloc(a, 300, S1);
  cr_assert_eq(q, p);
  cr_assert_eq(stats().n_cuda_malloc, 1);
  cr_assert(dt__caching_allocator_free(a, q, S1));
  /* Another stream never takes S1's free blocks: it gets a segment of its own. */
  char *r = dt__caching_allocator_alloc(a, 300, S2);
  cr_assert_eq(stats().n_cuda_malloc, 2);
  cr_assert(r < p || r >= p + 2 * MIB);
  cr_assert_eq(fake.n_waits, 0);
  /* Freed from S1 while it belongs to S2: S2 must wait for S1's work before reusing it. */
  cr_assert(dt__caching_allocator_free(a, r, S1));
  cr_assert_eq(fake.n_waits, 1);
  cr_assert_eq(fake.last_owner, S2);
  cr_assert_eq(fake.last_freer, S1);
  /* ... and it went back to S2's blocks. */
  cr_assert_eq(dt__caching_allocator_alloc(a, 512, S2), r);
  cr_assert(dt__caching_allocator_free(a, r, S2));
  cr_assert_eq(dt__caching_allocator_empty_cache(a), 2);
}

Test(cuda_allocator, free_neighbours_coalesce_and_empty_cache_returns_whole_segments) {
  char *x = dt__caching_allocator_alloc(a, 512, S1);
  char *y = dt__caching_allocator_alloc(a, 1024, S1);
  char *z = dt__caching_allocator_alloc(a, 2048, S1);
  cr_assert_eq(y, x + 512);
  cr_assert_eq(z, x + 1536);
  cr_assert(dt__caching_allocator_free(a, x, S1));
  cr_assert(dt__caching_allocator_free(a, z, S1)); /* merges with the segment's rest */
  /* y still holds the segment: nothing to give back. */
  cr_assert_eq(dt__caching_allocator_empty_cache(a), 0);
  cr_assert_eq(stats().reserved, 2 * MIB);
  /* z's space merged with the rest: a 1 MiB block fits right after y. */
  char *w = dt__caching_allocator_alloc(a, MIB, S1);
  cr_assert_eq(w, x + 1536);
  cr_assert(dt__caching_allocator_free(a, w, S1));
  /* Freeing y joins x's block, y and the rest: one free block, the whole segment. */
  cr_assert(dt__caching_allocator_free(a, y, S1));
  char *whole = dt__caching_allocator_alloc(a, MIB, S1);
  cr_assert_eq(whole, x);
  cr_assert(dt__caching_allocator_free(a, whole, S1));
  cr_assert_eq(dt__caching_allocator_empty_cache(a), 1);
  dt_cuda_allocator_stats s = stats();
  cr_assert_eq(s.reserved, 0);
  cr_assert_eq(s.n_cuda_free, 1);
  cr_assert_eq(fake.live_segments, 0);
  /* A fresh allocation after emptying takes a new segment. */
  char *again = dt__caching_allocator_alloc(a, 512, S1);
  cr_assert_eq(stats().n_cuda_malloc, 2);
  cr_assert(dt__caching_allocator_free(a, again, S1));
}

Test(cuda_allocator, large_blocks_segments_best_fit_and_split_threshold) {
  /* 3 MiB: large, from a 20 MiB segment, rounded to 512 B only. */
  char *p = dt__caching_allocator_alloc(a, 3 * MIB, S1);
  cr_assert_eq(dt__caching_allocator_block_size(a, p), 3 * MIB);
  cr_assert_eq(stats().reserved, 20 * MIB);
  char *q = dt__caching_allocator_alloc(a, 5 * MIB + 1, S1);
  cr_assert_eq(q, p + 3 * MIB);
  cr_assert_eq(dt__caching_allocator_block_size(a, q), 5 * MIB + 512);
  cr_assert_eq(stats().n_cuda_malloc, 1);
  /* Free p: the free blocks are p (3 MiB) and the rest (12 MiB - 512). Best fit for 2 MiB is
   * p; its 1 MiB rest is not worth a large block, so the whole 3 MiB serves it. */
  cr_assert(dt__caching_allocator_free(a, p, S1));
  char *r = dt__caching_allocator_alloc(a, 2 * MIB, S1);
  cr_assert_eq(r, p);
  cr_assert_eq(dt__caching_allocator_block_size(a, r), 3 * MIB);
  cr_assert_eq(stats().allocated, 3 * MIB + 5 * MIB + 512);
  /* 10 MiB and more: a segment of its own, rounded up to 2 MiB; its rest (1 MiB - 512) is
   * not worth a large block, so the block is the whole segment. */
  char *big = dt__caching_allocator_alloc(a, 13 * MIB + 1, S1);
  cr_assert_eq(stats().reserved, 20 * MIB + 14 * MIB);
  cr_assert_eq(dt__caching_allocator_block_size(a, big), 14 * MIB);
  char *odd = dt__caching_allocator_alloc(a, 19 * MIB + MIB / 2, S1);
  cr_assert_eq(dt__caching_allocator_block_size(a, odd), 20 * MIB);
  cr_assert_eq(stats().n_cuda_malloc, 3);
  /* The large segment's free rest (12 MiB - 512) is not for small requests (another pool). */
  char *small = dt__caching_allocator_alloc(a, 512, S1);
  cr_assert_eq(stats().n_cuda_malloc, 4);
  char *all[] = {r, q, big, odd, small};
  for (int i = 0; i < 5; i++) cr_assert(dt__caching_allocator_free(a, all[i], S1));
  cr_assert_eq(dt__caching_allocator_empty_cache(a), 4);
  cr_assert_eq(stats().reserved, 0);
}

Test(cuda_allocator, out_of_memory_empties_the_cache_and_retries) {
  cr_assert_eq(dt__caching_allocator_destroy(a), 0);
  setup_budget(21 * MIB);
  char *s = dt__caching_allocator_alloc(a, 512, S1);
  cr_assert(dt__caching_allocator_free(a, s, S1)); /* a cached 2 MiB segment */
  /* 2 + 20 MiB exceed the budget: the cached segment goes back and the retry succeeds. */
  char *p = dt__caching_allocator_alloc(a, 3 * MIB, S1);
  cr_assert_not_null(p);
  dt_cuda_allocator_stats st = stats();
  cr_assert_eq(st.n_oom_retries, 1);
  cr_assert_eq(st.n_cuda_free, 1);
  cr_assert_eq(st.reserved, 20 * MIB);
  cr_assert_eq(st.n_ooms, 0);
  /* 16 MiB: best fit is the segment's 17 MiB rest, whose 1 MiB rest is not split off. */
  char *q = dt__caching_allocator_alloc(a, 16 * MIB, S1);
  cr_assert_eq(q, p + 3 * MIB);
  cr_assert_eq(dt__caching_allocator_block_size(a, q), 17 * MIB);
  /* 12 MiB: nothing free, a new segment exceeds the budget, nothing cached to give back. */
  cr_assert_null(dt__caching_allocator_alloc(a, 12 * MIB, S1));
  st = stats();
  cr_assert_eq(st.n_ooms, 1);
  cr_assert_eq(st.n_oom_retries, 1);
  cr_assert_eq(st.allocated, 20 * MIB);
  cr_assert(dt__caching_allocator_free(a, p, S1));
  cr_assert(dt__caching_allocator_free(a, q, S1));
}

Test(cuda_allocator, peaks_reset_and_bad_frees) {
  char *p = dt__caching_allocator_alloc(a, 3 * MIB, S1);
  char *q = dt__caching_allocator_alloc(a, 1024, S1);
  cr_assert(dt__caching_allocator_free(a, p, S1));
  dt_cuda_allocator_stats s = stats();
  cr_assert_eq(s.peak_allocated, 3 * MIB + 1024);
  cr_assert_eq(s.peak_reserved, 22 * MIB);
  cr_assert_eq(s.allocated, 1024);
  dt__caching_allocator_reset_peak(a);
  s = stats();
  cr_assert_eq(s.peak_allocated, 1024);
  cr_assert_eq(s.peak_reserved, 22 * MIB);
  /* Not a block of this allocator, a block's inside, a double free: refused, nothing moves. */
  int local;
  cr_assert_not(dt__caching_allocator_free(a, &local, S1));
  cr_assert_not(dt__caching_allocator_free(a, q + 512, S1));
  cr_assert(dt__caching_allocator_free(a, q, S1));
  cr_assert_not(dt__caching_allocator_free(a, q, S1));
  cr_assert_eq(stats().allocated, 0);
  cr_assert_eq(dt__caching_allocator_block_size(a, q), 0);
}

Test(cuda_allocator, destroy_reports_blocks_still_allocated) {
  cr_assert_eq(dt__caching_allocator_destroy(a), 0);
  setup();
  (void)dt__caching_allocator_alloc(a, 100, S1);
  (void)dt__caching_allocator_alloc(a, 5 * MIB, S2);
  cr_assert_eq(dt__caching_allocator_destroy(a), 2);
  cr_assert_eq(fake.live_segments, 0, "destroy gives every segment back");
  setup(); /* for teardown */
}

/* A model of the live blocks: random allocations and frees on two streams, each block filled
 * with its id and checked when freed (overlapping blocks would overwrite each other), the
 * figures checked against the model's sums throughout. */
#define MAX_LIVE 48
typedef struct live {
  char *p;
  size_t n, size;
  uintptr_t stream;
  unsigned char id;
} live;

static uint64_t next_random(uint64_t *state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

static size_t random_size(uint64_t *rng) {
  uint64_t kind = next_random(rng) % 20;
  if (kind < 8) return 1 + next_random(rng) % 4096;             /* small, many per page */
  if (kind < 15) return 1 + next_random(rng) % MIB;             /* small */
  if (kind < 19) return MIB + 1 + next_random(rng) % (3 * MIB); /* large, split */
  return 10 * MIB + next_random(rng) % (4 * MIB);               /* large, own segment */
}

Test(cuda_allocator, random_model_no_overlap_no_leak) {
  live blocks[MAX_LIVE];
  int n = 0;
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  size_t model_allocated = 0;
  for (int step = 0; step < 4000; step++) {
    bool do_alloc = n == 0 || (n < MAX_LIVE && next_random(&rng) % 100 < 55);
    if (do_alloc) {
      live b = {.n = random_size(&rng),
                .stream = next_random(&rng) % 2 ? S1 : S2,
                .id = (unsigned char)(step % 251 + 1)};
      b.p = dt__caching_allocator_alloc(a, b.n, b.stream);
      cr_assert_not_null(b.p, "step %d: %zu bytes", step, b.n);
      b.size = dt__caching_allocator_block_size(a, b.p);
      cr_assert(b.size >= b.n && b.size % 512 == 0, "step %d: block %zu for %zu", step, b.size,
                b.n);
      /* Touch both ends only for big blocks (fast), all of small ones. */
      if (b.n <= 65536) {
        memset(b.p, b.id, b.n);
      } else {
        memset(b.p, b.id, 4096);
        memset(b.p + b.n - 4096, b.id, 4096);
      }
      model_allocated += b.size;
      blocks[n++] = b;
    } else {
      int i = (int)(next_random(&rng) % (uint64_t)n);
      live b = blocks[i];
      size_t check = b.n <= 65536 ? b.n : 4096;
      for (size_t k = 0; k < check; k++) cr_assert_eq((unsigned char)b.p[k], b.id, "step %d", step);
      if (b.n > 65536) {
        for (size_t k = b.n - 4096; k < b.n; k++)
          cr_assert_eq((unsigned char)b.p[k], b.id, "step %d", step);
      }
      /* A quarter of the frees come from the other stream. */
      uintptr_t freer = next_random(&rng) % 4 == 0 ? (b.stream == S1 ? S2 : S1) : b.stream;
      cr_assert(dt__caching_allocator_free(a, b.p, freer));
      model_allocated -= b.size;
      blocks[i] = blocks[--n];
    }
    if (step % 500 == 0) dt__caching_allocator_empty_cache(a);
    dt_cuda_allocator_stats s = stats();
    cr_assert_eq(s.allocated, model_allocated, "step %d", step);
    cr_assert_eq(s.n_blocks, (uint64_t)n, "step %d", step);
    cr_assert_eq(s.reserved, fake.used, "step %d", step);
  }
  /* No two live blocks overlap. */
  for (int i = 0; i < n; i++) {
    for (int j = i + 1; j < n; j++) {
      bool apart = blocks[i].p + blocks[i].size <= blocks[j].p ||
                   blocks[j].p + blocks[j].size <= blocks[i].p;
      cr_assert(apart, "blocks %d and %d overlap", i, j);
    }
  }
  for (int i = 0; i < n; i++)
    cr_assert(dt__caching_allocator_free(a, blocks[i].p, blocks[i].stream));
  dt__caching_allocator_empty_cache(a);
  cr_assert_eq(stats().reserved, 0, "every segment wholly free after freeing every block");
  cr_assert_eq(fake.live_segments, 0);
}

/* Several threads, each on its own stream, allocating and freeing at once. */
static void *thread_body(void *arg) {
  uintptr_t stream = (uintptr_t)arg;
  uint64_t rng = stream * 2654435761u + 1;
  char *mine[32] = {0};
  for (int step = 0; step < 2000; step++) {
    int i = (int)(next_random(&rng) % 32);
    if (mine[i]) {
      if (mine[i][0] != (char)stream) return (void *)1;
      if (!dt__caching_allocator_free(a, mine[i], stream)) return (void *)1;
      mine[i] = NULL;
    } else {
      mine[i] = dt__caching_allocator_alloc(a, 1 + next_random(&rng) % (3 * MIB), stream);
      if (!mine[i]) return (void *)1;
      mine[i][0] = (char)stream;
    }
  }
  for (int i = 0; i < 32; i++) {
    if (mine[i] && !dt__caching_allocator_free(a, mine[i], stream)) return (void *)1;
  }
  return NULL;
}

Test(cuda_allocator, threads_on_their_own_streams) {
  pthread_t threads[4];
  for (uintptr_t t = 0; t < 4; t++)
    cr_assert_eq(pthread_create(&threads[t], NULL, thread_body, (void *)(t + 1)), 0);
  for (int t = 0; t < 4; t++) {
    void *result;
    pthread_join(threads[t], &result);
    cr_assert_null(result, "thread %d saw a bad block", t);
  }
  cr_assert_eq(stats().allocated, 0);
  cr_assert_eq(stats().n_blocks, 0);
  dt__caching_allocator_empty_cache(a);
  cr_assert_eq(fake.live_segments, 0);
}
