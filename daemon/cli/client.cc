#include "daemon/cli/client.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/bearer_token.h"
#include "core/grpc_code_name.h"

namespace soartune::cli {

namespace {

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const GlobalOptions& o, std::string* error) {
  Result<std::string> read_token = read_bearer_token(o.token_file, "--token-file");
  if (!read_token.ok()) {
    *error = read_token.status().message;
    return nullptr;
  }
  const std::string token = read_token.value();
  if (o.tls_ca.empty()) {
    if (!o.tls_cert.empty() || !o.tls_key.empty()) {
      *error = "--tls-cert/--tls-key: need --tls-ca (the CA that signed the daemon's certificate)";
      return nullptr;
    }
    if (!o.token_file.empty()) {
      *error = "--token-file: a bearer token needs TLS (--tls-ca), else it would travel in clear";
      return nullptr;
    }
    return grpc::InsecureChannelCredentials();   // a $SOARTUNE_TOKEN is never sent in clear
  }
  grpc::SslCredentialsOptions ssl;
  if (!read_file(o.tls_ca, &ssl.pem_root_certs)) {
    *error = "--tls-ca: cannot read " + o.tls_ca;
    return nullptr;
  }
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    *error = o.tls_cert.empty() ? "--tls-key: needs --tls-cert" : "--tls-cert: needs --tls-key";
    return nullptr;
  }
  if (!o.tls_cert.empty() && (!read_file(o.tls_cert, &ssl.pem_cert_chain) || !read_file(o.tls_key, &ssl.pem_private_key))) {
    *error = "--tls-cert/--tls-key: cannot read " + o.tls_cert + " or " + o.tls_key;
    return nullptr;
  }
  auto creds = grpc::SslCredentials(ssl);
  if (token.empty()) return creds;
  return grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(token));
}

Client::Client(const GlobalOptions& options, std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(options),
      channel_(grpc::CreateChannel(options.addr, std::move(credentials))),
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
  std::cerr << "error: " << grpc_code_name(static_cast<int>(status.error_code())) << ": " << message << "\n";
  return exit_code_for(status.error_code());
}

int fail(int code, const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return code;
}

}  // namespace soartune::cli
