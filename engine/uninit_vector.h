// A std::vector whose resize leaves new elements default-initialised: for trivial types, not written at all.
// For tensors that a loader overwrites whole right after sizing them (weights of gigabytes): the standard vector
// would first zero every byte on the resizing thread, touching each page there, before the threads that fill the
// tensor touch it again. Everything else about it is std::vector.
#pragma once

#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace soartune::engine {

template <typename T>
struct UninitAllocator : std::allocator<T> {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() noexcept = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  // Value-initialisation (resize(n), vector(n)) becomes default-initialisation; any other construction is the
  // standard one.
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <typename T, typename U>
bool operator==(const UninitAllocator<T>&, const UninitAllocator<U>&) noexcept {
  return true;
}

template <typename T>
using UninitVector = std::vector<T, UninitAllocator<T>>;

}  // namespace soartune::engine
