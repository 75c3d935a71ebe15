#include "daemon/grpc_status.h"

namespace soartune::daemon {

grpc::Status to_grpc(const soartune::Status& s) {
  using soartune::Code;
  switch (s.code) {
    case Code::kOk: return grpc::Status::OK;
    case Code::kInvalidArgument: return {grpc::StatusCode::INVALID_ARGUMENT, s.message};
    case Code::kNotFound: return {grpc::StatusCode::NOT_FOUND, s.message};
    case Code::kFailedPrecondition: return {grpc::StatusCode::FAILED_PRECONDITION, s.message};
    case Code::kResourceExhausted: return {grpc::StatusCode::RESOURCE_EXHAUSTED, s.message};
    case Code::kInternal: return {grpc::StatusCode::INTERNAL, s.message};
    case Code::kPermissionDenied: return {grpc::StatusCode::PERMISSION_DENIED, s.message};
  }
  return {grpc::StatusCode::UNKNOWN, s.message};
}

}  // namespace soartune::daemon
