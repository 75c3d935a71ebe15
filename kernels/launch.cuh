// Kernel launch with programmatic dependent launch (PDL, sm_90+): a decode step is ~400 short kernels in a
// row, and without PDL each one starts only after the previous has drained and its launch has been processed.
// With PDL the next kernel's CTAs become resident while the previous one finishes; they may prefetch what no
// earlier kernel writes (weights) and must call pdl_wait() before touching anything else.
//
// Contract for a kernel launched with launch(): call pdl_wait() before the first read of an activation or the
// first global write (it returns once every earlier kernel of the stream has completed and its writes are
// visible), and pdl_launch_dependents() as early as it likes (it only lets the next kernel be scheduled).
// Both are no-ops on older GPUs. PDL is always allowed: measured on the H200 (docs/perf-log, runs 7-9, the
// same binary with and without) it makes every decode step 0.1-0.23 ms faster, at context 512 and at 32k.
// (With an earlier decode-attention kernel it slowed the 32k steps, run 6; that kernel is gone.)
//
// Kernels that only read what no earlier kernel writes before their wait (RMSNorm, decode attention and its
// split combine) call pdl_launch_dependents() at their start, and decode attention asks for its first KV
// slices before its wait: -1% bf16 b8 and -2% int4 g32 b8 decode, -0.5% or less at b1 (docs/perf-log run 38,
// against letting dependents in only after the wait). A dependent let in early still waits for this kernel's
// completion before it reads what this kernel writes (pdl_wait() returns only once the whole chain before it
// has completed), so this moves only when CTAs become resident and start their own prefetches, never results.
// That chain holds only while every kernel launched this way waits in at least one CTA before its grid ends: a
// grid that ends without a wait may complete before its own predecessor, and its successor's wait covers that
// grid alone. An early return before the wait must therefore not be taken by every CTA of a launch.
#pragma once

#include <cuda_runtime.h>

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

// kernel<<<grid, block, smem, stream>>>(args...), allowing PDL; returns the launch's error.
template <typename... KernelParams, typename... Args>
cudaError_t launch(void (*kernel)(KernelParams...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
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
