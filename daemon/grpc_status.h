// The one place where the core's soartune::Status becomes a grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include "core/status.h"

namespace soartune::daemon {

grpc::Status to_grpc(const soartune::Status& s);

}  // namespace soartune::daemon
