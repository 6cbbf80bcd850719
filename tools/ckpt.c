/*
 * dtensor ckpt: looking into checkpoints.
 *   inspect PATH [--json]   a safetensors file's tensors (name, dtype, shape, metadata), or a
 *                           distributed checkpoint's (directory with metadata.json): global
 *                           shape, dtype, mesh, placements and every saved block
 *
 * Names come from files and are untrusted: text output shows control characters as \xHH,
 * JSON output escapes them.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint_meta.h"
#include "core/text_escape.h"
#include "dtensor/dtensor.h"
#include "tools.h"

/* Text and JSON output escape the file's strings with the library's one rule. */
static void put_text(const char *s) { dt__escape_write(stdout, s, -1); }

static void put_json_string(const char *s) { dt__escape_write_json(stdout, s); }

static void put_shape(int ndim, const int64_t *shape) {
  putchar('[');
  for (int d = 0; d < ndim; d++) printf("%s%" PRId64, d ? ", " : "", shape[d]);
  putchar(']');
}

static int inspect_file(const char *path, bool json) {
  dt_safetensors *f = NULL;
  if (dt_safetensors_open(path, &f)) {
    tool_print_error("dtensor ckpt inspect");
    return 1;
  }
  int n = dt_safetensors_count(f);
  if (json) {
    printf("{\"kind\":\"safetensors\",\"path\":");
    put_json_string(path);
    printf(",\"metadata\":{");
    for (int i = 0; i < dt_safetensors_metadata_count(f); i++) {
      const char *key = NULL, *value = NULL;
      dt_safetensors_metadata(f, i, &key, &value);
      printf("%s", i ? "," : "");
      put_json_string(key);
      putchar(':');
      put_json_string(value);
    }
    printf("},\"tensors\":[");
  } else {
    printf("safetensors ");
    put_text(path);
    printf(": %d tensor%s\n", n, n == 1 ? "" : "s");
    for (int i = 0; i < dt_safetensors_metadata_count(f); i++) {
      const char *key = NULL, *value = NULL;
      dt_safetensors_metadata(f, i, &key, &value);
      printf("  metadata ");
      put_text(key);
      printf(" = ");
      put_text(value);
      putchar('\n');
    }
  }
  for (int i = 0; i < n; i++) {
    dt_safetensors_entry_info e;
    dt_safetensors_entry(f, i, &e);
    if (json) {
      printf("%s{\"name\":", i ? "," : "");
      put_json_string(e.name);
      printf(",\"dtype\":\"%s\",\"shape\":", dt_dtype_name(e.dtype));
      put_shape(e.ndim, e.shape);
      printf(",\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", e.data_begin, e.data_end);
    } else {
      printf("  ");
      put_text(e.name);
      printf("  %s ", dt_dtype_name(e.dtype));
      put_shape(e.ndim, e.shape);
      printf("  bytes [%" PRIu64 ", %" PRIu64 ")\n", e.data_begin, e.data_end);
    }
  }
  if (json) printf("]}\n");
  dt_safetensors_destroy(f);
  return 0;
}

static int inspect_checkpoint(const char *dir, bool json) {
  dt__ckpt_meta meta;
  if (dt__ckpt_meta_read(dir, "dtensor ckpt inspect", &meta, NULL)) {
    dt__escape_write_message(stderr, dt_last_error());
    fputc('\n', stderr);
    return 1;
  }
  if (json) {
    printf("{\"kind\":\"checkpoint\",\"path\":");
    put_json_string(dir);
    printf(",\"generation\":%" PRId64 ",\"files\":[", meta.generation);
    for (int i = 0; i < meta.n_files; i++) {
      printf("%s{\"name\":", i ? "," : "");
      put_json_string(meta.files[i].name);
      printf(",\"bytes\":%" PRIu64 "}", meta.files[i].bytes);
    }
    printf("],\"tensors\":[");
  } else {
    printf("checkpoint ");
    put_text(dir);
    printf(": generation %" PRId64 ", %d tensor%s in %d file%s\n", meta.generation, meta.n_tensors,
           meta.n_tensors == 1 ? "" : "s", meta.n_files, meta.n_files == 1 ? "" : "s");
  }
  for (int i = 0; i < meta.n_tensors; i++) {
    const dt__ckpt_tensor *t = &meta.tensors[i];
    if (json) {
      printf("%s{\"name\":", i ? "," : "");
      put_json_string(t->name);
      printf(",\"dtype\":\"%s\",\"shape\":", dt_dtype_name(t->dtype));
      put_shape(t->ndim, t->shape);
      printf(",\"mesh\":[");
      for (int m = 0; m < t->mesh_ndim; m++) printf("%s%d", m ? "," : "", t->mesh[m]);
      printf("],\"placements\":");
      put_json_string(t->placements);
      printf(",\"blocks\":[");
    } else {
      printf("  ");
      put_text(t->name);
      printf("  %s ", dt_dtype_name(t->dtype));
      put_shape(t->ndim, t->shape);
      if (t->mesh_ndim) {
        printf("  mesh [");
        for (int m = 0; m < t->mesh_ndim; m++) printf("%s%d", m ? ", " : "", t->mesh[m]);
        printf("] placements ");
        put_text(t->placements);
      } else {
        printf("  local");
      }
      printf("  %d block%s\n", t->n_blocks, t->n_blocks == 1 ? "" : "s");
    }
    for (int k = 0; k < t->n_blocks; k++) {
      const dt__ckpt_block *b = &t->blocks[k];
      if (json) {
        printf("%s{\"file\":", k ? "," : "");
        put_json_string(meta.files[b->file].name);
        printf(",\"offsets\":");
        put_shape(t->ndim, b->offsets);
        printf(",\"lengths\":");
        put_shape(t->ndim, b->lengths);
        printf(",\"byte_range\":[%" PRIu64 ",%" PRIu64 "]}", b->begin, b->end);
      } else {
        printf("    offsets ");
        put_shape(t->ndim, b->offsets);
        printf(" lengths ");
        put_shape(t->ndim, b->lengths);
        printf("  ");
        put_text(meta.files[b->file].name);
        printf(" bytes [%" PRIu64 ", %" PRIu64 ")\n", b->begin, b->end);
      }
    }
    if (json) printf("]}");
  }
  if (json) printf("]}\n");
  dt__ckpt_meta_free(&meta);
  return 0;
}

static int tool_ckpt_inspect(int argc, char **argv) {
  const char *path = NULL;
  bool json = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (argv[i][0] == '-' || path) {
      fprintf(stderr, "dtensor ckpt inspect: unexpected argument '%s'\n", argv[i]);
      return 2;
    } else {
      path = argv[i];
    }
  }
  if (!path) {
    fprintf(stderr, "usage: dtensor ckpt inspect PATH [--json]\n");
    return 2;
  }
  struct stat sb;
  if (stat(path, &sb) != 0) {
    fputs("dtensor ckpt inspect: ", stderr);
    dt__escape_write(stderr, path, -1);
    fputs(": no such file or directory\n", stderr);
    return 1;
  }
  return S_ISDIR(sb.st_mode) ? inspect_checkpoint(path, json) : inspect_file(path, json);
}

const tool_command tool_ckpt_commands[] = {
    {.name = "inspect",
     .summary = "a safetensors file's or a distributed checkpoint's tensors",
     .usage = "PATH [--json]",
     .details = "PATH is a .safetensors file (name, dtype, shape, byte range, metadata) or a\n"
                "checkpoint directory written by dt_checkpoint_save (global shape, dtype, mesh,\n"
                "placements and every saved block with its file and byte range).",
     .run = tool_ckpt_inspect},
    {0},
};
