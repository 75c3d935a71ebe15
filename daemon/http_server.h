// The dashboard's HTTP server beside the gRPC one: the static pages (built from daemon/web/ into a web
// directory installed beside soartuned), the read-only JSON API (daemon/http_api.h) and a job's live events as
// server-sent events (GET /api/jobs/<id>/events, one `data:` line per pb::JobEvent in the API's JSON).
//
// Who may connect follows the same rule as gRPC (listen_security.h): off loopback it needs TLS and the bearer
// token, served here as HTTPS with the daemon's certificate and key; with a token every page and API call
// needs `Authorization: Bearer <token>` or the session cookie of the sign-in page (/signin, http_access.h).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"
#include "daemon/http_access.h"
#include "daemon/http_api.h"
#include "daemon/listen_security.h"

namespace httplib {
class Server;
}

namespace soartune::daemon {

class DashboardServer {
 public:
  DashboardServer(TunerService& service, std::string web_dir);
  ~DashboardServer();

  // Binds policy.listen (HOST:PORT; port 0 picks a free one) and serves on a thread of its own, as the policy
  // says (resolve_listen_policy("http_listen", ...)); the bound port.
  soartune::Result<int> start(const ListenPolicy& policy);
  // Stops accepting and ends open event streams.
  void stop();

 private:
  // The sign-in page and the check every other request passes (with a token only).
  void add_sign_in(httplib::Server& s);
  std::string read_page(const std::string& name) const;

  HttpApi api_;
  std::string web_dir_;
  std::unique_ptr<HttpAccess> access_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
};

}  // namespace soartune::daemon
