/* Output files written whole or not at all, never through a link (see output_file.c): every
 * file the library and the tool write goes through dt__output_open. */
#ifndef DT_PROFILE_OUTPUT_FILE_H
#define DT_PROFILE_OUTPUT_FILE_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include "dtensor/core.h"

/* The step of dt__output_close that failed, so that its message names the right file. */
typedef enum dt__output_step {
  DT__OUTPUT_OK,
  DT__OUTPUT_WRITE,  /* the writer's own error, or flushing the stream */
  DT__OUTPUT_FSYNC,  /* fsync of the temporary */
  DT__OUTPUT_CLOSE,  /* fclose */
  DT__OUTPUT_RENAME, /* renaming the temporary to the target */
} dt__output_step;

typedef struct dt__output_file {
  const char *path;
  bool in_place;               /* an existing device or FIFO: written directly, never removed */
  bool restore_mask;           /* SIGXFSZ was blocked by dt__output_open and must be unblocked */
  sigset_t old_mask;           /* the thread's signal mask before dt__output_open */
  const char *problem;         /* why opening failed when errno alone would mislead, else NULL */
  dt__output_step failed_step; /* set by dt__output_close */
  char target[PATH_MAX];       /* the name the file is put at: path (a link there is replaced) */
  char tmp[PATH_MAX];
} dt__output_file;

/* Opens the stream to write `path` through: a temporary beside it, renamed over it by
 * dt__output_close, so a symbolic link at `path` is replaced, never followed; an existing
 * device or FIFO is written in place (a FIFO nobody reads is refused, not waited on); a
 * directory is refused. The new file's mode is 0666 less the umask, narrowed to the bits of
 * this user's regular file it replaces. NULL with errno set on failure (then
 * dt__output_strerror explains it). */
FILE *dt__output_open(dt__output_file *out, const char *path);

/* As dt__output_open, for a file whose name the library owns (a checkpoint's shard): the path
 * is never written in place either: whatever is there (a link, a FIFO, a stale file) is
 * replaced by the rename, and the new file's mode is 0666 less the umask, never an old file's. */
FILE *dt__output_open_owned(dt__output_file *out, const char *path);

/* Closes the stream and, unless written in place, fsyncs it, renames it over the path and
 * fsyncs the folder; `failed` says the writer saw an error. Returns 0 or the errno value of
 * the step that failed, recorded in out->failed_step (the temporary is removed then). */
int dt__output_close(dt__output_file *out, FILE *f, bool failed);

/* DT_ERR_IO for error `err` of dt__output_close, with the message "<fn>: " and the step that
 * failed against the names it used: "writing '<path>' failed: <reason>", "fsync of
 * '<temporary>' for '<path>' failed: ...", "closing '<path>' failed: ..." or "renaming
 * '<temporary>' to '<path>' failed: <reason>" (the rename's own errno: a directory at the
 * path, a folder removed meanwhile). */
dt_status dt__output_close_error(const dt__output_file *out, int err, const char *fn);

/* The reason for error `err` of dt__output_open, as a phrase for a message. */
const char *dt__output_strerror(const dt__output_file *out, int err);

#endif
