#include "core/kernel_variants.h"

#include "core/knob_catalogue.h"

namespace soartune::core {

namespace {

std::string shape_check(const GemvShape& s) {
  if (s.weight_bits != 16 && s.weight_bits != 8 && s.weight_bits != 4)
    return disallowed(*find_knob("weight_bits"), std::to_string(s.weight_bits), "weight_bits").message;
  if (s.batch < 1 || s.batch > kGemvMaxBatch)
    return "batch: " + std::to_string(s.batch) + " is not in 1.." + std::to_string(kGemvMaxBatch);
  if (s.n < 1) return "n: must be >= 1";
  if (s.k > kGemvMaxK) return "k: " + std::to_string(s.k) + " is over " + std::to_string(kGemvMaxK);
  const int v = gemv_values_per_chunk(s.weight_bits);
  if (s.k < v || s.k % v != 0)
    return "k: " + std::to_string(s.k) + " is not a positive multiple of " + std::to_string(v) + " for " +
           std::to_string(s.weight_bits) + "-bit weights";
  if (s.weight_bits < 16 && (s.group <= 0 || s.k % s.group != 0 || s.group % v != 0))
    return "group: " + std::to_string(s.group) + " must divide k=" + std::to_string(s.k) + " and be a multiple of " +
           std::to_string(v) + " for " + std::to_string(s.weight_bits) + "-bit weights";
  return "";
}

}  // namespace

std::string gemv_can_implement(const GemvVariant& v, const GemvShape& s) {
  std::string err = shape_check(s);
  if (!err.empty()) return err;
  if (v.pipelined()) {
    const std::size_t need = gemv_pipe_smem_bytes(v, s.batch);
    if (need > kGemvPipeSmemLimit) {
      int most = 0;
      for (int b = 8; b <= kGemvMaxBatch; b += 8)
        if (gemv_pipe_smem_bytes(v, b) <= kGemvPipeSmemLimit) most = b;
      return "batch: " + std::to_string(s.batch) + " rows; " + std::string(v.name) +
             "'s stages and reduction need " + std::to_string(need) + " bytes of shared memory, over " +
             std::to_string(kGemvPipeSmemLimit) + "; it allows batch 1.." + std::to_string(most);
    }
  }
  return "";
}

std::string gemv_can_implement(std::string_view variant, const GemvShape& s) {
  if (variant == kGemvAuto) return shape_check(s);
  const int i = gemv_variant_index(variant);
  if (i < 0) return "gemv_variant: " + std::string(variant) + " is not one of " + gemv_variant_allowed();
  return gemv_can_implement(kGemvVariants[i], s);
}

const std::vector<std::string>& gemv_variant_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const GemvVariant& x : kGemvVariants) v.emplace_back(x.name);
    return v;
  }();
  return names;
}

std::string gemv_variant_allowed() {
  std::string s(kGemvAuto);
  for (const GemvVariant& v : kGemvVariants) s += ", " + std::string(v.name);
  return s;
}

}  // namespace soartune::core
