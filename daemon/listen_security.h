// Who may talk to soartuned: TLS (server certificate; a client CA turns on mutual TLS) and a bearer token, both
// through gRPC's own credentials API, and the rule that only a loopback address may be served without them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/server_credentials.h>

#include "core/status.h"

namespace soartune::daemon {

struct ListenSecurity {
  std::string tls_cert;            // PEM server certificate chain
  std::string tls_key;             // PEM private key of tls_cert
  std::string tls_client_ca;       // PEM CA bundle; set: clients must present a certificate it signed (mTLS)
  std::string token_file;          // file holding the bearer token (else the SOARTUNE_TOKEN environment variable)
  bool insecure_listen_anywhere = false;   // serve a non-loopback address without TLS and token (warned about)
};

// True for 127.0.0.0/8, ::1, localhost and unix sockets: addresses no other host can reach.
bool is_loopback_listen(const std::string& listen);

// What one listener (gRPC's `listen`, the dashboard's `http_listen`) must serve with, resolved from the
// settings by the one rule both follow. Fails, naming `field` and what is missing, when the address is not
// loopback and TLS or the token is absent (unless insecure_listen_anywhere), when a token is configured
// without TLS (it would travel in clear), or when a certificate, key or token file cannot be read.
struct ListenPolicy {
  std::string field;                 // the setting errors name: listen, http_listen
  std::string listen;                // the address it was resolved for
  std::string tls_cert, tls_key, tls_client_ca;   // the files; tls_cert empty: no TLS
  std::string cert_pem, key_pem, client_ca_pem;   // their contents
  std::string token;                 // the bearer token every request must carry; empty: none
  std::vector<std::string> warnings; // e.g. serving off loopback unprotected
  bool tls() const { return !tls_cert.empty(); }
};
Result<ListenPolicy> resolve_listen_policy(const std::string& field, const std::string& listen,
                                           const ListenSecurity& settings);

// The credentials to listen with, plus the warnings the daemon shows about itself (in its log and in every
// job's status). Fails, naming what is missing, when `listen` is not loopback and TLS or the token is absent
// (unless insecure_listen_anywhere), when a token is configured without TLS (it would travel in clear), or when
// a certificate, key or token file cannot be read.
struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::vector<std::string> warnings;
  bool tls = false;
  bool token = false;
};
Result<ServerSecurity> make_server_security(const std::string& listen, const ListenSecurity& settings);

// Compares in time that depends on the expected token's length only, never on where the first difference is.
bool constant_time_equal(const std::string& given, const std::string& expected);

// Accepts a call only when its "authorization" metadata is "Bearer <token>"; anything else is UNAUTHENTICATED.
class BearerTokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenProcessor(std::string token) : token_(std::move(token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata, OutputMetadata* response_metadata) override;

 private:
  std::string token_;
};

}  // namespace soartune::daemon
