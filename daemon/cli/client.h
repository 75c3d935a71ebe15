// The CLI's connection to soartuned: one channel, per-call deadlines, and the one mapping from a failed RPC
// to an "error: <CODE>: <message>" line and an exit code.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "soartune/v1/tuner.grpc.pb.h"

namespace soartune::cli {

namespace v1 = soartune::v1;

// Exit codes of every command.
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,         // any other error; also: the watched job did not succeed
  kExitUsage = 2,         // bad command line, INVALID_ARGUMENT
  kExitNotFound = 3,      // NOT_FOUND
  kExitUnavailable = 4,   // the daemon cannot be reached (UNAVAILABLE)
  kExitPrecondition = 5,  // FAILED_PRECONDITION
  kExitExhausted = 6,     // RESOURCE_EXHAUSTED (daily submission budget spent)
};

struct GlobalOptions {
  std::string addr = "127.0.0.1:50051";
  double timeout_s = 30;   // deadline of each call; for watch, how long to wait for a lost daemon to return
  std::string tls_ca;      // set: talk TLS, trusting this PEM CA bundle
  std::string tls_cert;    // client certificate and key, for a daemon that requires mutual TLS
  std::string tls_key;
  std::string token_file;  // bearer token to send (else $SOARTUNE_TOKEN); needs TLS
};

// The channel credentials for `options`: TLS (and a client certificate, and the bearer token) when asked for,
// else plaintext. Fails with a message naming the option when a file cannot be read or a token lacks TLS.
std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const GlobalOptions& options, std::string* error);

class Client {
 public:
  Client(const GlobalOptions& options, std::shared_ptr<grpc::ChannelCredentials> credentials);

  v1::Tuner::Stub& stub() { return *stub_; }
  const std::string& addr() const { return options_.addr; }
  double timeout_s() const { return options_.timeout_s; }

  // A context whose deadline is --timeout from now.
  std::unique_ptr<grpc::ClientContext> context() const;
  // Same, but waits (up to the deadline) for the channel to connect instead of failing at once.
  std::unique_ptr<grpc::ClientContext> patient_context() const;

 private:
  GlobalOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Tuner::Stub> stub_;
};

int exit_code_for(grpc::StatusCode code);
// Prints "error: <CODE>: <message>" on stderr (naming the address when the daemon is unreachable) and returns
// the exit code for it.
int report(const grpc::Status& status, const Client& client);
// Prints "error: <message>" on stderr and returns `code`.
int fail(int code, const std::string& message);

}  // namespace soartune::cli
