// engine/uninit_vector.h: a vector of weights. Large blocks come 2 MiB-aligned (marked for huge pages), small ones
// from the standard allocator; either way the vector behaves as std::vector: what is written is read back, copies
// and growth keep the values, and a block is returned the way it was taken (ASan/valgrind builds check the pairs).
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <utility>

#include "engine/uninit_vector.h"

namespace soartune::engine {
namespace {

TEST(UninitVector, LargeBlocksAreHugePageAlignedAndKeepTheirValues) {
  const std::size_t n = kHugeBlockBytes / sizeof(uint16_t) + 123;  // just over the threshold
  UninitVector<uint16_t> v;
  v.resize(n);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % kHugePageBytes, 0u);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<uint16_t>(i * 2654435761u >> 16);
  UninitVector<uint16_t> copy = v;  // a second large block
  EXPECT_EQ(reinterpret_cast<uintptr_t>(copy.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(copy, v);
  v.resize(2 * n);  // growth moves the values into a new block
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], copy[i]) << i;
  v.clear();
  v.shrink_to_fit();
  EXPECT_EQ(v.capacity(), 0u);
  UninitVector<uint16_t> moved = std::move(copy);
  EXPECT_EQ(moved.size(), n);
}

TEST(UninitVector, SmallBlocksComeFromTheStandardAllocator) {
  UninitVector<int8_t> v(1000);
  std::iota(v.begin(), v.end(), int8_t{0});
  EXPECT_EQ(v[999], static_cast<int8_t>(999 % 256));
  v.push_back(7);
  EXPECT_EQ(v.back(), 7);
  EXPECT_EQ(v[10], 10);
}

}  // namespace
}  // namespace soartune::engine
