// The worker's result: the typed facts of one trial that the worker reports and the daemon stores.
#pragma once

#include <map>
#include <string>

namespace soartune {

// One kernel plan the engine computed when it was built: for an op ("gemv.qkv", "attention.decode", ...) and a
// shape ("6144x4096 bf16 rows 1"), the choices its plan step made (variant, tiles, splits, grid, ...).
struct KernelPlan {
  std::string op;
  std::string shape;
  std::map<std::string, std::string> choice;
};

}  // namespace soartune
