// Who may read the dashboard when the daemon requires a bearer token (ListenPolicy::token): a request carries
// `Authorization: Bearer <token>` (the API's clients), or the session cookie a browser got by posting the
// token to the sign-in page. A browser needs the cookie because EventSource, which carries the live updates,
// cannot send headers. The cookie holds a random session id, never the token; it is HttpOnly (no script reads
// it), Secure (the token rule implies TLS) and SameSite=Strict (no other site's page sends it).
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace soartune::daemon {

class HttpAccess {
 public:
  static constexpr const char* kCookie = "soartune_session";
  static constexpr std::chrono::hours kSessionLifetime{12};
  // Most sessions held at once; the oldest goes when a new one would pass it.
  static constexpr size_t kMaxSessions = 1024;

  // `token` empty: every request is allowed (loopback, or --insecure-listen-anywhere).
  explicit HttpAccess(std::string token) : token_(std::move(token)) {}

  bool required() const { return !token_.empty(); }
  // Whether a request with these header values (empty when absent) may be served.
  bool allows(const std::string& authorization, const std::string& cookie);
  // A sign-in with `given`: the Set-Cookie value of a new session when it is the token, nullopt otherwise.
  std::optional<std::string> sign_in(const std::string& given);

 private:
  bool valid_session(const std::string& id);

  const std::string token_;
  std::mutex mu_;
  std::map<std::string, std::chrono::steady_clock::time_point> sessions_;   // id -> expiry; guarded by mu_
};

// The value of cookie `name` in a Cookie header ("a=1; b=2"), or "" when absent.
std::string cookie_value(const std::string& cookie_header, const std::string& name);

}  // namespace soartune::daemon
