// The one place where the core's search::Status becomes a grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include "search/status.h"

namespace soartune::daemon {

grpc::Status to_grpc(const search::Status& s);

}  // namespace soartune::daemon
