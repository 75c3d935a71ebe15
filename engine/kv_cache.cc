#include "engine/kv_cache.h"

namespace soartune::engine {

PageAllocator::PageAllocator(int num_pages) : total_(num_pages) {
  free_.reserve(static_cast<std::size_t>(num_pages));
  for (int p = num_pages - 1; p >= 0; --p) free_.push_back(p);
}

bool PageAllocator::allocate(int n, std::vector<int32_t>* block_table) {
  if (n > free_pages()) return false;
  for (int i = 0; i < n; ++i) {
    block_table->push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void PageAllocator::release(std::vector<int32_t>* block_table) {
  for (auto it = block_table->rbegin(); it != block_table->rend(); ++it) free_.push_back(*it);
  block_table->clear();
}

}  // namespace soartune::engine
