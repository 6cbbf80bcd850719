/* The calling thread's grad mode, below the rest of autograd: autograd_impl.h reads it in an
 * inline function, so it is defined in a file (grad_mode.c) that includes this header only. */
#ifndef DT_GRAD_MODE_H
#define DT_GRAD_MODE_H

#include <stdbool.h>

/* True inside no_grad (dt_set_grad_enabled(false)); false by default. */
extern _Thread_local bool dt__grad_disabled;

#endif /* DT_GRAD_MODE_H */
