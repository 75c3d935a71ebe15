#include "daemon/http_server.h"

#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace soartune::daemon {

namespace {

// Every open event stream holds one thread, so the pool is larger than httplib's default of 8.
constexpr size_t kHttpThreads = 32;
// A comment line this often on an idle event stream, so that a reader who left is noticed.
constexpr auto kKeepAlive = std::chrono::seconds(10);

std::multimap<std::string, std::string> query_of(const httplib::Request& req) {
  return {req.params.begin(), req.params.end()};
}

void send(httplib::Response& res, const HttpAnswer& a) {
  res.status = a.status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(a.body, "application/json");
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h == "localhost" || h == "::1") return true;
  // 127.0.0.0/8, written as four decimal octets.
  int a, b, c, d;
  char tail;
  if (std::sscanf(h.c_str(), "%d.%d.%d.%d%c", &a, &b, &c, &d, &tail) == 4)
    return a == 127 && b >= 0 && b < 256 && c >= 0 && c < 256 && d >= 0 && d < 256;
  return false;
}

DashboardServer::DashboardServer(TunerService& service, std::string web_dir)
    : api_(service), web_dir_(std::move(web_dir)), server_(std::make_unique<httplib::Server>()) {}

DashboardServer::~DashboardServer() { stop(); }

Result<int> DashboardServer::start(const std::string& listen) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return Status::Invalid("http_listen: '" + listen + "' is not HOST:PORT (e.g. 127.0.0.1:8700; port 0 picks one)");
  std::string host = listen.substr(0, colon), port_text = listen.substr(colon + 1);
  int port = -1;
  try {
    size_t used = 0;
    port = std::stoi(port_text, &used);
    if (used != port_text.size()) port = -1;
  } catch (const std::exception&) {
  }
  if (port < 0 || port > 65535)
    return Status::Invalid("http_listen: port '" + port_text + "' is not 0..65535 (0 picks a free port)");
  if (!is_loopback_host(host))
    return Status::Invalid("http_listen: host '" + host +
                           "' is not loopback; the dashboard has no TLS or token yet, so it listens on 127.0.0.1, "
                           "::1 or localhost only (reach it from elsewhere through an SSH tunnel)");
  std::string index = web_dir_ + "/index.html";
  if (!std::filesystem::exists(index))
    return Status::NotFound("web_dir: " + index + " does not exist (the dashboard is built into <build>/bin/web)");
  if (host.front() == '[') host = host.substr(1, host.size() - 2);   // [::1] -> ::1

  httplib::Server& s = *server_;
  s.new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
  if (!s.set_mount_point("/static", web_dir_))
    return Status::NotFound("web_dir: " + web_dir_ + " is not a directory");

  // The pages are one document that routes on its path in the browser.
  auto page = [this](const httplib::Request&, httplib::Response& res) {
    std::ifstream in(web_dir_ + "/index.html");
    std::stringstream ss;
    ss << in.rdbuf();
    res.set_header("Cache-Control", "no-store");
    res.set_content(ss.str(), "text/html; charset=utf-8");
  };
  s.Get("/", page);
  s.Get(R"(/jobs/[^/]+)", page);
  s.Get(R"(/jobs/[^/]+/trials/[0-9]+)", page);
  s.Get("/compare", page);
  s.Get("/submissions", page);

  s.Get(R"(/api/jobs/([^/]+)/events)", [this](const httplib::Request& req, httplib::Response& res) {
    std::string job_id = req.matches[1];
    // An unknown job is an ordinary error answer, not an empty stream.
    HttpAnswer job = api_.get("/api/jobs/" + job_id, {});
    if (job.status != 200) return send(res, job);
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider("text/event-stream", [this, job_id](size_t, httplib::DataSink& sink) {
      auto last_write = std::chrono::steady_clock::now();
      auto cancelled = [&] {
        if (stopping_.load() || !sink.is_writable()) return true;
        if (std::chrono::steady_clock::now() - last_write > kKeepAlive) {
          static const std::string ping = ": keep-alive\n\n";
          if (!sink.write(ping.data(), ping.size())) return true;
          last_write = std::chrono::steady_clock::now();
        }
        return false;
      };
      auto write = [&](const std::string& json) {
        std::string frame = "data: " + json + "\n\n";
        last_write = std::chrono::steady_clock::now();
        return sink.write(frame.data(), frame.size());
      };
      bool streamed = false;
      HttpAnswer a = api_.events(job_id, cancelled, write, streamed);
      if (!streamed && a.status != 200) {
        std::string frame = "event: error\ndata: " + a.body + "\n\n";
        sink.write(frame.data(), frame.size());
      }
      sink.done();
      return true;
    });
  });
  s.Get(R"(/api/.*)", [this](const httplib::Request& req, httplib::Response& res) {
    send(res, api_.get(req.path, query_of(req)));
  });

  int bound = port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) return Status::Precondition("http_listen: cannot listen on " + listen + " (in use?)");
  thread_ = std::thread([&s] { s.listen_after_bind(); });
  // httplib's stop() does nothing before the accept loop runs, so start() returns only once it does.
  for (int i = 0; i < 5000 && !s.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!s.is_running()) return Status::Internal("http_listen: bound " + listen + " but the server did not start");
  return bound;
}

void DashboardServer::stop() {
  stopping_ = true;
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace soartune::daemon
