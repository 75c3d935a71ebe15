// The dashboard's HTTP server beside the gRPC one: the static pages (built from daemon/web/ into a web
// directory installed beside soartuned), the read-only JSON API (daemon/http_api.h) and a job's live events as
// server-sent events (GET /api/jobs/<id>/events, one `data:` line per pb::JobEvent in the API's JSON).
//
// It has neither TLS nor a token yet, so it listens on loopback only; any other host is refused.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"
#include "daemon/http_api.h"

namespace httplib {
class Server;
}

namespace soartune::daemon {

// Whether `host` (from HOST:PORT) names the loopback interface: 127.0.0.0/8, ::1, localhost.
bool is_loopback_host(const std::string& host);

class DashboardServer {
 public:
  DashboardServer(TunerService& service, std::string web_dir);
  ~DashboardServer();

  // Binds `listen` (HOST:PORT; port 0 picks a free one) and serves on a thread of its own; the bound port.
  soartune::Result<int> start(const std::string& listen);
  // Stops accepting and ends open event streams.
  void stop();

 private:
  HttpApi api_;
  std::string web_dir_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
};

}  // namespace soartune::daemon
