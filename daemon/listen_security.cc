#include "daemon/listen_security.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <grpcpp/security/server_credentials.h>

#include "core/bearer_token.h"

namespace soartune::daemon {

namespace {

Result<std::string> read_secret(const std::string& path, const std::string& field) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Invalid(field + ": cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.empty()) return Status::Invalid(field + ": " + path + " is empty");
  return text;
}

// "host:port", "[v6]:port" or "unix:path" -> the host part.
std::string listen_host(const std::string& listen) {
  if (listen.rfind("unix:", 0) == 0 || listen.rfind("unix-abstract:", 0) == 0) return "unix";
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

bool is_loopback_listen(const std::string& listen) {
  const std::string host = listen_host(listen);
  if (host == "unix" || host == "localhost" || host == "::1") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
}

bool constant_time_equal(const std::string& given, const std::string& expected) {
  unsigned char diff = given.size() != expected.size() ? 1 : 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(g ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

grpc::Status BearerTokenProcessor::Process(const InputMetadata& auth_metadata, grpc::AuthContext*,
                                           OutputMetadata* consumed_auth_metadata, OutputMetadata*) {
  auto it = auth_metadata.find("authorization");
  if (it == auth_metadata.end())
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no bearer token: pass --token-file or set SOARTUNE_TOKEN");
  const std::string value(it->second.data(), it->second.size());
  const std::string prefix = "Bearer ";
  if (value.rfind(prefix, 0) != 0 || !constant_time_equal(value.substr(prefix.size()), token_))
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong bearer token");
  consumed_auth_metadata->insert({"authorization", value});
  return grpc::Status::OK;
}

Result<ListenPolicy> resolve_listen_policy(const std::string& field, const std::string& listen,
                                           const ListenSecurity& s) {
  ListenPolicy out;
  out.field = field;
  out.listen = listen;
  Result<std::string> read_token = read_bearer_token(s.token_file, "token_file");
  if (!read_token.ok()) return read_token.status();
  const std::string token = read_token.value();
  const bool has_cert = !s.tls_cert.empty(), has_key = !s.tls_key.empty();
  if (has_cert != has_key) return Status::Invalid(has_cert ? "tls_key: required with tls_cert" : "tls_cert: required with tls_key");
  if (!s.tls_client_ca.empty() && !has_cert) return Status::Invalid("tls_client_ca: needs tls_cert and tls_key");
  if (!token.empty() && !has_cert)
    return Status::Invalid("token: a bearer token needs TLS (tls_cert and tls_key), else it travels in clear");

  if (!is_loopback_listen(listen) && (!has_cert || token.empty())) {
    std::vector<std::string> missing;
    if (!has_cert) missing.push_back("tls_cert and tls_key (--tls-cert, --tls-key)");
    if (token.empty()) missing.push_back(std::string("a bearer token (--token-file or ") + kTokenEnv + ")");
    std::string what;
    for (size_t i = 0; i < missing.size(); ++i) what += (i ? "; " : "") + missing[i];
    if (!s.insecure_listen_anywhere)
      return Status::Invalid(field + ": " + listen + " is not a loopback address, so it needs " + what +
                             "; or --insecure-listen-anywhere to serve it unprotected");
    const bool grpc = field == "listen";
    out.warnings.push_back(std::string(grpc ? "listening on " : "dashboard (http_listen) on ") + listen +
                           " (not loopback) without " + what + " (--insecure-listen-anywhere): anyone who reaches it can " +
                           (grpc ? "submit jobs and read results" : "read every job and trial"));
  }
  if (!has_cert) return out;
  Result<std::string> cert = read_secret(s.tls_cert, "tls_cert");
  if (!cert.ok()) return cert.status();
  Result<std::string> key = read_secret(s.tls_key, "tls_key");
  if (!key.ok()) return key.status();
  out.tls_cert = s.tls_cert;
  out.tls_key = s.tls_key;
  out.cert_pem = cert.value();
  out.key_pem = key.value();
  if (!s.tls_client_ca.empty()) {
    Result<std::string> ca = read_secret(s.tls_client_ca, "tls_client_ca");
    if (!ca.ok()) return ca.status();
    out.tls_client_ca = s.tls_client_ca;
    out.client_ca_pem = ca.value();
  }
  out.token = token;
  return out;
}

Result<ServerSecurity> make_server_security(const std::string& listen, const ListenSecurity& s) {
  Result<ListenPolicy> policy = resolve_listen_policy("listen", listen, s);
  if (!policy.ok()) return policy.status();
  const ListenPolicy& p = policy.value();
  ServerSecurity out;
  out.warnings = p.warnings;
  if (!p.tls()) {
    out.credentials = grpc::InsecureServerCredentials();
    return out;
  }
  grpc::SslServerCredentialsOptions opts(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  pair.cert_chain = p.cert_pem;
  pair.private_key = p.key_pem;
  opts.pem_key_cert_pairs.push_back(std::move(pair));
  if (!p.client_ca_pem.empty()) {
    opts.pem_root_certs = p.client_ca_pem;
    opts.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  out.credentials = grpc::SslServerCredentials(opts);
  out.tls = true;
  if (!p.token.empty()) {
    out.credentials->SetAuthMetadataProcessor(std::make_shared<BearerTokenProcessor>(p.token));
    out.token = true;
  }
  return out;
}

}  // namespace soartune::daemon
