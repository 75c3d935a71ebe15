// CUDA error checking shared by the kernels' launchers and the CUDA backend: every call is checked and a
// failure names the statement, file and line.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace soartune::kernels {

// "<statement> failed at <file>:<line>: <cuda error name>: <message>"
inline std::string cuda_error_message(cudaError_t e, const char* stmt, const char* file, int line) {
  return std::string(stmt) + " failed at " + file + ":" + std::to_string(line) + ": " + cudaGetErrorName(e) +
         ": " + cudaGetErrorString(e);
}

}  // namespace soartune::kernels

// In functions returning cudaError_t: return the first failure.
#define SOARTUNE_CUDA_RETURN(stmt)            \
  do {                                        \
    cudaError_t soartune_err_ = (stmt);       \
    if (soartune_err_ != cudaSuccess) return soartune_err_; \
  } while (0)
