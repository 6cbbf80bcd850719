/* The upcalls table (see dt__upcalls in core_impl.h): core is below every layer that calls
 * through it, so it holds the one instance. */
#include "core/core_impl.h"

dt__upcalls dt__upcall;
