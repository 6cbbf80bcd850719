/* Counting instructions under valgrind's callgrind, shared by the suites that do
 * (`bench instructions`, `bench compile --instructions`): the tool re-runs itself as a child
 * under callgrind with collection off at start; the child toggles collection around each
 * measured region and dumps it under a label (CALLGRIND_DUMP_STATS_AT); the parent reads the
 * dumps' labels and totals back. */
#ifndef BENCH_CALLGRIND_H
#define BENCH_CALLGRIND_H

#include <stddef.h>

/* A run's dump folder: made by bench_callgrind_run, removed by bench_callgrind_clean. */
typedef struct bench_callgrind_dir {
  char path[64];
} bench_callgrind_dir;

/* Runs this executable with `args` (NULL-terminated, argv[1] onwards) under callgrind
 * (--collect-atstart=no), its stderr (valgrind's banner) sent to /dev/null, dumping into a
 * fresh folder *dir. 0 when the child exited 0; otherwise 1 with a line on stderr naming
 * `who`. The folder exists after any return of 0 or 1 where dir->path[0] != 0. */
int bench_callgrind_run(const char *who, const char *const *args, bench_callgrind_dir *dir);

/* Calls fn(label, total instructions, user) for each dump in dir (the label of its
 * CALLGRIND_DUMP_STATS_AT, "" when the dump had none). 0, or 1 when the folder cannot be
 * read. */
int bench_callgrind_each(const bench_callgrind_dir *dir,
                         void (*fn)(const char *label, long total, void *user), void *user);

/* Removes the dumps and the folder (nothing when dir->path is empty). */
void bench_callgrind_clean(bench_callgrind_dir *dir);

#endif
