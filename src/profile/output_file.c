/*
 * Every file the library and the tool write goes through here: it never follows a link, never
 * leaves half a file behind, never deletes what it did not make, and honours the umask.
 *
 * A new path, a regular file or a symbolic link is written to a temporary beside the path,
 * flushed and fsynced, renamed over the path once complete, and the folder fsynced; a failed
 * write removes only the temporary. rename replaces a link itself, never its target, so a link
 * planted at the output's name (another user's `trace.json -> victim` in a shared folder) is
 * replaced and its target untouched (issue 35 item 2; links used to be followed as fopen
 * follows them). The temporary is created with O_CREAT | O_EXCL | O_NOFOLLOW, so a link
 * planted at its name is never written through either. A path that exists and is a device or
 * a FIFO (`/dev/null`) is written in place and never removed: opened without O_CREAT, with
 * O_NOFOLLOW, and with O_NONBLOCK so that a FIFO nobody reads is refused instead of blocking
 * the open; the descriptor must be the file lstat saw. Files whose names the library owns
 * (dt__output_open_owned: a checkpoint's shards) are never written in place: whatever sits at
 * the name is replaced. A directory is refused.
 *
 * Modes. The umask is never read or changed: it belongs to the process, reading it means
 * setting it, and any other thread creating a file meanwhile gets the wrong mode (or keeps
 * it). The temporary is created with open(O_CREAT | O_EXCL, 0666), so the kernel applies the
 * umask (and a directory's default ACL) exactly as a plain fopen would. Replacing a regular
 * file of this user narrows the new file to the old one's permission bits too (a private
 * 0600 file stays private), but never widens it beyond what the umask allows; another user's
 * file lends nothing, and an owned name never keeps an old file's mode.
 *
 * Names. The temporary is ".dt-" and eight random letters in the path's directory, so any
 * legal file name (up to NAME_MAX) can be written.
 *
 * SIGXFSZ. Writing past RLIMIT_FSIZE raises SIGXFSZ, whose default action kills the process
 * and would leave the temporary behind. The writing thread blocks the signal from open to
 * close, so the write fails with EFBIG instead, the temporary is removed, and the signal the
 * write raised is consumed before the thread's mask is restored. A caller that already
 * blocks SIGXFSZ keeps it and its pending signal untouched.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core_impl.h"
#include "profile/output_file.h"

#define TEMP_PREFIX ".dt-"
#define TEMP_RANDOM 8
#define TEMP_ATTEMPTS 100

/* Eight letters that differ between threads, processes and calls; O_EXCL catches the rest. */
static void random_letters(char *out, const void *salt) {
  static atomic_uint_fast64_t counter;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  uint64_t x = atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull;
  x = dt__hash_finish(x ^ (uint64_t)getpid() ^ ((uint64_t)(uintptr_t)salt << 16));
  x = dt__hash_finish(x ^ (uint64_t)now.tv_nsec ^ ((uint64_t)now.tv_sec << 32));
  static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  for (int i = 0; i < TEMP_RANDOM; i++) {
    out[i] = letters[x % (sizeof letters - 1)];
    x /= sizeof letters - 1;
  }
}

static void block_file_size_signal(dt__output_file *out) {
  sigset_t xfsz;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  out->restore_mask = false;
  if (pthread_sigmask(SIG_BLOCK, &xfsz, &out->old_mask) != 0) return;
  if (sigismember(&out->old_mask, SIGXFSZ)) return; /* the caller's own choice: leave it */
  out->restore_mask = true;
}

static void restore_file_size_signal(dt__output_file *out) {
  if (!out->restore_mask) return;
  out->restore_mask = false;
  int saved = errno;
  sigset_t xfsz, pending;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  /* A SIGXFSZ pending now was raised by our write (it was unblocked before open); the write
   * has already failed with EFBIG, so the signal is consumed, not delivered. */
  if (sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ)) {
    const struct timespec zero = {0, 0};
    while (sigtimedwait(&xfsz, NULL, &zero) == -1 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &out->old_mask, NULL);
  errno = saved;
}

/* Creates the temporary beside out->target; a descriptor, or -1 with errno set. */
static int create_temporary(dt__output_file *out) {
  const char *slash = strrchr(out->target, '/');
  size_t dir_length = slash ? (size_t)(slash - out->target) + 1 : 0;
  if (dir_length + sizeof TEMP_PREFIX + TEMP_RANDOM > sizeof out->tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(out->tmp, out->target, dir_length);
  memcpy(out->tmp + dir_length, TEMP_PREFIX, sizeof TEMP_PREFIX - 1);
  char *letters = out->tmp + dir_length + sizeof TEMP_PREFIX - 1;
  letters[TEMP_RANDOM] = '\0';
  for (int attempt = 0; attempt < TEMP_ATTEMPTS; attempt++) {
    random_letters(letters, out);
    int fd = open(out->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

/* fsync of the folder holding `target`, so that the rename that put it there is durable. */
static void sync_parent_dir(const char *target) {
  char dir[PATH_MAX];
  const char *slash = strrchr(target, '/');
  size_t n = slash ? (size_t)(slash - target) : 0;
  if (n == 0 && slash) n = 1; /* "/name": the root */
  if (n >= sizeof dir) return;
  if (n)
    memcpy(dir, target, n);
  else
    dir[n++] = '.';
  dir[n] = '\0';
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
}

/* An existing device or FIFO, written where it is; NULL with errno (and maybe out->problem). */
static FILE *open_in_place(dt__output_file *out, const char *path, const struct stat *seen) {
  int fd = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENXIO && S_ISFIFO(seen->st_mode))
      out->problem = "a FIFO that no program reads (refused rather than waited on)";
    return NULL;
  }
  /* Swapped between lstat and open (a regular file of someone else's now): not written. */
  struct stat now;
  int flags = fcntl(fd, F_GETFL);
  if (fstat(fd, &now) != 0 || now.st_dev != seen->st_dev || now.st_ino != seen->st_ino ||
      flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    close(fd);
    out->problem = "a file that was replaced while it was being opened";
    errno = EAGAIN;
    return NULL;
  }
  FILE *f = fdopen(fd, "w");
  if (!f) {
    int err = errno;
    close(fd);
    errno = err;
    return NULL;
  }
  out->in_place = true;
  return f;
}

/* Both entry points: `owned` replaces whatever sits at the name and keeps no old mode. */
static FILE *open_output(dt__output_file *out, const char *path, bool owned) {
  out->path = path;
  out->in_place = false;
  out->restore_mask = false;
  out->problem = NULL;
  out->failed_step = DT__OUTPUT_OK;
  out->tmp[0] = '\0';
  size_t n = strlen(path);
  if (!path[0] || n >= sizeof out->target) {
    /* "" names nothing; the temporary would land in the working directory. */
    errno = path[0] ? ENAMETOOLONG : ENOENT;
    return NULL;
  }
  memcpy(out->target, path, n + 1);
  struct stat st;
  bool exists = lstat(path, &st) == 0;
  if (!exists && errno != ENOENT) return NULL; /* a folder on the way is missing or closed */
  if (exists && S_ISDIR(st.st_mode)) {
    errno = EISDIR; /* refused before writing: the rename would fail after */
    return NULL;
  }
  if (exists && !owned && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
    return open_in_place(out, path, &st);
  block_file_size_signal(out);
  int err = 0;
  int fd = create_temporary(out);
  if (fd < 0) {
    err = errno;
    out->tmp[0] = '\0';
    goto fail;
  }
  /* Our own regular file being replaced lends its bits: the new one is never wider. */
  struct stat created;
  if (!owned && exists && S_ISREG(st.st_mode) && st.st_uid == geteuid()) {
    if (fstat(fd, &created) != 0 || ((created.st_mode & 0777 & ~st.st_mode) &&
                                     fchmod(fd, created.st_mode & st.st_mode & 0777))) {
      err = errno;
      close(fd);
      unlink(out->tmp);
      goto fail;
    }
  }
  FILE *f = fdopen(fd, "w");
  if (!f) {
    err = errno;
    close(fd);
    unlink(out->tmp);
    goto fail;
  }
  return f;
fail:
  restore_file_size_signal(out);
  errno = err ? err : EIO;
  return NULL;
}

FILE *dt__output_open(dt__output_file *out, const char *path) {
  return open_output(out, path, false);
}

FILE *dt__output_open_owned(dt__output_file *out, const char *path) {
  return open_output(out, path, true);
}

int dt__output_close(dt__output_file *out, FILE *f, bool failed) {
  dt__output_step step = DT__OUTPUT_WRITE;
  int err = failed ? (errno ? errno : EIO) : 0;
  if (ferror(f) && !err) err = errno ? errno : EIO;
  /* Flushed here, not by fclose, so that a write that fails is reported as the write. Durable
   * before it is visible: the bytes reach the disk before the rename names them. */
  if (!err && fflush(f) != 0) err = errno ? errno : EIO;
  if (!out->in_place && !err && fsync(fileno(f)) != 0) {
    step = DT__OUTPUT_FSYNC;
    err = errno ? errno : EIO;
  }
  if (fclose(f) != 0 && !err) {
    step = DT__OUTPUT_CLOSE;
    err = errno ? errno : EIO;
  }
  if (!out->in_place) {
    /* The rename's own errno: the temporary is fine, the target is what it could not take. */
    if (!err && rename(out->tmp, out->target) != 0) {
      step = DT__OUTPUT_RENAME;
      err = errno;
    }
    if (err)
      unlink(out->tmp);
    else
      sync_parent_dir(out->target);
  }
  out->failed_step = err ? step : DT__OUTPUT_OK;
  restore_file_size_signal(out);
  return err;
}

dt_status dt__output_close_error(const dt__output_file *out, int err, const char *fn) {
  const char *reason = strerror(err);
  switch (out->failed_step) {
  case DT__OUTPUT_FSYNC:
    return dt__error(DT_ERR_IO, "%s: fsync of '%s' for '%s' failed: %s", fn, out->tmp, out->target,
                     reason);
  case DT__OUTPUT_CLOSE:
    return dt__error(DT_ERR_IO, "%s: closing '%s' failed: %s", fn, out->target, reason);
  case DT__OUTPUT_RENAME:
    return dt__error(DT_ERR_IO, "%s: renaming '%s' to '%s' failed: %s", fn, out->tmp, out->target,
                     reason);
  case DT__OUTPUT_OK:
  case DT__OUTPUT_WRITE: break;
  }
  return dt__error(DT_ERR_IO, "%s: writing '%s' failed: %s", fn, out->target, reason);
}

const char *dt__output_strerror(const dt__output_file *out, int err) {
  return out->problem ? out->problem : strerror(err);
}
