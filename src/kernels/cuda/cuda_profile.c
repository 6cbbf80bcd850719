/*
 * The CUDA kind's profiler timer (profile_event.h, dt__profile_device_timer; a CUDA build
 * only): GPU work timed with CUDA events on the stream it is queued on, without making the
 * host wait while recording.
 *
 * begin records a timing event on the stream (the calling thread's current stream, or the one
 * given: NCCL's communication stream); end records a second one and queues the pair. flush
 * (dt_profiler_stop) waits for each pending end event and turns the pair into a device event
 * of the profiler: ts and dur in CLOCK_MONOTONIC ns, from the elapsed time between the pair
 * and an anchor event of the device. The anchor is recorded on first use per device and
 * profiler session, then synchronized; the host clock read right after it returns is its
 * time (so each device's events may sit late by the latency of that one synchronization, a
 * few microseconds, never relative to each other).
 *
 * Streams become small track numbers per device (the Chrome thread of their events), in order
 * of first sight.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/cuda_impl.h"
#include "profile/profile_event.h"

#define MAX_TRACKS 64

typedef struct pending {
  cudaEvent_t start, end;
  cudaStream_t stream;
  const char *name;
  int64_t bytes;
  int rank, device, track;
  uint8_t category;
  bool comm;
  struct pending *next;
} pending;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pending *queued, *queued_tail, *spare; /* pairs to resolve; pairs to reuse */
static struct {
  cudaEvent_t event;
  uint64_t ns; /* 0: no anchor yet */
} anchors[DT__CUDA_MAX_DEVICES];
static cudaStream_t tracks[DT__CUDA_MAX_DEVICES][MAX_TRACKS];
static int n_tracks[DT__CUDA_MAX_DEVICES];

static uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The track of a stream of device (lock held); -1 past MAX_TRACKS. */
static int track_of(int device, cudaStream_t stream) {
  for (int i = 0; i < n_tracks[device]; i++) {
    if (tracks[device][i] == stream) return i;
  }
  if (n_tracks[device] == MAX_TRACKS) return -1;
  tracks[device][n_tracks[device]] = stream;
  return n_tracks[device]++;
}

/* The device's anchor (lock held): recorded on stream and waited for, once. */
static bool anchor(int device, cudaStream_t stream) {
  if (anchors[device].ns) return true;
  if (!anchors[device].event && cudaEventCreate(&anchors[device].event) != cudaSuccess) {
    anchors[device].event = NULL;
    (void)cudaGetLastError();
    return false;
  }
  if (cudaEventRecord(anchors[device].event, stream) != cudaSuccess ||
      cudaEventSynchronize(anchors[device].event) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  anchors[device].ns = monotonic_ns();
  return true;
}

static pending *take_pair(void) {
  pending *p = spare;
  if (p) {
    spare = p->next;
    return p;
  }
  p = dt__calloc(sizeof *p);
  if (!p) return NULL;
  if (cudaEventCreate(&p->start) != cudaSuccess || cudaEventCreate(&p->end) != cudaSuccess) {
    (void)cudaGetLastError();
    if (p->start) (void)cudaEventDestroy(p->start);
    dt__free(p);
    return NULL;
  }
  return p;
}

static void *cuda_begin(int index, void *queue, bool comm) {
  if (index < 0 || index >= DT__CUDA_MAX_DEVICES || index >= dt__cuda_count()) return NULL;
  cudaStream_t stream = queue;
  if (!stream && dt__cuda_stream("profiler", index, &stream) != DT_OK) return NULL;
  pthread_mutex_lock(&lock);
  pending *p = NULL;
  int track = track_of(index, stream);
  if (track >= 0 && anchor(index, stream)) p = take_pair();
  pthread_mutex_unlock(&lock);
  if (!p) return NULL;
  if (cudaEventRecord(p->start, stream) != cudaSuccess) {
    (void)cudaGetLastError();
    pthread_mutex_lock(&lock);
    p->next = spare;
    spare = p;
    pthread_mutex_unlock(&lock);
    return NULL;
  }
  p->stream = stream;
  p->device = index;
  p->track = track;
  p->comm = comm;
  p->next = NULL;
  return p;
}

static void cuda_end(void *token, const char *name, dt__profile_category category, int64_t bytes,
                     int rank) {
  pending *p = token;
  bool ok = cudaEventRecord(p->end, p->stream) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();
  p->name = name;
  p->category = (uint8_t)category;
  p->bytes = bytes;
  p->rank = rank;
  pthread_mutex_lock(&lock);
  if (!ok) {
    p->next = spare;
    spare = p;
  } else if (queued_tail) {
    queued_tail->next = p;
    queued_tail = p;
  } else {
    queued = queued_tail = p;
  }
  pthread_mutex_unlock(&lock);
}

/* A pair's times (its end waited for) as a device event; false when CUDA cannot say. */
static bool resolve(const pending *p, dt__profile_device_event *e) {
  float from = 0, to = 0;
  cudaEvent_t a = anchors[p->device].event;
  if (cudaEventSynchronize(p->end) != cudaSuccess ||
      cudaEventElapsedTime(&from, a, p->start) != cudaSuccess ||
      cudaEventElapsedTime(&to, a, p->end) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  uint64_t base = anchors[p->device].ns;
  *e = (dt__profile_device_event){.name = p->name,
                                  .start_ns = base + (uint64_t)((double)from * 1e6),
                                  .end_ns = base + (uint64_t)((double)to * 1e6),
                                  .bytes = p->bytes,
                                  .rank = p->rank,
                                  .kind = DT_DEVICE_CUDA,
                                  .device = p->device,
                                  .track = p->track,
                                  .category = p->category,
                                  .comm_track = p->comm};
  return true;
}

static void cuda_flush(void) {
  pthread_mutex_lock(&lock);
  pending *list = queued;
  queued = queued_tail = NULL;
  pthread_mutex_unlock(&lock);
  pending *last = NULL;
  for (pending *p = list; p; p = p->next) {
    dt__profile_device_event e;
    if (resolve(p, &e)) dt__profile_record_device(&e);
    last = p;
  }
  pthread_mutex_lock(&lock);
  if (last) {
    last->next = spare;
    spare = list;
  }
  /* The next profiler session anchors anew (the clocks drift apart over long runs). */
  for (int d = 0; d < DT__CUDA_MAX_DEVICES; d++) anchors[d].ns = 0;
  pthread_mutex_unlock(&lock);
}

static const dt__profile_device_timer cuda_timer = {
    .label = "GPU", .name = "GPU", .begin = cuda_begin, .end = cuda_end, .flush = cuda_flush};

void dt__cuda_profile_register(void) {
  dt__profile_register_device_timer(DT_DEVICE_CUDA, &cuda_timer);
}
