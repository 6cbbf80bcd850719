/*
 * Expert parallelism of the MoE MLP (dt_parallel_expert_parallel): the experts split over the
 * ranks of one mesh dim (torch.chunk: uneven counts allowed, a rank may hold none); the tokens
 * a rank routes travel to their experts' ranks with an all_to_all of uneven counts (every
 * rank's per-expert counts gathered first), run there grouped by expert, and come back with
 * the reverse all_to_all. Both exchanges are recorded for autograd: the backward of one is the
 * other with the counts swapped, so every rank takes part in both in backward too.
 */
#include <string.h>

#include "autograd/autograd_impl.h"
#include "comm/comm_impl.h"
#include "core/core_impl.h"
#include "dtensor/comm.h"
#include "dtensor/ops.h"
#include "mesh/mesh_impl.h"
#include "nn/nn_impl.h"

/* One exchange as autograd sees it: rows in[send[r]] to rank r, recv[s] from rank s. */
typedef struct exchange {
  dt_mesh *mesh; /* retained: the backward may run after the model and the mesh were dropped */
  dt_comm *comm;
  int size;
  int64_t *send, *recv; /* [size] each, one allocation */
} exchange;

static void exchange_release(void *state) {
  exchange *x = state;
  if (!x) return;
  dt__mesh_release(x->mesh);
  dt__free(x->send);
  dt__free(x);
}

/* rows of `in` [sum(send), D] to their ranks: a fresh [sum(recv), D] in *out. */
static dt_status all_to_all_rows(dt_comm *comm, dt_tensor *in, const int64_t *send,
                                 const int64_t *recv, int size, dt_tensor **out) {
  int64_t rows = 0;
  for (int r = 0; r < size; r++) rows += recv[r];
  dt_tensor *c = NULL;
  dt_status st = dt_contiguous(in, &c);
  if (!st) st = dt_empty(2, (int64_t[]){rows, dt_tensor_size(in, 1)}, dt_tensor_dtype(in), out);
  if (!st) st = dt_comm_all_to_all(comm, c, *out, send, recv);
  dt_tensor_release(c);
  if (st) {
    dt_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

static dt_status exchange_backward(void *state, dt_tensor *grad_output, dt_tensor **grad_input) {
  exchange *x = state;
  return all_to_all_rows(x->comm, grad_output, x->recv, x->send, x->size, grad_input);
}

static const dt_autograd_function exchange_function = {
    .name = "MoE expert all_to_all",
    .backward = exchange_backward,
    .release = exchange_release,
};

/* The exchange, recorded when in requires grad (the recording keeps a copy of the counts). */
static dt_status exchange_rows(dt_mesh *mesh, dt_comm *comm, dt_tensor *in, const int64_t *send,
                               const int64_t *recv, int size, dt_tensor **out) {
  dt_status st = all_to_all_rows(comm, in, send, recv, size, out);
  if (st || !dt_grad_mode_enabled() || !dt_tensor_requires_grad(in)) return st;
  exchange *x = dt__calloc(sizeof *x);
  if (x) x->send = dt__alloc(sizeof(int64_t) * 2 * (size_t)size);
  if (!x || !x->send) {
    exchange_release(x);
    dt_tensor_release(*out);
    *out = NULL;
    return dt__error(DT_ERR_NOMEM, "MoE: out of memory for the exchange's autograd node");
  }
  x->mesh = dt__mesh_retain(mesh), x->comm = comm, x->size = size, x->recv = x->send + size;
  memcpy(x->send, send, sizeof(int64_t) * (size_t)size);
  memcpy(x->recv, recv, sizeof(int64_t) * (size_t)size);
  st = dt__autograd_record_function(&exchange_function, x, in, *out);
  if (st) {
    dt_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

/* The experts' outputs for xp [n, D] (this rank's token-slot assignments in expert order, counts
 * per global expert), in the same order, computed on the experts' ranks. */
dt_status dt__nn_moe_run_expert_parallel(const dt__nn_moe_ep *ep, dt_module *experts, dt_tensor *xp,
                                         const int64_t *counts, int64_t n_experts,
                                         dt_tensor_list *tmp, dt_tensor **out) {
  dt_comm *comm = dt_mesh_group(ep->mesh, ep->dim);
  int size = dt_comm_size(comm);
  int64_t chunk = (n_experts + size - 1) / size;
  dt_status st = DT_OK;
  /* Every rank's per-expert counts. */
  int64_t *all = dt__calloc(sizeof(int64_t) * (size_t)(size * n_experts + 2 * size));
  if (!all) return dt__error(DT_ERR_NOMEM, "MoE: out of memory (expert counts)");
  int64_t *send = all + size * n_experts, *recv = send + size;
  dt_tensor *mine = NULL, *every = NULL;
  st = dt_from_data(counts, 2, (int64_t[]){1, n_experts}, DT_I64, &mine);
  if (!st) st = dt_empty(2, (int64_t[]){size, n_experts}, DT_I64, &every);
  if (!st) st = dt_comm_all_gather_into_tensor(comm, mine, every);
  double *tmpd = st ? NULL : dt__alloc(sizeof(double) * (size_t)(size * n_experts));
  if (!st && !tmpd) st = dt__error(DT_ERR_NOMEM, "MoE: out of memory (expert counts)");
  if (!st) st = dt_tensor_to_doubles(every, tmpd, size * n_experts);
  for (int64_t i = 0; !st && i < size * n_experts; i++) all[i] = (int64_t)tmpd[i];
  dt__free(tmpd);
  dt_tensor_release(mine), dt_tensor_release(every);
  int64_t first = ep->rank * chunk, last = first + chunk < n_experts ? first + chunk : n_experts;
  if (first > n_experts) first = n_experts;
  for (int r = 0; r < size && !st; r++) {
    int64_t f = r * chunk, l = f + chunk < n_experts ? f + chunk : n_experts;
    send[r] = recv[r] = 0;
    for (int64_t e = f; e < l; e++) send[r] += counts[e];
    for (int64_t e = first; e < last; e++) recv[r] += all[r * n_experts + e];
  }
  dt_tensor *got = NULL, *grouped = NULL, *ygrouped = NULL, *yback = NULL, *idx_t = NULL,
            *inv_t = NULL;
  if (!st) st = exchange_rows(ep->mesh, comm, xp, send, recv, size, &got);
  if (!st && !dt_tensor_list_keep(tmp, got)) st = DT_ERR_NOMEM;
  /* What arrived is by source rank, then expert: regroup it by expert, then source. */
  int64_t rows = 0;
  for (int r = 0; r < size && !st; r++) rows += recv[r];
  int64_t *idx = st ? NULL : dt__alloc(sizeof(int64_t) * 2 * (size_t)(rows ? rows : 1));
  if (!st && !idx) st = dt__error(DT_ERR_NOMEM, "MoE: out of memory (regrouping)");
  if (!st) {
    int64_t at = 0;
    for (int64_t e = first; e < last; e++)
      for (int r = 0; r < size; r++) {
        int64_t base = 0;
        for (int q = 0; q < r; q++) base += recv[q];
        for (int64_t e2 = first; e2 < e; e2++) base += all[r * n_experts + e2];
        for (int64_t i = 0; i < all[r * n_experts + e]; i++) idx[at++] = base + i;
      }
    for (int64_t p = 0; p < rows; p++) idx[rows + idx[p]] = p;
    st = dt_from_data(idx, 1, &rows, DT_I64, &idx_t);
    if (!st && !dt_tensor_list_keep(tmp, idx_t)) st = DT_ERR_NOMEM;
    if (!st) st = dt_from_data(idx + rows, 1, &rows, DT_I64, &inv_t);
    if (!st && !dt_tensor_list_keep(tmp, inv_t)) st = DT_ERR_NOMEM;
  }
  dt__free(idx);
  DT__KEEP(dt_index_select(got, 0, idx_t, &grouped), grouped);
  dt_tensor *parts[4096];
  int n_parts = 0;
  int64_t at = 0;
  for (int64_t e = first; e < last && !st; e++) {
    int64_t n = 0;
    for (int r = 0; r < size; r++) n += all[r * n_experts + e];
    if (n == 0) continue;
    dt_tensor *xe = NULL, *ye = NULL;
    DT__KEEP(dt_narrow(grouped, 0, at, n, &xe), xe);
    DT__KEEP(dt_module_forward(dt_module_child(experts, (int)(e - first)), xe, &ye), ye);
    if (!st) parts[n_parts++] = ye;
    at += n;
  }
  /* No rows here: a zero-row result still joins the graph, so that this rank's backward takes
   * part in both exchanges as its peers' do. */
  if (!st && n_parts == 0) {
    DT__KEEP(dt_mul_scalar(grouped, 0.0, &ygrouped), ygrouped);
  } else if (!st && n_parts == 1) {
    ygrouped = parts[0];
  } else {
    DT__KEEP(dt_cat(n_parts, parts, 0, &ygrouped), ygrouped);
  }
  DT__KEEP(dt_index_select(ygrouped, 0, inv_t, &yback), yback);
  if (!st) st = exchange_rows(ep->mesh, comm, yback, recv, send, size, out);
  dt__free(all);
  return st;
}
