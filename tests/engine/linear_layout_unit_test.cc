// The device bytes of a linear written a range of rows at a time (engine/linear_layout.h) equal the whole matrix
// laid out at once: the parts' rows concatenated (int4 codes packed by kernels::pack_int4_rows), or a gate|up
// pair interleaved by eight rows, codes and scales alike, whatever ranges the rows are written in.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/linear_layout.h"

namespace soartune::engine {
namespace {

namespace kn = soartune::kernels;

QuantizedLinear random_part(int out, int in, int bits, int group, std::mt19937& rng) {
  QuantizedLinear l;
  l.out = out;
  l.in = in;
  l.bits = bits;
  l.group_size = bits == 16 ? 0 : group;
  if (bits == 16) {
    l.w16.resize(size_t(out) * in);
    for (auto& v : l.w16) v = uint16_t(rng());
  } else {
    const int hi = (1 << (bits - 1)) - 1;
    std::uniform_int_distribution<int> code(-hi - 1, hi);
    l.q.resize(size_t(out) * in);
    for (auto& v : l.q) v = int8_t(code(rng));
    l.scales.resize(size_t(out) * l.groups_per_row());
    std::uniform_real_distribution<float> s(0.001f, 0.1f);
    for (auto& v : l.scales) v = s(rng);
  }
  return l;
}

// The expected device matrix, built whole: device row r holds (part, row) = order[r].
struct Expected {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

Expected expected(const std::vector<const QuantizedLinear*>& parts, bool interleave) {
  std::vector<std::pair<int, int>> order;
  if (interleave) {
    const int f = parts[0]->out;
    order.resize(size_t(2) * f);
    for (int j = 0; j < f; ++j) {
      order[size_t(j / 8 * 16 + j % 8)] = {0, j};
      order[size_t(j / 8 * 16 + 8 + j % 8)] = {1, j};
    }
  } else {
    for (int p = 0; p < int(parts.size()); ++p)
      for (int j = 0; j < parts[size_t(p)]->out; ++j) order.push_back({p, j});
  }
  const QuantizedLinear& p0 = *parts[0];
  const int k = p0.in, n = int(order.size());
  Expected e;
  if (p0.bits == 16) {
    for (auto [p, j] : order) {
      const uint16_t* row = parts[size_t(p)]->w16.data() + size_t(j) * k;
      const uint8_t* b = reinterpret_cast<const uint8_t*>(row);
      e.codes.insert(e.codes.end(), b, b + size_t(k) * 2);
    }
    return e;
  }
  std::vector<int8_t> q;
  for (auto [p, j] : order) {
    const int8_t* row = parts[size_t(p)]->q.data() + size_t(j) * k;
    q.insert(q.end(), row, row + k);
    const int spr = parts[size_t(p)]->groups_per_row();
    const float* s = parts[size_t(p)]->scales.data() + size_t(j) * spr;
    e.scales.insert(e.scales.end(), s, s + spr);
  }
  if (p0.bits == 8) {
    e.codes.resize(q.size());
    std::memcpy(e.codes.data(), q.data(), q.size());
  } else {
    e.codes.resize(q.size() / 2);
    kn::pack_int4_rows(q.data(), n, k, e.codes.data());
  }
  return e;
}

// Writes the layout in the ranges that `cuts` delimit and compares with the whole.
void check(const std::vector<const QuantizedLinear*>& parts, bool interleave, const std::vector<int>& cuts) {
  auto made = LinearLayout::make(parts, interleave);
  ASSERT_TRUE(made.ok()) << made.status().message;
  const LinearLayout& l = made.value();
  const Expected e = expected(parts, interleave);
  ASSERT_EQ(l.weight_bytes(), e.codes.size());
  ASSERT_EQ(l.scale_bytes(), e.scales.size() * 4);
  std::vector<uint8_t> codes(l.weight_bytes(), 0xAB);
  std::vector<float> scales(l.scale_bytes() / 4, -1.f);
  int r0 = 0;
  for (int cut : cuts) {
    const int r1 = std::min(cut, l.n());
    l.write_rows(r0, r1, codes.data() + size_t(r0) * l.row_bytes());
    l.write_scales(r0, r1, scales.data() + size_t(r0) * l.scales_per_row());
    r0 = r1;
  }
  ASSERT_EQ(r0, l.n());
  EXPECT_TRUE(codes == e.codes) << "codes differ";
  EXPECT_TRUE(scales == e.scales) << "scales differ";
}

TEST(LinearLayout, ConcatenatedPartsInAnyRowRanges) {
  std::mt19937 rng(7);
  for (int bits : {16, 8, 4}) {
    SCOPED_TRACE(bits);
    const QuantizedLinear q = random_part(24, 64, bits, 32, rng), k = random_part(8, 64, bits, 32, rng),
                          v = random_part(8, 64, bits, 32, rng), g = random_part(24, 64, bits, 32, rng);
    check({&q, &k, &v, &g}, false, {64});
    check({&q, &k, &v, &g}, false, {1, 23, 24, 25, 33, 40, 63, 64});
    check({&q}, false, {5, 11, 24});
  }
}

TEST(LinearLayout, GateUpInterleavedByEightRows) {
  std::mt19937 rng(11);
  for (int bits : {16, 8, 4}) {
    SCOPED_TRACE(bits);
    const QuantizedLinear gate = random_part(40, 32, bits, 0, rng), up = random_part(40, 32, bits, 0, rng);
    check({&gate, &up}, true, {80});
    check({&gate, &up}, true, {3, 8, 9, 16, 17, 31, 47, 79, 80});
  }
}

TEST(LinearLayout, RefusesPartsThatCannotShareOneMatrix) {
  std::mt19937 rng(3);
  const QuantizedLinear a = random_part(16, 64, 4, 32, rng), b = random_part(16, 64, 8, 32, rng),
                        c = random_part(8, 64, 4, 32, rng), odd = random_part(16, 48, 4, 16, rng);
  auto mixed = LinearLayout::make({&a, &b}, false);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message.find("bits"), std::string::npos) << mixed.status().message;
  EXPECT_FALSE(LinearLayout::make({&a, &c}, true).ok());  // interleaving needs equal widths
  auto narrow = LinearLayout::make({&odd}, false);        // int4 needs k % 32 == 0
  ASSERT_FALSE(narrow.ok());
  EXPECT_NE(narrow.status().message.find("multiple of 32"), std::string::npos) << narrow.status().message;
  QuantizedLinear three = random_part(16, 64, 3, 32, rng);
  auto bad = LinearLayout::make({&three}, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message.find("weight_bits"), std::string::npos) << bad.status().message;
}

}  // namespace
}  // namespace soartune::engine
