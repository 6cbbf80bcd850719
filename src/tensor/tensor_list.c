/* Lists of temporaries released together (dtensor/tensor.h, dt_tensor_list). */
#include "core/core_impl.h"
#include "dtensor/tensor.h"

dt_tensor *dt_tensor_list_keep(dt_tensor_list *list, dt_tensor *t) {
  if (!t) return NULL;
  if (!list) {
    dt_tensor_release(t);
    dt__error(DT_ERR_INVALID, "dt_tensor_list_keep: list is NULL (the tensor was released)");
    return NULL;
  }
  if (list->count == list->capacity) {
    void *arrays[1] = {&list->items};
    size_t sizes[1] = {sizeof(dt_tensor *)};
    if (!dt__reserve_arrays(list->count, &list->capacity, 32, 1, arrays, sizes)) {
      dt_tensor_release(t);
      dt__error(DT_ERR_NOMEM, "dt_tensor_list_keep: out of memory (the tensor was released)");
      return NULL;
    }
  }
  list->items[list->count++] = t;
  return t;
}

void dt_tensor_list_release(dt_tensor_list *list) {
  if (!list) return;
  for (int i = list->count - 1; i >= 0; i--) dt_tensor_release(list->items[i]);
  dt__free(list->items);
  list->items = NULL;
  list->count = list->capacity = 0;
}
