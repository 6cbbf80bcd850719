/* Output files written whole or not at all (see output_file.c). */
#ifndef DT_PROFILE_OUTPUT_FILE_H
#define DT_PROFILE_OUTPUT_FILE_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>

typedef struct dt__output_file {
  const char *path;
  bool in_place; /* an existing non-regular file: written directly, never removed */
  char tmp[PATH_MAX];
} dt__output_file;

/* Opens the stream to write `path` through; NULL with errno set on failure. */
FILE *dt__output_open(dt__output_file *out, const char *path);

/* Closes the stream and, for a regular file, puts it in place; `failed` says the writer
 * saw an error. Returns 0 or an errno value (the temporary is removed then). */
int dt__output_close(dt__output_file *out, FILE *f, bool failed);

#endif
