#include "daemon/http_server.h"

#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
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

// httplib, as Debian builds it, compresses an answer whose content type is on its list (application/json,
// application/javascript, text/*) with brotli at its slowest quality whenever the browser accepts br: 42 s for
// echarts.min.js (1 MB) on the loaded 2-core development machine, 1.1 s with gzip, against 0.05 s sent as it is.
// A content type with a charset is not on that list, so the large answers (the API's pages, the scripts) go
// uncompressed; the small ones (pages, styles) may still be compressed.
constexpr const char* kJson = "application/json; charset=utf-8";
constexpr const char* kJavaScript = "application/javascript; charset=utf-8";

void send(httplib::Response& res, const HttpAnswer& a) {
  res.status = a.status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(a.body, kJson);
}

// A field of a posted form (application/x-www-form-urlencoded), "" when absent.
std::string form_field(const httplib::Request& req, const std::string& name) {
  if (req.has_param(name.c_str())) return req.get_param_value(name.c_str());
  httplib::Params fields;
  httplib::detail::parse_query_text(req.body, fields);
  auto it = fields.find(name);
  return it == fields.end() ? "" : it->second;
}

// Where to send a browser after it signed in: back to the page that sent it there, but only a path of this
// site (no "//host", no scheme), so the sign-in page cannot be used to redirect elsewhere.
std::string local_path_or_root(const std::string& next) {
  const bool local = !next.empty() && next[0] == '/' && (next.size() == 1 || (next[1] != '/' && next[1] != '\\'));
  return local ? next : std::string("/");
}

}  // namespace

DashboardServer::DashboardServer(TunerService& service, std::string web_dir)
    : api_(service), web_dir_(std::move(web_dir)) {}

DashboardServer::~DashboardServer() { stop(); }

Result<int> DashboardServer::start(const ListenPolicy& policy) {
  if (server_) return Status::Precondition("http_listen: the dashboard is already started");
  const std::string& listen = policy.listen;
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
  std::string index = web_dir_ + "/index.html";
  if (!std::filesystem::exists(index))
    return Status::NotFound("web_dir: " + index + " does not exist (the dashboard is built into <build>/bin/web)");
  if (host.front() == '[') host = host.substr(1, host.size() - 2);   // [::1] -> ::1

  if (policy.tls()) {
    // httplib reads the files itself; resolve_listen_policy has read them already, so a failure here is a
    // certificate or key OpenSSL does not take.
    auto ssl = std::make_unique<httplib::SSLServer>(
        policy.tls_cert.c_str(), policy.tls_key.c_str(),
        policy.tls_client_ca.empty() ? nullptr : policy.tls_client_ca.c_str());
    if (!ssl->is_valid())
      return Status::Invalid("tls_cert: " + policy.tls_cert + " and tls_key: " + policy.tls_key +
                             " are not a certificate and its private key OpenSSL accepts (PEM)");
    server_ = std::move(ssl);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  access_ = std::make_unique<HttpAccess>(policy.token);

  httplib::Server& s = *server_;
  if (access_->required()) add_sign_in(s);
  s.new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
  s.set_file_extension_and_mimetype_mapping("js", kJavaScript);
  if (!s.set_mount_point("/static", web_dir_))
    return Status::NotFound("web_dir: " + web_dir_ + " is not a directory");

  // The pages are one document that routes on its path in the browser.
  auto page = [this](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(read_page("index.html"), "text/html; charset=utf-8");
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

std::string DashboardServer::read_page(const std::string& name) const {
  std::ifstream in(web_dir_ + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void DashboardServer::add_sign_in(httplib::Server& s) {
  // Everything but the sign-in page and the static files (our own scripts and styles, nothing of a job) needs
  // the token or a session: the API answers 401, a page sends the browser to sign in and come back.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/signin" || req.path.rfind("/static/", 0) == 0) return httplib::Server::HandlerResponse::Unhandled;
    if (access_->allows(req.get_header_value("Authorization"), req.get_header_value("Cookie")))
      return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("Cache-Control", "no-store");
    if (req.path.rfind("/api/", 0) == 0) {
      res.set_header("WWW-Authenticate", "Bearer");
      send(res, error_answer(grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                          req.has_header("Authorization") || req.has_header("Cookie")
                                              ? "wrong bearer token or expired session"
                                              : "no bearer token: send Authorization: Bearer <token>, or sign in at /signin")));
    } else {
      std::string target = req.path;
      if (!req.params.empty()) target = req.target;
      res.status = 303;
      res.set_header("Location", "/signin?next=" + httplib::detail::encode_query_param(target));
    }
    return httplib::Server::HandlerResponse::Handled;
  });
  s.Get("/signin", [this](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(read_page("signin.html"), "text/html; charset=utf-8");
  });
  s.Post("/signin", [this](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    std::optional<std::string> cookie = access_->sign_in(form_field(req, "token"));
    if (!cookie) {
      std::string page = read_page("signin.html");
      if (size_t at = page.find("data-failed=\"0\""); at != std::string::npos) page[at + 13] = '1';
      res.status = 401;
      res.set_content(page, "text/html; charset=utf-8");
      return;
    }
    res.set_header("Set-Cookie", *cookie);
    res.status = 303;
    res.set_header("Location", local_path_or_root(form_field(req, "next")));
  });
}

void DashboardServer::stop() {
  stopping_ = true;
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace soartune::daemon
