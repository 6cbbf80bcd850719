/* Calls go down (issue 11 §1): scripts/check-includes.sh prints the cycles between files of
 * src/, and the ones removed must stay removed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

/* Private header: the upcalls are filled in one place and the layering has no cycles. */
#include "core/core_impl.h"
#include "distributed/dist_impl.h"
#include "fs_helpers.h"

/* PATH/TO/tests/../<name>, found from this file's path. */
static void from_tests(char *buf, size_t size, const char *name) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", __FILE__);
  char *slash = strrchr(dir, '/');
  cr_assert_not_null(slash, "__FILE__ %s has no folder", __FILE__);
  *slash = '\0'; /* .../tests */
  snprintf(buf, size, "%s/../%s", dir, name);
}

/* The exit status of `bash scripts/<script> <dir>`, its output captured in out when out is not
 * NULL (stdout and stderr), else stdout dropped. */
static int script(const char *name, const char *dir, char *out, size_t size) {
  char path[4200];
  from_tests(path, sizeof path, name);
  int status = fs_run((const char *[]){"bash", path, dir, NULL}, out, size);
  cr_assert_neq(status, -1, "bash %s %s could not be started", path, dir);
  return status;
}

/* dir/name created holding text. */
static void put(const char *dir, const char *name, const char *text) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  cr_assert_eq(fs_write_file(path, text), 0, "writing %s: %s", path, strerror(errno));
}

static void make_dir_in(const char *dir, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  cr_assert_eq(mkdir(path, 0755), 0, "creating %s: %s", path, strerror(errno));
}

/* The script's output for this source tree. */
static void cycles(char *out, size_t size) {
  char src[4200];
  from_tests(src, sizeof src, "src");
  (void)script("scripts/check-includes.sh", src, out, size);
  cr_assert(strstr(out, "cycle") || strstr(out, "no cycles"), "unexpected output: %s", out);
}

/* The file names on the script's "cycle N: a b c" lines. */
static bool in_a_cycle(const char *out, const char *file) {
  for (const char *line = out; line && *line;
       line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
    if (strncmp(line, "cycle ", 6) != 0) continue;
    const char *end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) : strlen(line);
    char buf[4096];
    snprintf(buf, sizeof buf, "%.*s ", (int)n, line);
    char want[256];
    snprintf(want, sizeof want, " %s ", file);
    if (strstr(buf, want)) return true;
  }
  return false;
}

Test(layering, removed_cycles_stay_removed) {
  static char out[1 << 16];
  cycles(out, sizeof out);
  /* comm.c <-> every backend: the backends call group.c, below comm.c and the registry. */
  cr_assert(!in_a_cycle(out, "comm/comm.c"), "%s", out);
  cr_assert(!in_a_cycle(out, "comm/registry.c"), "%s", out);
  cr_assert(!in_a_cycle(out, "comm/fake/fake.c"), "%s", out);
  /* profile_impl.h <-> recorder.c: recorder.c includes profile_event.h only. */
  cr_assert(!in_a_cycle(out, "profile/recorder.c"), "%s", out);
  cr_assert(!in_a_cycle(out, "profile/profile_impl.h"), "%s", out);
  /* tensor_impl.h <-> dtype.c: dtype.c includes dtype_impl.h only. */
  cr_assert(!in_a_cycle(out, "tensor/dtype.c"), "%s", out);
  cr_assert(!in_a_cycle(out, "tensor/tensor_impl.h"), "%s", out);
  /* Upcalls are data in core, installed from above: no file of core calls up. */
  cr_assert(!in_a_cycle(out, "core/core_impl.h"), "%s", out);
  cr_assert(!in_a_cycle(out, "core/upcalls.c"), "%s", out);
  /* threads_world.c -> threads_sync.c -> threads_tasks.c -> threads_group.c, never back. */
  cr_assert(!in_a_cycle(out, "comm/threads/threads_world.c"), "%s", out);
  cr_assert(!in_a_cycle(out, "comm/threads/threads_sync.c"), "%s", out);
  cr_assert(!in_a_cycle(out, "comm/threads/threads_tasks.c"), "%s", out);
  /* dispatch.c -> mode.c -> dispatch_local.c -> op_table.c; op_impl.h's inline helpers read
   * the table, which includes op_def.h only. */
  cr_assert(!in_a_cycle(out, "ops/dispatch.c"), "%s", out);
  cr_assert(!in_a_cycle(out, "ops/mode.c"), "%s", out);
  cr_assert(!in_a_cycle(out, "ops/op_impl.h"), "%s", out);
  cr_assert(!in_a_cycle(out, "ops/op_table.c"), "%s", out);
  /* autograd_impl.h reads the grad mode inline: it lives in grad_mode.c, not state.c. */
  cr_assert(!in_a_cycle(out, "autograd/autograd_impl.h"), "%s", out);
  cr_assert(!in_a_cycle(out, "autograd/state.c"), "%s", out);
  /* mpi_backend.c -> mpi_coll.c -> mpi_work.c -> mpi_runtime.c; the lock is not inline. */
  cr_assert(!in_a_cycle(out, "comm/mpi/mpi_backend.c"), "%s", out);
  cr_assert(!in_a_cycle(out, "comm/mpi/mpi_coll.c"), "%s", out);
  cr_assert(!in_a_cycle(out, "comm/mpi/mpi_impl.h"), "%s", out);
  cr_assert(!in_a_cycle(out, "comm/mpi/mpi_runtime.c"), "%s", out);
}

/* And none at all: every file of src/ only calls down. */
Test(layering, no_cycle_between_files) {
  char out[8192];
  cycles(out, sizeof out);
  cr_assert(strstr(out, "no cycles between files of src/") != NULL, "%s", out);
}

/* The lower layers' upcalls are NULL until the distributed layer installs all of them, in one
 * place (dt__dist_init). */
Test(layering, upcalls_installed_together) {
  cr_assert_null(dt__upcall.dist_dispatch);
  cr_assert_null(dt__upcall.spec_release);
  cr_assert_null(dt__upcall.mesh_destroyed);
  dt__dist_init();
  cr_assert_not_null(dt__upcall.dist_dispatch);
  cr_assert_not_null(dt__upcall.spec_release);
  cr_assert_not_null(dt__upcall.mesh_destroyed);
}

/* The script finds a cycle through a header's inline function, and none without it. */
Test(layering, script_sees_inline_calls) {
  char dir[] = "/tmp/dt_layering_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  make_dir_in(dir, "a");
  make_dir_in(dir, "b");
  put(dir, "a/a.c", "#include \"b/b.h\"\nvoid dt__a(void) { dt__b(); }\n");
  put(dir, "b/b.h",
      "void dt__b(void);\nvoid dt__a(void);\nstatic inline void dt__c(void) { dt__a(); }\n");
  put(dir, "b/b.c", "#include \"b/b.h\"\nvoid dt__b(void) {}\n");
  cr_assert_neq(script("scripts/check-includes.sh", dir, NULL, 0), 0,
                "a.c -> b.h -> a.c is a cycle");
  put(dir, "b/b.h", "void dt__b(void);\n");
  cr_assert_eq(script("scripts/check-includes.sh", dir, NULL, 0), 0,
               "no cycle once the inline call is gone");
  (void)fs_remove_tree(dir);
}

/* The folder-level check (scripts/check-layers.sh): src/ passes; a use that goes up the layers
 * (core calling ops) and a folder without a layer fail. */
Test(layering, folders_call_down) {
  char src[4200];
  from_tests(src, sizeof src, "src");
  cr_assert_eq(script("scripts/check-layers.sh", src, NULL, 0), 0,
               "src/ has an edge that goes up the layers (run the script)");
  char dir[] = "/tmp/dt_layers_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  make_dir_in(dir, "core");
  make_dir_in(dir, "ops");
  put(dir, "core/a.c", "void dt__b(void);\nvoid dt__a(void) { dt__b(); }\n");
  put(dir, "ops/b.c", "void dt__b(void) {}\n");
  cr_assert_neq(script("scripts/check-layers.sh", dir, NULL, 0), 0, "core -> ops goes up");
  char from[4200], to[4200];
  snprintf(from, sizeof from, "%s/core/a.c", dir);
  snprintf(to, sizeof to, "%s/ops/a.c", dir);
  cr_assert_eq(rename(from, to), 0, "renaming %s to %s: %s", from, to, strerror(errno));
  make_dir_in(dir, "elsewhere");
  cr_assert_neq(script("scripts/check-layers.sh", dir, NULL, 0), 0,
                "a folder without a layer fails");
  char elsewhere[4200];
  snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", dir);
  cr_assert_eq(rmdir(elsewhere), 0, "removing %s: %s", elsewhere, strerror(errno));
  cr_assert_eq(script("scripts/check-layers.sh", dir, NULL, 0), 0, "ops -> ops is within a layer");
  (void)fs_remove_tree(dir);
}
