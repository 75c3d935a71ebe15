// Kernel launch with programmatic dependent launch (PDL, sm_90+): a decode step is ~400 short kernels in a
// row, and without PDL each one starts only after the previous has drained and its launch has been processed.
// With PDL the next kernel's CTAs become resident while the previous one finishes; they may prefetch what no
// earlier kernel writes (weights) and must call pdl_wait() before touching anything else.
//
// Contract for a kernel launched with launch(): call pdl_wait() before the first read of an activation or the
// first global write (it returns once every earlier kernel of the stream has completed and its writes are
// visible), and pdl_launch_dependents() as early as it likes (it only lets the next kernel be scheduled).
// Both are no-ops on older GPUs and when the launch did not allow PDL. PDL is on unless SOARTUNE_PDL=0 is in
// the environment (read once): measured on the H200 (docs/perf-log, runs 7-9, same binary with and without)
// it makes every decode step 0.1-0.23 ms faster, at context 512 and at 32k. (With an earlier decode-attention
// kernel it slowed the 32k steps, run 6; that kernel is gone.)
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

namespace soartune::kernels {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

inline bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("SOARTUNE_PDL");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

// Whether the kernels that used to let their dependents in only after their own wait (RMSNorm, decode
// attention and its split combine) do it at their start, and decode attention asks for its first KV slices
// before its wait. On unless SOARTUNE_PDL_EARLY=0 (read once), the switch for the side-by-side in
// docs/perf-log run 38. A dependent let in early still waits for this kernel's completion before it reads
// what this kernel writes (pdl_wait() returns only once the whole chain before it has completed), so this
// moves only when CTAs become resident and start their own prefetches (weights, earlier KV), never results.
inline bool pdl_early() {
  static const bool on = [] {
    const char* v = std::getenv("SOARTUNE_PDL_EARLY");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

// kernel<<<grid, block, smem, stream>>>(args...), allowing PDL; returns the launch's error.
template <typename... KernelParams, typename... Args>
cudaError_t launch(void (*kernel)(KernelParams...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KernelParams>(args)...);
}

}  // namespace soartune::kernels
