/*
 * Llama's rotary embedding tables. The inverse frequencies are computed once at load, in
 * float32 with transformers' operations in its order (so that the llama3 scaling's bands and
 * roundings are the same) and handed to every Attention, which makes the cos/sin tables per
 * forward for the positions it covers only: a model with max_position_embeddings of 1e9 loads
 * in the memory of its weights, and a decode step computes one row.
 */
#include <math.h>

#include "core/core_impl.h"
#include "dtensor/ops.h"
#include "models/models_impl.h"

/* transformers' _compute_llama3_parameters on one frequency, float32 step by step: Python
 * scalars meet float32 tensors as float32 values; `scalar / tensor` is reciprocal(tensor) *
 * scalar (Tensor.__rtruediv__). */
static float llama3_scaled(const dt_hf_config *c, float inv) {
  const float factor = (float)c->rope_factor, low = (float)c->rope_low_freq_factor;
  const double old = (double)c->rope_original_max_positions;
  const float low_wl = (float)(old / c->rope_low_freq_factor);
  const float high_wl = (float)(old / c->rope_high_freq_factor);
  float wavelen = (1.0f / inv) * (float)(2.0 * 3.14159265358979323846);
  float scaled = wavelen > low_wl ? inv / factor : inv;
  float smooth = ((1.0f / wavelen) * (float)old - low) /
                 (float)(c->rope_high_freq_factor - c->rope_low_freq_factor);
  float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
  bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
  return medium ? smoothed : scaled;
}

dt_status dt__hf_rope_init(dt_hf_model *m, const char *config_path) {
  const dt_hf_config *c = &m->cfg;
  int64_t half = c->head_dim / 2;
  float *inv = dt__alloc(sizeof(float) * (size_t)(half > 0 ? half : 1));
  if (!inv) return dt__error(DT_ERR_NOMEM, "dt_hf_model_load: out of memory (rotary)");
  for (int64_t i = 0; i < half; i++) {
    /* 1 / theta ** (arange(0, hd, 2).float() / hd) */
    float e = (float)(2 * i) / (float)c->head_dim;
    inv[i] = 1.0f / powf((float)c->rope_theta, e);
    if (c->rope_factor > 0) inv[i] = llama3_scaled(c, inv[i]);
    /* Each field may be in range and their combination still overflow (a factor near
     * FLT_MIN divides a frequency up to 1e38): an angle position x frequency that is infinite
     * at the last position makes cos and sin NaN, and every logit with them. */
    float last = inv[i] * (float)(c->max_positions - 1);
    if (!isfinite(inv[i]) || !(inv[i] >= 0) || !isfinite(last)) {
      double frequency = (double)inv[i];
      dt__free(inv);
      return dt__error(DT_ERR_INVALID,
                       "dt_hf_model_load: %s: rotary frequency %lld is %g (%g at position %lld of "
                       "max_position_embeddings) with rope_theta %g and scaling factor %g, "
                       "low_freq_factor %g, high_freq_factor %g, "
                       "original_max_position_embeddings %lld",
                       config_path, (long long)i, frequency, (double)last,
                       (long long)(c->max_positions - 1), c->rope_theta, c->rope_factor,
                       c->rope_low_freq_factor, c->rope_high_freq_factor,
                       (long long)c->rope_original_max_positions);
    }
  }
  dt_status st = dt_from_data(inv, 1, &half, DT_F32, &m->rope_inv);
  dt__free(inv);
  return st;
}
