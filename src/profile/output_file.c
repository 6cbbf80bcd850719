/*
 * Output files that never leave half a file behind and never delete what they did not make.
 * A regular file (or a new path) is written to a temporary file beside it and renamed over
 * the path once complete; a failed write removes only the temporary. A path that exists and
 * is not a regular file (a device, a FIFO) is written in place and never removed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "profile/output_file.h"

FILE *dt__output_open(dt__output_file *out, const char *path) {
  struct stat st;
  out->path = path;
  out->in_place = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
  if (out->in_place) {
    out->tmp[0] = '\0';
    return fopen(path, "w");
  }
  int n = snprintf(out->tmp, sizeof out->tmp, "%s.tmp.XXXXXX", path);
  if (n < 0 || (size_t)n >= sizeof out->tmp) {
    errno = ENAMETOOLONG;
    return NULL;
  }
  int fd = mkstemp(out->tmp);
  if (fd < 0) return NULL;
  /* mkstemp makes the file 0600; give it the mode a plain fopen would (0666 less umask). */
  mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  FILE *f = fdopen(fd, "w");
  if (!f) {
    int err = errno;
    close(fd);
    unlink(out->tmp);
    errno = err;
  }
  return f;
}

int dt__output_close(dt__output_file *out, FILE *f, bool failed) {
  int err = failed ? (errno ? errno : EIO) : 0;
  if (ferror(f) && !err) err = errno ? errno : EIO;
  if (fclose(f) != 0 && !err) err = errno ? errno : EIO;
  if (out->in_place) return err;
  if (!err && rename(out->tmp, out->path) != 0) err = errno;
  if (err) unlink(out->tmp);
  return err;
}
