#include "daemon/cli/client.h"

#include <iostream>

namespace soartune::cli {

Client::Client(const GlobalOptions& options)
    : options_(options),
      channel_(grpc::CreateChannel(options.addr, grpc::InsecureChannelCredentials())),
      stub_(v1::Tuner::NewStub(channel_)) {}

std::unique_ptr<grpc::ClientContext> Client::context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  const auto budget = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(options_.timeout_s > 0 ? options_.timeout_s : 30.0));
  ctx->set_deadline(std::chrono::system_clock::now() + budget);
  return ctx;
}

std::unique_ptr<grpc::ClientContext> Client::patient_context() const {
  auto ctx = context();
  ctx->set_wait_for_ready(true);
  return ctx;
}

const char* code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

int exit_code_for(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return kExitOk;
    case grpc::StatusCode::INVALID_ARGUMENT: return kExitUsage;
    case grpc::StatusCode::NOT_FOUND: return kExitNotFound;
    case grpc::StatusCode::UNAVAILABLE: return kExitUnavailable;
    case grpc::StatusCode::FAILED_PRECONDITION: return kExitPrecondition;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return kExitExhausted;
    default: return kExitError;
  }
}

int report(const grpc::Status& status, const Client& client) {
  std::string message = status.error_message();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    message = "cannot reach soartuned at " + client.addr() + (message.empty() ? "" : " (" + message + ")");
  }
  std::cerr << "error: " << code_name(status.error_code()) << ": " << message << "\n";
  return exit_code_for(status.error_code());
}

int fail(int code, const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return code;
}

}  // namespace soartune::cli
