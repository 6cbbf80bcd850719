/*
 * Size notes: where a size-derived attribute of the next op call comes from, for a tracer.
 *
 * A backward formula sometimes passes an op a number it computed from sizes (mean's backward
 * divides by the count of reduced elements, then expands to the input's shape). A tracer that
 * records the call sees only the number; compile (src/compile/trace.c) reads this note to
 * record it as a symbolic size instead. The formula sets the note right before the call and
 * clears it after (a zero note); a tracer consumes it on the first call it sees.
 * Op wrappers that divide by a count of elements (the losses' mean reduction) note it too.
 * Without a tracer the note is ignored. One per thread (ranks of the threads backend trace
 * concurrently).
 */
#ifndef DT_AUTOGRAD_SIZE_NOTE_H
#define DT_AUTOGRAD_SIZE_NOTE_H

#include "dtensor/tensor.h"

typedef struct dt_size_note {
  /* The next call's shape attribute (ints / int_list) is this tensor's global shape. */
  const dt_tensor *shape_of;
  /* Or some of its entries are sizes of this tensor: ints[k] is sizes_of's global dim
   * size_dim[k] - 1 (0: ints[k] is a number of its own, such as -1). */
  const dt_tensor *sizes_of;
  signed char size_dim[DT_MAX_DIMS];
  /* The next call's scalars[0] is the product of count_of's global dims in count_mask. */
  const dt_tensor *count_of;
  unsigned count_mask;
  /* The next call's scalars[0] is the scalars[0] of the latest traced call of op scalar_op on
   * scalar_input (a backward formula reusing its forward's number, as div_scalar's does). */
  const dt_tensor *scalar_input;
  int scalar_op;
} dt_size_note;

extern _Thread_local dt_size_note dt__size_note;

#endif /* DT_AUTOGRAD_SIZE_NOTE_H */
