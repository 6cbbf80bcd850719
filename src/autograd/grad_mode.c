/* The per-thread grad mode (autograd.c sets it, record.c and autograd_impl.h read it). */
#include "autograd/grad_mode.h"

_Thread_local bool dt__grad_disabled;
