/*
 * The files of a distributed checkpoint's directory: reading the committed metadata (only a
 * missing file means "no checkpoint yet"), committing new metadata through a temporary that is
 * created exclusively and never followed, and removing what a save no longer needs.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint_meta.h"

#define METADATA_TEMP ".metadata.json.tmp"

atomic_int dt__checkpoint_fail_step;

void dt__ckpt_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

/* Opens `path` for reading without blocking on a FIFO or a device and refuses anything but a
 * regular file; the descriptor, or -1 with *err set (ENOENT for a missing file, EINVAL for a
 * file of another type). */
int dt__ckpt_open_regular(const char *path, struct stat *sb, int *err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  if (fstat(fd, sb) != 0) {
    *err = errno;
    close(fd);
    return -1;
  }
  if (!S_ISREG(sb->st_mode)) {
    *err = EINVAL;
    close(fd);
    return -1;
  }
  /* Reads of a regular file ignore O_NONBLOCK; cleared anyway so nothing depends on that. */
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

dt_status dt__ckpt_meta_read(const char *dir, const char *op, dt__ckpt_meta *meta, bool *absent) {
  memset(meta, 0, sizeof *meta);
  if (absent) *absent = false;
  char path[4096];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, DT__CKPT_METADATA) >= sizeof path)
    return dt__error(DT_ERR_INVALID, "%s: dir `%s` is too long", op, dir);
  struct stat sb;
  int err = 0;
  int fd = dt__ckpt_open_regular(path, &sb, &err);
  if (fd < 0) {
    if (absent) *absent = err == ENOENT;
    if (err == EINVAL)
      return dt__error(DT_ERR_IO, "%s: %s is not a regular file (not a complete checkpoint)", op,
                       path);
    return dt__error(err == ENOENT ? DT_ERR_INVALID : DT_ERR_IO,
                     "%s: %s: %s (not a complete checkpoint)", op, path, strerror(err));
  }
  if (sb.st_size > (off_t)DT_SAFETENSORS_MAX_HEADER) {
    close(fd);
    return dt__error(DT_ERR_INVALID, "%s: %s is larger than %llu bytes", op, path,
                     (unsigned long long)DT_SAFETENSORS_MAX_HEADER);
  }
  size_t size = (size_t)sb.st_size;
  char *text = dt__alloc(size + 1);
  if (!text) {
    close(fd);
    return dt__error(DT_ERR_NOMEM, "%s: cannot allocate %zu bytes for %s", op, size, path);
  }
  size_t got = 0;
  err = 0;
  while (got < size) {
    ssize_t r = pread(fd, text + got, size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      err = r < 0 ? errno : 0;
      break;
    }
    got += (size_t)r;
  }
  close(fd);
  dt_status st = got == size ? dt__ckpt_meta_parse(path, text, size, meta)
                             : dt__error(DT_ERR_IO, "%s: reading %s failed: %s", op, path,
                                         err ? strerror(err) : "the file shrank");
  dt__free(text);
  return st;
}

/* The generation number of a data file's name "__G_R.safetensors", or -1. */
static int64_t generation_of_name(const char *name) {
  long long g = -1;
  int r = -1, n = 0;
  if (sscanf(name, "__%lld_%d.safetensors%n", &g, &r, &n) == 2 && name[n] == '\0' && g >= 0)
    return (int64_t)g;
  return -1;
}

dt_status dt__ckpt_committed_generation(const char *dir, const char *op, int64_t *generation) {
  *generation = 0;
  dt__ckpt_meta meta;
  bool absent = false;
  dt_status st = dt__ckpt_meta_read(dir, op, &meta, &absent);
  if (absent) return DT_OK;
  if (st) {
    char reason[600];
    snprintf(reason, sizeof reason, "%s", dt_last_error());
    return dt__error(st == DT_ERR_NOMEM ? DT_ERR_NOMEM : DT_ERR_IO,
                     "%s: cannot read the committed checkpoint's metadata, so nothing was written "
                     "(a save over a checkpoint it cannot read could destroy it; repair or remove "
                     "%s/%s, or save elsewhere): %s",
                     op, dir, DT__CKPT_METADATA, reason);
  }
  /* Past every generation the metadata refers to, by number or by a file's name, so no name
   * the new save writes is one the committed checkpoint uses. */
  int64_t g = meta.generation;
  for (int i = 0; i < meta.n_files; i++) {
    int64_t f = generation_of_name(meta.files[i].name);
    if (f > g) g = f;
  }
  dt__ckpt_meta_free(&meta);
  *generation = g;
  return DT_OK;
}

/* A stale temporary from an earlier save of ours is removed, never followed: unlink removes a
 * link itself. One that belongs to another user, or is not a file or link, is refused. */
static dt_status remove_stale_temp(const char *op, const char *tmp) {
  struct stat sb;
  if (lstat(tmp, &sb) != 0) {
    if (errno == ENOENT) return DT_OK;
    return dt__error(DT_ERR_IO, "%s: cannot inspect %s: %s", op, tmp, strerror(errno));
  }
  if (sb.st_uid != geteuid() || !(S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode)))
    return dt__error(DT_ERR_IO,
                     "%s: %s exists and is %s (uid %ld): refusing to remove or write through it",
                     op, tmp,
                     S_ISLNK(sb.st_mode)   ? "a link of another user"
                     : S_ISREG(sb.st_mode) ? "a file of another user"
                                           : "not a file",
                     (long)sb.st_uid);
  if (unlink(tmp) != 0 && errno != ENOENT)
    return dt__error(DT_ERR_IO, "%s: cannot remove the stale %s: %s", op, tmp, strerror(errno));
  return DT_OK;
}

dt_status dt__ckpt_commit_metadata(const char *dir, const char *op, const char *text, size_t length,
                                   bool *committed) {
  *committed = false;
  char tmp[4096], path[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s/%s", dir, METADATA_TEMP) >= sizeof tmp ||
      (size_t)snprintf(path, sizeof path, "%s/%s", dir, DT__CKPT_METADATA) >= sizeof path)
    return dt__error(DT_ERR_INVALID, "%s: dir `%s` is too long", op, dir);
  dt_status st = remove_stale_temp(op, tmp);
  if (st) return st;
  /* Exclusive and never through a link: a name planted between the removal and here makes
   * the open fail instead of writing someone else's file. 0666: the kernel applies the umask
   * to a file that is always new. */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) return dt__error(DT_ERR_IO, "%s: cannot create %s: %s", op, tmp, strerror(errno));
  bool ok = true;
  size_t done = 0;
  while (ok && done < length) {
    ssize_t w = write(fd, text + done, length - done);
    if (w < 0 && errno == EINTR) continue;
    ok = w > 0;
    if (ok) done += (size_t)w;
  }
  if (ok) ok = fsync(fd) == 0;
  int err = ok ? 0 : (errno ? errno : EIO);
  if (close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    (void)unlink(tmp);
    return dt__error(DT_ERR_IO, "%s: writing %s failed: %s", op, tmp, strerror(err));
  }
  /* The temporary's name is durable before the rename refers to it. */
  dt__ckpt_fsync_dir(dir);
  if (atomic_load(&dt__checkpoint_fail_step) == DT__CKPT_STEP_METADATA_TEMP)
    return dt__error(DT_ERR_IO, "%s: injected failure at step %d", op, DT__CKPT_STEP_METADATA_TEMP);
  /* The commit: from this rename on, readers see the new generation. */
  if (rename(tmp, path) != 0) {
    err = errno;
    (void)unlink(tmp);
    return dt__error(DT_ERR_IO, "%s: renaming %s to %s failed: %s", op, tmp, path, strerror(err));
  }
  *committed = true;
  dt__ckpt_fsync_dir(dir);
  return DT_OK;
}

/* ".dt-" and eight letters or digits: the temporaries profile/output_file.c creates. */
static bool is_library_temp(const char *name) {
  if (strncmp(name, ".dt-", 4) != 0) return false;
  for (int i = 4; i < 12; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return false;
  }
  return name[12] == '\0';
}

void dt__ckpt_remove_old_files(const char *dir, int64_t generation, time_t started) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[4096];
  while ((e = readdir(d)) != NULL) {
    int64_t g = generation_of_name(e->d_name);
    bool data = g >= 0 && g != generation;
    bool temp = is_library_temp(e->d_name);
    if (!data && !temp) continue;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;
    if (temp) {
      /* Only a crash's leftover: a file of ours, not written since this save began. */
      struct stat sb;
      if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid() ||
          sb.st_mtime >= started)
        continue;
    }
    (void)unlink(path);
  }
  closedir(d);
}
