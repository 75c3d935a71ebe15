// The closed sets of kernel variants the CUDA kernels implement, declared once and CUDA-free: the knob
// catalogue lists them as the allowed values of gemv_variant, decode_kv_splits and prefill_attn_block, and the
// kernels (kernels/gemv.cu, attention_decode.cu, attention_prefill.cu) instantiate and dispatch from these same
// tables, so a variant added here is both proposable and runnable, and nothing else lists them.
//
// Each GEMV variant answers gemv_can_implement(variant, shape) for a layer shape (rows n, columns k, batch,
// weight bits, group) without a GPU, so a search proposes only what can run; the kernels add the checks that
// need pointers or a device (alignment, fused epilogues, sm_90 for the pipelined form).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace soartune::core {

// ---- GEMV (kernels/gemv.cuh) ----

// A direct variant "m<m_tiles>w<warps>u<unroll>[p][b<min_ctas>]": a CTA of `warps` warps owns 16 * m_tiles output
// rows and loads `unroll` chunk groups a warp ahead of its mma; with p, the next `unroll` groups are loaded while
// the current ones are computed (twice the registers); with min_ctas > 1 its registers are capped so that
// min_ctas CTAs fit an SM (that kernel only at batch <= 8; the plain one above).
// A pipelined variant "m1w<warps>s<stages>k<row_kb>" (sm_90): one CTA an SM, a producer warp streams 16-row
// tiles into `stages` shared-memory stages of row_kb KB a row with TMA bulk copies, `warps` consumer warps.
struct GemvVariant {
  std::string_view name;
  int m_tiles = 1;
  int warps = 8;
  int unroll = 0;    // direct form
  int stages = 0;    // pipelined form when > 0
  int row_kb = 0;    // pipelined form
  int min_ctas = 1;  // direct form
  bool prefetch = false;  // direct form: the next step's loads go out before this step's mma work ("p")
  constexpr bool pipelined() const { return stages > 0; }
};

inline constexpr GemvVariant kGemvVariants[] = {
    {"m1w8u2", 1, 8, 2, 0, 0, 1},
    {"m1w8u4", 1, 8, 4, 0, 0, 1},
    {"m2w8u2", 2, 8, 2, 0, 0, 1},
    {"m2w4u4", 2, 4, 4, 0, 0, 1},
    {"m1w16u2", 1, 16, 2, 0, 0, 1},
    {"m1w8s3k4", 1, 8, 0, 3, 4, 1},    // 3 stages of 16 rows x 4 KB, 8 consumer warps
    {"m1w16s4k2", 1, 16, 0, 4, 2, 1},  // 4 x 2 KB, 16 consumer warps
    {"m1w16s8k1", 1, 16, 0, 8, 1, 1},  // 8 x 1 KB, 16 consumer warps
    {"m1w16s6k2", 1, 16, 0, 6, 2, 1},  // 6 x 2 KB: batch <= 24 (32 columns' reduction does not fit beside them)
    {"m1w8u2b4", 1, 8, 2, 0, 0, 4},    // m1w8u2 with registers for four CTAs an SM (batch <= 8)
    {"m1w16u1p", 1, 16, 1, 0, 0, 1, true},   // m1w16u2's split of a long row, one step ahead
};
inline constexpr int kNumGemvVariants = int(sizeof(kGemvVariants) / sizeof(kGemvVariants[0]));

// "auto": the kernels choose a variant by the layer's shape and the batch (kernels/gemv.cu, gemv_plan).
inline constexpr std::string_view kGemvAuto = "auto";

// Index of `name` in kGemvVariants, or -1 (also for "auto").
constexpr int gemv_variant_index(std::string_view name) {
  for (int i = 0; i < kNumGemvVariants; ++i)
    if (kGemvVariants[i].name == name) return i;
  return -1;
}

inline constexpr int kGemvMaxBatch = 32;
inline constexpr int kGemvMaxK = 131072;  // input width (the kernels' scale-group index is exact below 2^18)
inline constexpr std::size_t kGemvPipeSmemLimit = 227 * 1024;  // sm_90 shared memory a CTA

// Shared memory of a pipelined CTA without x: the stages (rows row_bytes + 64 apart), their two barriers each,
// and the consumers' reduction buffer [warps][16][8 n_tiles + 1] fp32.
constexpr std::size_t gemv_pipe_smem_bytes(int warps, int stages, int row_bytes, int n_tiles) {
  return std::size_t(stages) * 16 * (row_bytes + 64) + 2 * std::size_t(stages) * 8 +
         std::size_t(warps) * 16 * (8 * n_tiles + 1) * 4;
}
constexpr std::size_t gemv_pipe_smem_bytes(const GemvVariant& v, int batch) {
  return gemv_pipe_smem_bytes(v.warps, v.stages, v.row_kb * 1024, (batch + 7) / 8);
}

// One linear layer as a GEMV call sees it: y[batch][n] = x[batch][k] W[n][k]^T.
struct GemvShape {
  int n = 0;            // output rows
  int k = 0;            // input columns
  int batch = 1;        // 1..kGemvMaxBatch
  int weight_bits = 16; // 16 (bf16 / fp16), 8 or 4
  int group = 0;        // quantised: k elements a scale (k itself for per channel); 0 for 16-bit
};

// k elements of one 16-byte chunk of a weight row.
constexpr int gemv_values_per_chunk(int weight_bits) { return weight_bits == 4 ? 32 : weight_bits == 8 ? 16 : 8; }

// "" when `variant` ("auto" or a name of kGemvVariants) can run `shape`; else a message naming the field and
// the allowed values.
std::string gemv_can_implement(std::string_view variant, const GemvShape& shape);
std::string gemv_can_implement(const GemvVariant& variant, const GemvShape& shape);

// The names of kGemvVariants in table order ("auto" not included).
const std::vector<std::string>& gemv_variant_names();
// "auto, m1w8u2, ...": the allowed values of gemv_variant, for messages.
std::string gemv_variant_allowed();

// ---- decode attention (kernels/attention_decode.cuh) ----

// KV splits a (sequence, KV head): 0 = the plan chooses from the context, the batch and the SM count; else a
// power of two. The combine kernel's shared memory holds kDecodeMaxKvSplits log-sum-exps.
inline constexpr int kDecodeKvSplits[] = {0, 1, 2, 4, 8, 16, 32, 64, 128};
inline constexpr int kDecodeMaxKvSplits = 128;

constexpr bool decode_kv_splits_allowed(int splits) {
  for (int s : kDecodeKvSplits)
    if (s == splits) return true;
  return false;
}

// ---- prefill attention (kernels/attention_prefill.cuh) ----

// Query rows a CTA (a template parameter of the prefill kernels, instantiated for each value here).
inline constexpr int kPrefillAttnBlocks[] = {32, 64, 128};

constexpr bool prefill_attn_block_allowed(int block_m) {
  for (int b : kPrefillAttnBlocks)
    if (b == block_m) return true;
  return false;
}

// "0, 1, 2, ...": a set of integers, for messages.
template <std::size_t N>
std::string allowed_list(const int (&values)[N]) {
  std::string s;
  for (int v : values) s += (s.empty() ? "" : ", ") + std::to_string(v);
  return s;
}

}  // namespace soartune::core
