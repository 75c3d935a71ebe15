// InfLLM-v2 sparse attention (MiniCPM-SALA's softmax layers) over the paged KV cache of one layer, for decode
// steps and prefill chunks alike. The math, step by step, is kernels/sparse_attention_ref.h's (the CPU twin,
// which is also the CPU engine's selection); queries at positions p with p + 1 < dense_len, or whose
// selection would keep every block, attend densely.
//
// Inputs as kernels/attention_prefill.cuh: q [total_q][n_heads][head_dim] (act dtype), sequence b owning
// tokens q_offsets[b] .. q_offsets[b+1]-1 at positions prefix_lens[b] + j; the chunk's own K/V already in the
// cache; out same shape. A decode step is the case q_len = 1 (q_offsets = 0, 1, 2, ..., prefix_lens = the
// sequences' lengths before the step).
//
// Compressed keys: the caller owns ck, fp32 [slots][n_kv_heads][ck_capacity][head_dim]; sequence b uses slot
// ck_slots[b]. sparse_attention_run first appends the windows the chunk completes (windows
// compressed(prefix_lens[b]) .. compressed(prefix_lens[b] + q_len) - 1, at most q_len / kernel_stride + 1 of
// them; a decode step adds at most one), so a slot holds the windows of everything its sequence has cached;
// a fresh sequence (prefix 0) needs no reset. fp32 because the selection compares sums of probabilities and
// the CPU twin keeps them in fp32: the mean of 32 bf16 keys is kept exactly as the twin computes it (keys
// summed in order, then times 1 / kernel_size), so the two see the same compressed keys bit for bit.
//
// Kernels (one stream, no host sync, capturable: nothing but the host bounds below comes from the host):
// Query tokens run along grid x (up to 2^31 - 1 of them: a prefill step of any max_prefill_tokens fits).
//   compress   grid (max new windows, n_kv_heads, batch), head_dim threads: the new compressed keys.
//   scores     grid (total_q, n_kv_heads, ck chunks of 64), twice: pass 1 writes per chunk and query head the
//              max and sum of exp of q . ck / sqrt(d); pass 2 recomputes the logits and writes the group's
//              summed probabilities [total_q][n_kv][ck_max] to the workspace. fp32 SIMT, as the twin.
//   select     grid (total_q, n_kv_heads): max-pooled block scores in shared memory, forced blocks +inf, the
//              keep() best by rank (a strict order: higher score, then lower block), ascending block list;
//              the keep()-th best score found by a radix select (4 passes of 8 bits), O(blocks) a pass.
//   attend     grid (total_q, n_kv_heads * ceil(group / 16), splits), 4 warps: the group's query heads are the
//              16 rows of one mma.sync m16n8k16 tile (bf16 caches in bf16, fp16 and fp8 in fp16), the
//              selected blocks' tokens in tiles of 64 through shared memory (double-buffered cp.async), each
//              warp 16 tokens of a tile with its own online softmax, merged in the CTA; with splits > 1 the
//              tiles are divided between CTAs whose partials a combine kernel merges.
// Workspace: SparseAttentionPlan::workspace_bytes (the summed scores dominate: total_q * n_kv * ck_max * 4).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/attention_paged.h"
#include "kernels/sparse_attention_ref.h"

namespace soartune::kernels {

struct SparseAttentionArgs {
  const void* q = nullptr;               // device
  void* out = nullptr;                   // device
  const void* k_cache = nullptr;         // device, one layer
  const void* v_cache = nullptr;         // device, one layer
  const int32_t* block_table = nullptr;  // device [batch][block_table_stride]
  const int32_t* q_offsets = nullptr;    // device [batch + 1]
  const int32_t* prefix_lens = nullptr;  // device [batch]
  float* ck = nullptr;                   // device fp32 [slots][n_kv_heads][ck_capacity][head_dim]
  const int32_t* ck_slots = nullptr;     // device [batch]: each sequence's slot of ck
  int ck_capacity = 0;                   // compressed keys a slot holds: >= sparse_compressed_keys(max_context)
  int batch = 0;
  int total_q = 0;                       // host upper bound of q_offsets[batch] (grid size)
  int max_q_len = 0;                     // host upper bound of q_offsets[b+1] - q_offsets[b]
  int max_context = 0;                   // host upper bound of prefix_lens[b] + q_len_b
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;                      // 64 or 128
  int page_size = 0;                     // 1..1024
  int block_table_stride = 0;
  int64_t q_stride = 0;                  // 0 = n_heads * head_dim
  int64_t out_stride = 0;                // 0 = n_heads * head_dim
  KvCacheDtype kv_dtype = KvCacheDtype::kBf16;
  ActDtype act_dtype = ActDtype::kBf16;
  float softmax_scale = 0.f;             // 0 = 1 / sqrt(head_dim); the selection always uses 1 / sqrt(head_dim)
  float k_scale = 1.f;
  float v_scale = 1.f;
  SparseParams sp;                       // block_size a multiple of 64 and of kernel_stride
};

struct SparseAttentionPlan {
  int ck_max = 0;           // sparse_compressed_keys(max_context)
  int ck_chunks = 0;        // ceil(ck_max / 64)
  int max_blocks = 0;       // sparse_max_blocks(max_context)
  int max_selected = 0;     // longest block list: min(max_blocks, max(keep, blocks below dense_len))
  int max_new_windows = 0;  // max_q_len / kernel_stride + 1
  int head_tiles = 0;       // ceil(group / 16)
  int splits = 1;           // attend CTAs per (token, KV head, head tile)
  // Workspace layout (byte offsets, 256-aligned).
  size_t partial_off = 0;   // fp32 [total_q][n_kv][ck_chunks][group][2]  (max, sum of exp)
  size_t summed_off = 0;    // fp32 [total_q][n_kv][ck_max]
  size_t selected_off = 0;  // int32 [total_q][n_kv][max_selected]
  size_t counts_off = 0;    // int32 [total_q][n_kv]
  size_t attn_off = 0;      // fp32 [total_q][n_kv][head_tiles][splits][16][head_dim + 2]  (o, m, l), splits > 1
  size_t workspace_bytes = 0;
};

// "" when implementable, else a message naming the field and the allowed values.
std::string sparse_attention_can_implement(const SparseAttentionArgs& args);

// Fills *plan for args' host bounds; splits 0 chooses (enough CTAs for two per SM, at least 2 tiles a split).
std::string sparse_attention_plan(const SparseAttentionArgs& args, int sm_count, int splits, SparseAttentionPlan* plan);

// Compression, selection and attention, launches only. workspace: plan.workspace_bytes of device memory,
// 256-byte aligned. After the call the workspace holds each token's blocks (selected_off, counts_off) until
// the next call. Returns the launch error, if any.
// stages: a mask of the kernels to launch (the timing program times them apart; a layer runs them all, in
// order, since each reads what the one before wrote).
enum SparseStage : int { kSparseCompress = 1, kSparseScores = 2, kSparseSelect = 4, kSparseAttend = 8, kSparseAll = 15 };
cudaError_t sparse_attention_run(const SparseAttentionArgs& args, const SparseAttentionPlan& plan, void* workspace,
                                 cudaStream_t stream, int stages = kSparseAll);

}  // namespace soartune::kernels
