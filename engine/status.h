// The engine speaks the core's one error type (search/status.h, header-only).
#pragma once

#include "search/status.h"

namespace soartune::engine {

using Status = search::Status;
using Code = search::Code;
template <typename T>
using Result = search::Result<T>;

}  // namespace soartune::engine
