#include "daemon/http_access.h"

#include <sys/random.h>

#include <algorithm>
#include <cstdio>

#include "daemon/listen_security.h"

namespace soartune::daemon {

namespace {

// 256 bits from the kernel's random source, as hex.
std::optional<std::string> random_session_id() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n <= 0) return std::nullopt;
    got += static_cast<size_t>(n);
  }
  std::string hex;
  char b[3];
  for (unsigned char c : bytes) {
    std::snprintf(b, sizeof b, "%02x", c);
    hex += b;
  }
  return hex;
}

}  // namespace

std::string cookie_value(const std::string& header, const std::string& name) {
  size_t i = 0;
  while (i < header.size()) {
    size_t end = header.find(';', i);
    if (end == std::string::npos) end = header.size();
    std::string part = header.substr(i, end - i);
    size_t a = part.find_first_not_of(' ');
    if (a != std::string::npos) {
      part = part.substr(a);
      if (part.size() > name.size() && part.compare(0, name.size(), name) == 0 && part[name.size()] == '=')
        return part.substr(name.size() + 1);
    }
    i = end + 1;
  }
  return "";
}

bool HttpAccess::allows(const std::string& authorization, const std::string& cookie) {
  if (token_.empty()) return true;
  const std::string prefix = "Bearer ";
  if (authorization.rfind(prefix, 0) == 0) return constant_time_equal(authorization.substr(prefix.size()), token_);
  const std::string session = cookie_value(cookie, kCookie);
  return !session.empty() && valid_session(session);
}

bool HttpAccess::valid_session(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(sessions_, [&](const auto& s) { return s.second <= now; });
  // Every held id is compared in full, so the time taken says nothing about how much of one matched.
  bool found = false;
  for (const auto& [held, expiry] : sessions_) found |= constant_time_equal(id, held);
  return found;
}

std::optional<std::string> HttpAccess::sign_in(const std::string& given) {
  if (token_.empty() || !constant_time_equal(given, token_)) return std::nullopt;
  std::optional<std::string> id = random_session_id();
  if (!id) return std::nullopt;
  std::lock_guard<std::mutex> l(mu_);
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(sessions_, [&](const auto& s) { return s.second <= now; });
  if (sessions_.size() >= kMaxSessions) {
    auto oldest = std::min_element(sessions_.begin(), sessions_.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; });
    sessions_.erase(oldest);
  }
  sessions_[*id] = now + kSessionLifetime;
  const long seconds = std::chrono::duration_cast<std::chrono::seconds>(kSessionLifetime).count();
  return std::string(kCookie) + "=" + *id + "; Path=/; Max-Age=" + std::to_string(seconds) +
         "; HttpOnly; Secure; SameSite=Strict";
}

}  // namespace soartune::daemon
