// One linear layer in the GPTQ checkpoint format (AutoGPTQ / GPTQModel "gptq", the layout SGLang's and vLLM's
// `gptq` and `gptq_marlin` loaders read), for symmetric quantisation with desc_act false:
//   <name>.qweight  I32 [in / pack][out]     pack = 32 / bits codes per word along the INPUT dim; input i sits in
//                                            word i / pack at bit (i % pack) * bits; codes unsigned, q + 2^(bits-1)
//   <name>.qzeros   I32 [groups][out / pack] zero points packed the same way along the OUTPUT dim
//   <name>.scales   F16 [groups][out]
//   <name>.g_idx    I32 [in]                 group of input i: i / group_size (0 everywhere per channel)
// groups = in / group_size, or 1 with group_size -1 (one scale per output channel).
// W[o][i] = (code - zero) * scale. The "gptq" (v1) format stores zero - 1, the "gptq_v2" format the zero itself:
// readers of v1 add 1 back (see danieldk.eu/GPTQ-Checkpoint-Format, "GPTQ checkpoint format", and the vLLM
// GPTQv2 notes at github.com/xxxxyu/blog content/posts/vllm-gptqv2-support: "GPTQv1 stores clamp(zero - 1) in
// the checkpoint, and requires adding 1 back before dequantization"). Our symmetric RTN has zero 2^(bits-1)
// (8 at 4 bits, 128 at 8 bits), so v1 stores 7 / 127 in every qzeros code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/safetensors.h"
#include "engine/weights.h"

namespace soartune::engine {

struct GptqLinear {
  int bits = 4;
  int group_size = -1;               // -1: per output channel
  int64_t in = 0, out = 0;
  std::vector<int32_t> qweight;      // [in / pack][out]
  std::vector<int32_t> qzeros;       // [groups][out / pack]
  std::vector<uint16_t> scales;      // [groups][out] fp16 bits
  std::vector<int32_t> g_idx;        // [in]
  int64_t groups() const { return group_size == -1 ? 1 : in / group_size; }
  int pack() const { return 32 / bits; }
};

// A quantised linear (bits 4 or 8, symmetric codes, fp16-exact scales) in v1 layout. Errors name `name`:
// widths the packing cannot hold (in % pack, out % pack) and scales fp16 cannot hold.
Result<GptqLinear> pack_gptq(const QuantizedLinear& l, const std::string& name);

// Reads <name>.qweight/.qzeros/.scales/.g_idx of a [out][in] linear into `l` as the same quantised weights.
// zero_offset: 1 for the v1 "gptq" format, 0 for "gptq_v2". Refuses (naming the tensor) what the engine's
// symmetric representation cannot hold: bits other than 4 and 8, zero points other than 2^(bits-1) (sym false),
// and a g_idx that is not i / group_size (desc_act true with reordered groups).
Status read_gptq_linear(const Checkpoint& ck, const std::string& name, int out, int in, int zero_offset, QuantizedLinear* l);

// The checkpoint's GPTQ zero offset from config.json quantization_config (or quantize_config.json):
// 1 for checkpoint_format "gptq" (the default), 0 for "gptq_v2"; an error naming the key for a quant_method
// other than gptq / gptq_marlin, another checkpoint_format, bits (or a `dynamic` rule's bits) other than 4 and
// 8, and sym false.
Result<int> gptq_zero_offset(const std::string& dir);

}  // namespace soartune::engine
