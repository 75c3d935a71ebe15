#include "engine/linear_layout.h"

#include <cstring>
#include <string>

#include "core/knob_catalogue.h"

namespace soartune::engine {

namespace kn = soartune::kernels;

namespace {

// Input elements of one 16-byte chunk the GEMV loads: k must be a multiple of it.
int values_per_chunk(kn::WeightFormat f) {
  return f == kn::WeightFormat::kInt4 ? 32 : f == kn::WeightFormat::kInt8 ? 16 : 8;
}

}  // namespace

Result<LinearLayout> LinearLayout::make(const std::vector<const QuantizedLinear*>& parts, bool interleave) {
  if (parts.empty()) return Status::Internal("weights: a linear of no parts");
  const QuantizedLinear& p0 = *parts[0];
  LinearLayout l;
  for (const QuantizedLinear* p : parts) {
    if (p->in != p0.in || p->bits != p0.bits || p->group_size != p0.group_size || p->dtype16 != p0.dtype16)
      return Status::Invalid("weights: fused projections must share input width, bits and group size");
    l.first_row_.push_back(l.n_);
    l.n_ += p->out;
  }
  l.k_ = p0.in;
  if (p0.bits == 16) {
    l.format_ = p0.dtype16 == Dtype16::kFP16 ? kn::WeightFormat::kFp16 : kn::WeightFormat::kBf16;
  } else if (p0.bits == 8) {
    l.format_ = kn::WeightFormat::kInt8;
  } else if (p0.bits == 4) {
    l.format_ = kn::WeightFormat::kInt4;
  } else {
    return core::disallowed(*core::find_knob("weight_bits"), std::to_string(p0.bits), "weight_bits");
  }
  if (l.k_ % values_per_chunk(l.format_) != 0)
    return Status::Invalid("weights: input width " + std::to_string(l.k_) + " is not a multiple of " +
                           std::to_string(values_per_chunk(l.format_)) + " for " + kn::weight_format_name(l.format_));
  l.group_ = p0.bits == 16 ? 0 : (p0.group_size == 0 ? l.k_ : p0.group_size);
  l.scales_per_row_ = p0.bits == 16 ? 0 : p0.groups_per_row();
  l.row_bytes_ = kn::weight_bytes(l.format_, 1, l.k_);
  for (const QuantizedLinear* p : parts) {
    const std::size_t elems = std::size_t(p->out) * std::size_t(p->in);
    const bool sized = p0.bits == 16 ? p->w16.size() == elems
                                     : p->q.size() == elems && p->scales.size() == std::size_t(p->out) * l.scales_per_row_;
    if (!sized) return Status::Internal("weights: a part's codes or scales do not match its shape");
  }
  if (interleave) {
    if (parts.size() != 2 || parts[0]->out != parts[1]->out || parts[0]->out % 8 != 0)
      return Status::Internal("weights: interleaving gate|up needs two parts of equal width, a multiple of 8");
    l.interleave_ = true;
  }
  l.parts_ = parts;
  return l;
}

void LinearLayout::source(int r, int* part, int* row) const {
  if (interleave_) {
    const int block = r / 16, w = r % 16;
    *part = w < 8 ? 0 : 1;
    *row = block * 8 + w % 8;
    return;
  }
  int p = int(parts_.size()) - 1;
  while (first_row_[std::size_t(p)] > r) --p;
  *part = p;
  *row = r - first_row_[std::size_t(p)];
}

void LinearLayout::write_rows(int r0, int r1, uint8_t* dst) const {
  for (int r = r0; r < r1; ++r, dst += row_bytes_) {
    int p = 0, row = 0;
    source(r, &p, &row);
    const QuantizedLinear& q = *parts_[std::size_t(p)];
    const std::size_t at = std::size_t(row) * std::size_t(k_);
    switch (format_) {
      case kn::WeightFormat::kBf16:
      case kn::WeightFormat::kFp16: std::memcpy(dst, q.w16.data() + at, row_bytes_); break;
      case kn::WeightFormat::kInt8: std::memcpy(dst, q.q.data() + at, row_bytes_); break;
      case kn::WeightFormat::kInt4: kn::pack_int4_rows(q.q.data() + at, 1, k_, dst); break;
    }
  }
}

void LinearLayout::write_scales(int r0, int r1, float* dst) const {
  if (scales_per_row_ == 0) return;
  for (int r = r0; r < r1; ++r, dst += scales_per_row_) {
    int p = 0, row = 0;
    source(r, &p, &row);
    std::memcpy(dst, parts_[std::size_t(p)]->scales.data() + std::size_t(row) * scales_per_row_,
                std::size_t(scales_per_row_) * 4);
  }
}

}  // namespace soartune::engine
