// Every RPC error carries a message. gRPC answers a request it cannot parse (a string field that is not UTF-8,
// bytes that are not the request message) before any handler runs, with INTERNAL and an empty message; this
// server interceptor turns that into INVALID_ARGUMENT saying what was wrong, and gives any other error that
// reaches the wire without a message one naming the method and the code.
#pragma once

#include <memory>

#include <grpcpp/support/server_interceptor.h>

namespace soartune::daemon {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> make_rpc_error_message_interceptor();

}  // namespace soartune::daemon
