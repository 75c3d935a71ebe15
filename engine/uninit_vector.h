// A std::vector whose resize leaves new elements default-initialised: for trivial types, not written at all.
// For tensors that a loader overwrites whole right after sizing them (weights of gigabytes): the standard vector
// would first zero every byte on the resizing thread, touching each page there, before the threads that fill the
// tensor touch it again. Everything else about it is std::vector.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace soartune::engine {

// Blocks of kHugeBlockBytes or more (the weights of large models) are 2 MiB-aligned and marked for transparent huge
// pages: the threads that first touch them then take one page fault per 2 MiB instead of per 4 KiB. Only how the
// pages are mapped changes; the values never do.
inline constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;
inline constexpr std::size_t kHugeBlockBytes = std::size_t(4) << 20;

template <typename T>
struct UninitAllocator : std::allocator<T> {
  using value_type = T;
  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHugeBlockBytes) return std::allocator<T>::allocate(n);
    void* p = nullptr;
    if (posix_memalign(&p, kHugePageBytes, bytes) != 0) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);  // a hint: where the kernel declines it, the pages stay 4 KiB
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < kHugeBlockBytes) std::allocator<T>::deallocate(p, n);
    else std::free(p);
  }
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
