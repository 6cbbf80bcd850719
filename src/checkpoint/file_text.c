/*
 * Text read from a file, escaped for a message (checkpoint_impl.h): the one escaper of
 * core/text_escape.c, with buffers of the thread so that a message can quote several texts.
 */
#include "checkpoint/checkpoint_impl.h"
#include "core/text_escape.h"

#define SLOTS 4

static _Thread_local char shown_buf[SLOTS][256];

const char *dt__ckpt_shown(int slot, const char *s) {
  if (!s) return "(null)";
  return dt__escape_text(shown_buf[(unsigned)slot % SLOTS], sizeof shown_buf[0], s);
}
