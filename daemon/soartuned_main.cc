// soartuned: the tuning daemon. Settings come from --config (YAML) with flags on top.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/daemon_config.h"
#include "daemon/http_server.h"
#include "daemon/job_manager.h"
#include "daemon/request_limits.h"
#include "daemon/rpc_error_messages.h"
#include "daemon/store.h"
#include "daemon/tuner_service.h"

namespace {

std::string self_exe(const char* argv0) {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(argv0) : p.string();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace soartune::daemon;
  CLI::App app{"soartuned: the soartune tuning daemon (gRPC service soartune.v1.Tuner)"};
  std::string http_listen, http_port_file, web_dir;
  std::string config_path, listen, database, worker, workloads_dir, work_dir, log_level, port_file;
  int port = -1, parallel = 0;
  int64_t worker_memory_limit_mb = -1;
  double timeout = 0;
  std::vector<std::string> devices, data_roots;
  std::string tls_cert, tls_key, tls_client_ca, token_file;
  bool insecure_listen_anywhere = false;
  app.add_option("--config", config_path, "daemon config YAML (configs/daemon.yaml)");
  app.add_option("--listen", listen, "listen address host:port (default 127.0.0.1:50051; port 0 picks a free port)");
  app.add_option("--port", port, "listen port on the configured host (0: pick a free port)");
  app.add_option("--port-file", port_file, "write the bound port to this file once listening");
  app.add_option("--http-listen", http_listen,
                 "dashboard address host:port (default 127.0.0.1:8700; port 0 picks one; off: none); off loopback "
                 "it needs TLS and the token, as --listen does");
  app.add_option("--http-port-file", http_port_file, "write the dashboard's bound port to this file once listening");
  app.add_option("--web-dir", web_dir, "the dashboard's static files (default: web/ beside soartuned)");
  app.add_option("--database", database, "SQLite database path");
  app.add_option("--worker", worker, "soartune-worker path (default: beside soartuned)");
  app.add_option("--workloads-dir", workloads_dir, "named workloads (default: workloads/ beside the config)");
  app.add_option("--work-dir", work_dir, "trial files and reference outputs (default: <database>.work)");
  app.add_option("--parallel-trials", parallel, "most trials at once (never more than the devices)");
  app.add_option("--devices", devices, "devices, one trial each at a time: cpu, cuda:0, ...");
  app.add_option("--trial-timeout-s", timeout, "default per-trial timeout, seconds");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical, off");
  app.add_option("--data-root", data_roots,
                 "read models, accuracy sets and workloads only under DIR (repeatable; default: the working "
                 "directory and the config's directory)");
  app.add_option("--worker-memory-limit-mb", worker_memory_limit_mb,
                 "address-space cap of each CPU worker, MiB (0: 80% of the machine's memory)");
  app.add_option("--tls-cert", tls_cert, "PEM server certificate chain (TLS)");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", tls_client_ca, "PEM CA bundle: clients must present a certificate it signed");
  app.add_option("--token-file", token_file, "file holding the bearer token clients must send (else $SOARTUNE_TOKEN)");
  app.add_flag("--insecure-listen-anywhere", insecure_listen_anywhere,
               "serve a non-loopback address without TLS and token (warned in the log and in job status)");
  CLI11_PARSE(app, argc, argv);

  auto logger = spdlog::stderr_color_mt("soartuned");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");

  DaemonConfig cfg;
  if (!config_path.empty()) {
    if (auto s = load_daemon_config(config_path, cfg); !s.ok()) {
      spdlog::error("{}", s.message);
      return 2;
    }
  }
  if (!listen.empty()) cfg.listen = listen;
  if (port >= 0) cfg.listen = cfg.listen.substr(0, cfg.listen.rfind(':')) + ":" + std::to_string(port);
  if (!port_file.empty()) cfg.port_file = port_file;
  if (!http_listen.empty()) {
    cfg.http_listen = http_listen;
    cfg.http_listen_set = true;
  }
  if (!http_port_file.empty()) cfg.http_port_file = http_port_file;
  if (!web_dir.empty()) cfg.web_dir = web_dir;
  if (!database.empty()) cfg.database = database;
  if (!worker.empty()) cfg.worker = worker;
  if (!workloads_dir.empty()) cfg.workloads_dir = workloads_dir;
  if (!work_dir.empty()) cfg.work_dir = work_dir;
  if (parallel > 0) cfg.parallel_trials = parallel;
  if (!devices.empty()) cfg.devices = devices;
  if (timeout > 0) cfg.trial_timeout_s = timeout;
  if (!log_level.empty()) cfg.log_level = log_level;
  if (!data_roots.empty()) cfg.data_roots = data_roots;
  if (worker_memory_limit_mb >= 0) cfg.worker_memory_limit_mb = worker_memory_limit_mb;
  if (!tls_cert.empty()) cfg.security.tls_cert = tls_cert;
  if (!tls_key.empty()) cfg.security.tls_key = tls_key;
  if (!tls_client_ca.empty()) cfg.security.tls_client_ca = tls_client_ca;
  if (!token_file.empty()) cfg.security.token_file = token_file;
  if (insecure_listen_anywhere) cfg.security.insecure_listen_anywhere = true;
  if (auto s = finish_daemon_config(cfg, self_exe(argv[0]), config_path); !s.ok()) {
    spdlog::error("{}", s.message);
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  Result<ServerSecurity> security = make_server_security(cfg.listen, cfg.security);
  if (!security.ok()) {
    spdlog::error("{}", security.status().message);
    return 2;
  }
  // The dashboard follows the same rule, on its own address; its warnings join gRPC's in every job's status.
  std::vector<std::string> daemon_warnings = security.value().warnings;
  std::optional<ListenPolicy> http_policy;
  if (cfg.http_listen != "off") {
    Result<ListenPolicy> p = resolve_listen_policy("http_listen", cfg.http_listen, cfg.security);
    if (!p.ok()) {
      spdlog::error("{}", p.status().message);
      return 2;
    }
    http_policy = p.value();
    daemon_warnings.insert(daemon_warnings.end(), p.value().warnings.begin(), p.value().warnings.end());
  }
  for (const std::string& w : daemon_warnings) spdlog::warn("{}", w);

  // SIGTERM / SIGINT are taken by one thread with sigwait; every other thread (gRPC's included) blocks them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto store = Store::open(cfg.database);
  if (!store.ok()) {
    spdlog::error("database {}: {}", cfg.database, store.status().message);
    return 1;
  }
  JobManager jobs(cfg, std::move(store).value());
  TunerService service(jobs, daemon_warnings);

  grpc::EnableDefaultHealthCheckService(true);
#ifdef SOARTUNE_HAVE_GRPC_REFLECTION
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
#endif
  grpc::ServerBuilder builder;
  int bound_port = 0;
  // Without this gRPC clones the listening socket per poller with SO_REUSEPORT, and for port 0 each clone
  // binds a port of its own: a second, unreported port would serve the API. It also keeps another process
  // from binding our port beside us.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxRequestBytes));
  builder.AddListeningPort(cfg.listen, security.value().credentials, &bound_port);
  builder.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(make_rpc_error_message_interceptor());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    spdlog::error("cannot listen on {}", cfg.listen);
    return 1;
  }
  std::string host = cfg.listen.substr(0, cfg.listen.rfind(':'));
  spdlog::info("soartuned {} ({}) listening on {}:{} ({}{}); database {}, worker {}, devices {}, parallel trials {}; data roots {}",
               SOARTUNE_VERSION, SOARTUNE_GIT_COMMIT, host, bound_port,
               security.value().tls ? (cfg.security.tls_client_ca.empty() ? "TLS" : "mutual TLS") : "no TLS",
               security.value().token ? ", bearer token" : "", cfg.database, cfg.worker,
               fmt::join(cfg.devices, ","), cfg.parallel_trials, fmt::join(cfg.data_roots, ", "));
  if (!cfg.port_file.empty()) {
    std::string tmp = cfg.port_file + ".tmp";
    std::ofstream(tmp) << bound_port << "\n";
    std::filesystem::rename(tmp, cfg.port_file);
  }
  DashboardServer dashboard(service, cfg.web_dir);
  if (http_policy) {
    soartune::Result<int> http_port = dashboard.start(*http_policy);
    if (!http_port.ok() && cfg.http_listen_set) {
      spdlog::error("{}", http_port.status().message);
      server->Shutdown();
      return 2;
    }
    if (!http_port.ok()) {
      spdlog::warn("no dashboard: {}", http_port.status().message);
    } else {
      std::string http_host = cfg.http_listen.substr(0, cfg.http_listen.rfind(':'));
      spdlog::info("dashboard on {}://{}:{}/ ({}; static files {})", http_policy->tls() ? "https" : "http", http_host,
                   http_port.value(), http_policy->token.empty() ? "no token" : "bearer token or signed-in session",
                   cfg.web_dir);
      if (!cfg.http_port_file.empty()) {
        std::string tmp = cfg.http_port_file + ".tmp";
        std::ofstream(tmp) << http_port.value() << "\n";
        std::filesystem::rename(tmp, cfg.http_port_file);
      }
    }
  }
  if (auto s = jobs.start(); !s.ok()) {
    spdlog::error("recovery failed: {}", s.message);
    server->Shutdown();
    return 1;
  }

  int sig = 0;
  sigwait(&sigs, &sig);
  spdlog::info("{} received: shutting down (running trials are cancelled; their jobs resume on restart)",
               sig == SIGTERM ? "SIGTERM" : "SIGINT");
  // Stop accepting; give open calls (watch streams) a moment to see the shutdown and end.
  std::thread stopper([&] { jobs.shutdown(); });
  dashboard.stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  stopper.join();
  spdlog::info("soartuned stopped");
  return 0;
}
