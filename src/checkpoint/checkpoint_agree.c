/*
 * The agreement of a checkpoint's ranks (save and load): a gather of every rank's status, its
 * message when it failed, and a payload, after which every rank returns the same verdict. A
 * save has three (the start, the data written, the commit); a load of distributed targets one
 * before any target changes and one after the copy.
 */
#include <stdio.h>
#include <string.h>

#include "checkpoint/checkpoint_meta.h"

typedef struct phase_head {
  int32_t status;
  uint32_t message_length;
  uint64_t payload_length;
} phase_head;

#define MESSAGE_MAX 1024

const unsigned char *dt__ckpt_phase_payload(const dt_objects *all, int r, size_t *length) {
  phase_head h;
  if (all->lengths[r] < sizeof h) return NULL;
  memcpy(&h, all->data + all->offsets[r], sizeof h);
  size_t at = sizeof h + (((size_t)h.message_length + 7) & ~(size_t)7);
  if (h.message_length > MESSAGE_MAX || at > all->lengths[r] ||
      h.payload_length != all->lengths[r] - at)
    return NULL;
  *length = (size_t)h.payload_length;
  return all->data + all->offsets[r] + at;
}

/* Without memory for its report a rank still takes part (see the fallback below). */
dt_status dt__ckpt_phase_agree(dt_comm *comm, const char *op, dt_status mine, const void *payload,
                               size_t payload_length, dt_objects **out, bool *heard) {
  *out = NULL;
  *heard = false;
  char message[MESSAGE_MAX + 1] = "";
  if (mine) snprintf(message, sizeof message, "%s", dt_last_error());
  phase_head head = {.status = mine, .message_length = (uint32_t)strlen(message)};
  size_t padded = ((size_t)head.message_length + 7) & ~(size_t)7;
  size_t total = sizeof head + padded + payload_length;
  unsigned char *buf = dt__calloc(total);
  if (buf) {
    head.payload_length = payload_length;
    memcpy(buf, &head, sizeof head);
    memcpy(buf + sizeof head, message, head.message_length);
    if (payload_length) memcpy(buf + sizeof head + padded, payload, payload_length);
  }
  /* Without memory this rank still takes part, so the others do not wait for it; its status
   * (its own failure, else NOMEM) is what every rank then returns. */
  phase_head fallback = {.status = mine ? mine : DT_ERR_NOMEM};
  dt_objects *all = NULL;
  dt_status st = buf ? dt_comm_all_gather_object(comm, buf, total, &all)
                     : dt_comm_all_gather_object(comm, &fallback, sizeof fallback, &all);
  dt__free(buf);
  if (st) return st;
  *heard = true;
  int rank = dt_comm_rank(comm);
  dt_status verdict = DT_OK;
  for (int r = 0; r < all->count && !verdict; r++) {
    phase_head h = {.status = DT_ERR_COMM};
    size_t n = 0;
    const unsigned char *at = NULL;
    if (all->lengths[r] >= sizeof h) memcpy(&h, all->data + all->offsets[r], sizeof h);
    if (!h.status && !dt__ckpt_phase_payload(all, r, &n)) h.status = DT_ERR_COMM;
    if (!h.status) continue;
    if (r == rank) {
      verdict = mine ? dt__error(mine, "%s", message)
                     : dt__error(DT_ERR_NOMEM, "%s: rank %d: cannot allocate its report", op, r);
      break;
    }
    char theirs[MESSAGE_MAX + 1] = "";
    if (h.message_length <= MESSAGE_MAX && all->lengths[r] >= sizeof h + h.message_length) {
      at = all->data + all->offsets[r] + sizeof h;
      memcpy(theirs, at, h.message_length);
      theirs[h.message_length] = '\0';
    }
    /* Their message starts with the function's name too; it is said once. */
    const char *text = theirs;
    size_t op_length = strlen(op);
    if (strncmp(text, op, op_length) == 0 && strncmp(text + op_length, ": ", 2) == 0)
      text += op_length + 2;
    /* This rank's own failure is added unless it is the same (a metadata every rank read). */
    bool also = mine && strcmp(message, theirs) != 0;
    verdict =
        dt__error((dt_status)h.status, "%s: rank %d: %s%s%.300s%s", op, r,
                  text[0] ? text : "failed (no message)", also ? " (this rank failed too: " : "",
                  also ? message : "", also ? ")" : "");
  }
  if (verdict) {
    dt_free(all);
    return verdict;
  }
  *out = all;
  return DT_OK;
}
