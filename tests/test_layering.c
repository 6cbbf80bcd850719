/* Calls go down (issue 11 §1): scripts/check-includes.sh prints the cycles between files of
 * src/, and the ones removed must stay removed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

/* Private header: the upcalls are filled in one place and the layering has no cycles. */
#include "core/core_impl.h"
#include "distributed/dist_impl.h"

/* The script's output for this source tree (found from this file's path). */
static void cycles(char *out, size_t size) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", __FILE__);
  char *slash = strrchr(dir, '/');
  cr_assert_not_null(slash, "__FILE__ %s has no folder", __FILE__);
  *slash = '\0'; /* .../tests */
  char command[8400];
  snprintf(command, sizeof command, "bash '%s/../scripts/check-includes.sh' '%s/../src' 2>&1", dir,
           dir);
  FILE *p = popen(command, "r");
  cr_assert_not_null(p);
  size_t n = fread(out, 1, size - 1, p);
  out[n] = '\0';
  pclose(p);
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
  char command[8400];
  snprintf(command, sizeof command,
           "mkdir -p %s/a %s/b && printf '#include \"b/b.h\"\\nvoid dt__a(void) { dt__b(); }\\n' > "
           "%s/a/a.c && printf 'void dt__b(void);\\nvoid dt__a(void);\\nstatic inline void "
           "dt__c(void) { dt__a(); }\\n' > %s/b/b.h && printf '#include \"b/b.h\"\\nvoid "
           "dt__b(void) {}\\n' > %s/b/b.c",
           dir, dir, dir, dir, dir);
  cr_assert_eq(system(command), 0);
  char dir_here[4096];
  snprintf(dir_here, sizeof dir_here, "%s", __FILE__);
  *strrchr(dir_here, '/') = '\0';
  snprintf(command, sizeof command, "bash '%s/../scripts/check-includes.sh' %s >/dev/null",
           dir_here, dir);
  cr_assert_neq(system(command), 0, "a.c -> b.h -> a.c is a cycle");
  snprintf(command, sizeof command, "printf 'void dt__b(void);\\n' > %s/b/b.h", dir);
  cr_assert_eq(system(command), 0);
  snprintf(command, sizeof command, "bash '%s/../scripts/check-includes.sh' %s >/dev/null",
           dir_here, dir);
  cr_assert_eq(system(command), 0, "no cycle once the inline call is gone");
  snprintf(command, sizeof command, "rm -rf %s", dir);
  (void)system(command);
}

/* The folder-level check (scripts/check-layers.sh): src/ passes; a use that goes up the layers
 * (core calling ops) and a folder without a layer fail. */
Test(layering, folders_call_down) {
  char here[4096];
  snprintf(here, sizeof here, "%s", __FILE__);
  *strrchr(here, '/') = '\0';
  char command[8400];
  snprintf(command, sizeof command, "bash '%s/../scripts/check-layers.sh' '%s/../src' >/dev/null",
           here, here);
  cr_assert_eq(system(command), 0, "src/ has an edge that goes up the layers (run the script)");
  char dir[] = "/tmp/dt_layers_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  snprintf(command, sizeof command,
           "mkdir -p %s/core %s/ops && printf 'void dt__b(void);\\nvoid dt__a(void) { dt__b(); "
           "}\\n' > %s/core/a.c && printf 'void dt__b(void) {}\\n' > %s/ops/b.c",
           dir, dir, dir, dir);
  cr_assert_eq(system(command), 0);
  snprintf(command, sizeof command, "bash '%s/../scripts/check-layers.sh' %s >/dev/null", here,
           dir);
  cr_assert_neq(system(command), 0, "core -> ops goes up");
  snprintf(command, sizeof command, "mv %s/core/a.c %s/ops/a.c && mkdir -p %s/elsewhere", dir, dir,
           dir);
  cr_assert_eq(system(command), 0);
  snprintf(command, sizeof command, "bash '%s/../scripts/check-layers.sh' %s >/dev/null", here,
           dir);
  cr_assert_neq(system(command), 0, "a folder without a layer fails");
  snprintf(command, sizeof command, "rmdir %s/elsewhere", dir);
  cr_assert_eq(system(command), 0);
  snprintf(command, sizeof command, "bash '%s/../scripts/check-layers.sh' %s >/dev/null", here,
           dir);
  cr_assert_eq(system(command), 0, "ops -> ops is within a layer");
  snprintf(command, sizeof command, "rm -rf %s", dir);
  (void)system(command);
}
