#include "core/status.h"

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace soartune {
namespace {

Result<std::vector<std::string>> names(bool ok) {
  if (!ok) return Status::NotFound("names: none");
  return std::vector<std::string>{"alpha", "beta", "gamma"};
}

// The value of a temporary Result is handed out by value: a range-for over `f().value()` (or a reference bound
// to it) would otherwise read the temporary after it is destroyed (found by AddressSanitizer in a test).
static_assert(std::is_same_v<decltype(names(true).value()), std::vector<std::string>>);
static_assert(std::is_same_v<decltype(std::declval<Result<int>&>().value()), int&>);
static_assert(std::is_same_v<decltype(std::declval<const Result<int>&>().value()), const int&>);

TEST(Result, ValueOfATemporaryOutlivesItInARangeFor) {
  std::string joined;
  for (const std::string& n : names(true).value()) joined += n + ",";
  EXPECT_EQ(joined, "alpha,beta,gamma,");
  const std::vector<std::string>& held = names(true).value();  // lifetime extended: a value, not a reference
  ASSERT_EQ(held.size(), 3u);
  EXPECT_EQ(held[2], "gamma");
}

TEST(Result, ErrorCarriesItsStatusAndNoValue) {
  const Result<std::vector<std::string>> r = names(false);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().message, "names: none");
}

}  // namespace
}  // namespace soartune
