#include "daemon/rpc_error_messages.h"

#include <string>

namespace soartune::daemon {

namespace {

class ErrorMessageInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit ErrorMessageInterceptor(grpc::experimental::ServerRpcInfo* info) : method_(info->method()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* batch) override {
    using grpc::experimental::InterceptionHookPoints;
    // A request gRPC could not deserialize reaches this hook as a null message (the handler never runs).
    if (batch->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) && batch->GetRecvMessage() == nullptr)
      unparsable_ = true;
    if (batch->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status s = batch->GetSendStatus();
      if (!s.ok() && s.error_message().empty()) {
        if (unparsable_)
          batch->ModifySendStatus(grpc::Status(
              grpc::StatusCode::INVALID_ARGUMENT,
              "request: not a valid request message for " + method_ +
                  " (every string field must be valid UTF-8; the bytes must be the method's protobuf message)"));
        else
          batch->ModifySendStatus(grpc::Status(s.error_code(), method_ + ": failed with gRPC status code " +
                                                                   std::to_string(static_cast<int>(s.error_code())) +
                                                                   " and no further detail"));
      }
    }
    batch->Proceed();
  }

 private:
  std::string method_;
  bool unparsable_ = false;
};

class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new ErrorMessageInterceptor(info);
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> make_rpc_error_message_interceptor() {
  return std::make_unique<Factory>();
}

}  // namespace soartune::daemon
