#include "engine/quantize.h"

#include <thread>

#include "core/knob_catalogue.h"
#include "engine/thread_pool.h"
#include "kernels/numeric_formats.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace soartune::engine {

float quant_scale(float amax, int bits) {
  const int qmax = (1 << (bits - 1)) - 1;
  // Scales are held at fp16 precision: a GPTQ checkpoint stores them as fp16 (engine/gptq_checkpoint.h), so
  // what a trial measures is exactly what the exported checkpoint serves. A scale fp16 cannot hold (no
  // weight of a trained model comes near) keeps fp32 and the exporter refuses it.
  const float scale = amax > 0.f ? amax / static_cast<float>(qmax) : 1.f;
  const float scale16 = kernels::fp16_to_f32(kernels::f32_to_fp16(scale));
  return std::isfinite(scale16) && scale16 > 0.f ? scale16 : scale;
}

Status check_quantizable(const QuantizedLinear& l, int bits, int group_size) {
  if (bits != 8 && bits != 4) return core::disallowed(*core::find_knob("weight_bits"), std::to_string(bits), "launch.weight_bits");
  if (l.bits != 16)
    return Status::Invalid("launch.weight_bits: the model's weights are already quantised (a GPTQ checkpoint); keep every weight "
                           "bits knob at 16 (the default) to run them as they are stored");
  if (group_size != 0 && (group_size < 0 || l.in % group_size != 0))
    return Status::Invalid("launch.weight_group_size: " + std::to_string(group_size) + " does not divide the input width " +
                           std::to_string(l.in) + "; allowed: " + core::find_knob("weight_group_size")->allowed_text() +
                           " (0 = per output channel; a group must divide the input width)");
  return Status::Ok();
}

Status quantize_linear(QuantizedLinear& l, int bits, int group_size) {
  if (bits == 16) return Status::Ok();
  if (Status s = check_quantizable(l, bits, group_size); !s.ok()) return s;
  const int qmax = (1 << (bits - 1)) - 1;
  const int gsize = group_size == 0 ? l.in : group_size;
  const int gpr = l.in / gsize;
  l.q.resize(static_cast<std::size_t>(l.out) * l.in);
  l.scales.resize(static_cast<std::size_t>(l.out) * gpr);
  static ThreadPool pool(static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency()))));
  pool.parallel_for(l.out, [&](int o0, int o1, int) {
  std::vector<float> row(static_cast<std::size_t>(l.in));
  for (int o = o0; o < o1; ++o) {
    dequantize_rows(l, o, 1, row.data());
    for (int g = 0; g < gpr; ++g) {
      const float* w = row.data() + static_cast<std::size_t>(g) * gsize;
      float amax = 0.f;
      for (int i = 0; i < gsize; ++i) amax = std::max(amax, std::fabs(w[i]));
      const float scale = quant_scale(amax, bits);
      l.scales[static_cast<std::size_t>(o) * gpr + g] = scale;
      int8_t* q = l.q.data() + static_cast<std::size_t>(o) * l.in + static_cast<std::size_t>(g) * gsize;
      for (int i = 0; i < gsize; ++i) {
        const float v = std::nearbyint(w[i] / scale);
        q[i] = static_cast<int8_t>(std::clamp(v, static_cast<float>(-qmax), static_cast<float>(qmax)));
      }
    }
  }
  });
  l.bits = bits;
  l.group_size = group_size;
  l.w16.clear();
  l.w16.shrink_to_fit();
  return Status::Ok();
}

Status quantize_model(ModelWeights& w, const LaunchConfig& launch) {
  const int n = static_cast<int>(w.layers.size());
  if (Status s = launch.check_layers(n); !s.ok()) return s;
  for (int i = 0; i < n; ++i) {
    LayerWeights& l = w.layers[static_cast<std::size_t>(i)];
    const ProjKind attn = w.config.mixer(i) == MixerKind::kLightning ? ProjKind::kLightningAttn : ProjKind::kAttn;
    const int ab = launch.weight_bits_for(i, n, attn);
    const int mb = launch.weight_bits_for(i, n, ProjKind::kMlp);
    // The mixer's output gate (MiniCPM-SALA o_gate / z_proj) is an attention projection like q/k/v/o.
    for (QuantizedLinear* p : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_out_gate})
      if (p->out > 0)
        if (Status s = quantize_linear(*p, ab, launch.weight_group_size); !s.ok()) return s;
    for (QuantizedLinear* p : {&l.w_gate, &l.w_up, &l.w_down})
      if (Status s = quantize_linear(*p, mb, launch.weight_group_size); !s.ok()) return s;
  }
  if (Status s = quantize_linear(w.lm_head, launch.lm_head_bits, launch.weight_group_size); !s.ok()) return s;
  return Status::Ok();
}

}  // namespace soartune::engine
