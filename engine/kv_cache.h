// The logical side of the paged KV cache: a pool of fixed-size pages and their allocation to sequences.
// The physical pages (K and V per layer, in kv_cache_dtype) belong to the backend; a sequence's block
// table is the ordered list of page indices it owns, and position p of the sequence lives in page
// block_table[p / page_size], row p % page_size.
#pragma once

#include <cstdint>
#include <vector>

namespace soartune::engine {

inline int pages_for(int tokens, int page_size) { return (tokens + page_size - 1) / page_size; }

class PageAllocator {
 public:
  explicit PageAllocator(int num_pages);
  int total_pages() const { return total_; }
  int free_pages() const { return static_cast<int>(free_.size()); }
  // Appends n pages to *block_table. Out of pages: returns false and takes nothing.
  bool allocate(int n, std::vector<int32_t>* block_table);
  // Returns every page of *block_table to the pool and clears it.
  void release(std::vector<int32_t>* block_table);

 private:
  int total_ = 0;
  std::vector<int32_t> free_;   // a stack; lowest indices handed out first
};

}  // namespace soartune::engine
