// Who may talk to soartuned, end to end: the real daemon and the real CLI over TLS with a bearer token, with
// certificates made here by openssl; the refusal to serve a non-loopback address unprotected; the warning when
// that refusal is overridden; one listening port for port 0; the dashboard's HTTPS with the same token (the
// API's bearer header, the sign-in page's session cookie).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "daemon/http_access.h"
#include "daemon/listen_security.h"
#include "daemon/worker_process.h"
#include "daemon_process.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

using testing::Daemon;
using testing::run;
using testing::TempDir;
using testing::write_file;

// A CA, and a server certificate it signed for 127.0.0.1 / localhost; a client certificate too, for mTLS.
struct Certificates {
  explicit Certificates(const TempDir& dir) : dir_(dir) {
    ok = openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=soartune test CA",
                  "-keyout", file("ca.key"), "-out", file("ca.pem")}) &&
         signed_pair("server", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost") &&
         signed_pair("client", "/CN=soartune client", "extendedKeyUsage=clientAuth");
  }
  std::string file(const std::string& name) const { return dir_.file(name); }
  bool ok = false;

 private:
  bool openssl(std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/openssl");
    ProcessResult r = run(args);
    EXPECT_TRUE(r.exited && r.exit_code == 0) << "openssl failed: " << r.err_tail << r.spawn_error;
    return r.exited && r.exit_code == 0;
  }
  bool signed_pair(const std::string& name, const std::string& subject, const std::string& ext) {
    write_file(file(name + ".ext"), ext + "\n");
    return openssl({"req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", file(name + ".key"), "-out",
                    file(name + ".csr")}) &&
           openssl({"x509", "-req", "-in", file(name + ".csr"), "-CA", file("ca.pem"), "-CAkey", file("ca.key"),
                    "-CAcreateserial", "-days", "2", "-extfile", file(name + ".ext"), "-out", file(name + ".pem")});
  }
  const TempDir& dir_;
};

// The TCP ports `pid` listens on, from /proc: its socket inodes matched against the kernel's listening sockets.
std::set<int> listening_ports(pid_t pid) {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code ec;
    std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      ls >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode))
        ports.insert(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

const char* kJob =
    "name: sec\nmodel: synthetic:tiny\nbackend: cpu\nseed: 1\nbudget: {trials: 1}\ntrial_timeout_s: 120\n"
    "workload: {name: sec, requests: [{name: a, input_len: 8, output_len: 4, count: 1}]}\n"
    "accuracy: {set: synthetic, samples: 2, prompt_len: 8, continuation_len: 4}\n"
    "space:\n  weight_bits: {type: choice, values: [16, 8]}\n";

TEST(ListenSecurity, LoopbackAddressesAreRecognised) {
  for (const char* a : {"127.0.0.1:1", "127.8.9.10:0", "localhost:50051", "[::1]:5", "unix:/tmp/s"})
    EXPECT_TRUE(is_loopback_listen(a)) << a;
  for (const char* a : {"0.0.0.0:1", "[::]:1", "10.0.0.1:5", "example.org:1", "128.0.0.1:1"})
    EXPECT_FALSE(is_loopback_listen(a)) << a;
}

TEST(ListenSecurity, TokenComparisonIsExact) {
  EXPECT_TRUE(constant_time_equal("s3cret", "s3cret"));
  EXPECT_FALSE(constant_time_equal("s3cre", "s3cret"));
  EXPECT_FALSE(constant_time_equal("s3cretX", "s3cret"));
  EXPECT_FALSE(constant_time_equal("S3cret", "s3cret"));
  EXPECT_FALSE(constant_time_equal("", "s3cret"));
}

TEST(ListenSecurity, NonLoopbackWithoutTlsAndTokenExitsNamingWhatIsMissing) {
  TempDir dir;
  Daemon d(dir, {"--listen", "0.0.0.0:0"});
  ASSERT_FALSE(d.start()) << "soartuned served 0.0.0.0 with neither TLS nor a token";
  EXPECT_TRUE(WIFEXITED(d.status) && WEXITSTATUS(d.status) != 0);
  EXPECT_NE(d.log().find("tls_cert and tls_key"), std::string::npos) << d.log();
  EXPECT_NE(d.log().find("bearer token"), std::string::npos) << d.log();
  EXPECT_NE(d.log().find("--insecure-listen-anywhere"), std::string::npos) << d.log();
}

TEST(ListenSecurity, TlsWithoutTokenOffLoopbackIsStillRefused) {
  TempDir dir;
  Certificates certs(dir);
  ASSERT_TRUE(certs.ok);
  Daemon d(dir, {"--listen", "0.0.0.0:0", "--tls-cert", certs.file("server.pem"), "--tls-key",
                 certs.file("server.key")});
  ASSERT_FALSE(d.start());
  EXPECT_NE(d.log().find("bearer token"), std::string::npos) << d.log();
  EXPECT_EQ(d.log().find("tls_cert and tls_key"), std::string::npos) << d.log();
}

TEST(ListenSecurity, TlsAndTokenEndToEndWithTheCli) {
  TempDir dir;
  Certificates certs(dir);
  ASSERT_TRUE(certs.ok);
  write_file(dir.file("token"), "correct-horse-battery-staple\n");
  write_file(dir.file("wrong-token"), "correct-horse-battery-stapler\n");
  write_file(dir.file("job.yaml"), kJob);
  Daemon d(dir, {"--listen", "0.0.0.0:0", "--tls-cert", certs.file("server.pem"), "--tls-key",
                 certs.file("server.key"), "--token-file", dir.file("token")});
  ASSERT_TRUE(d.start()) << d.log();
  EXPECT_NE(d.log().find("TLS, bearer token"), std::string::npos) << d.log();

  ProcessResult ok = d.cli({"--tls-ca", certs.file("ca.pem"), "--token-file", dir.file("token"), "jobs"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err_tail;
  ProcessResult sub = d.cli({"--tls-ca", certs.file("ca.pem"), "--token-file", dir.file("token"), "submit",
                             dir.file("job.yaml")});
  ASSERT_EQ(sub.exit_code, 0) << sub.err_tail;
  // The token may come from the environment too.
  ProcessResult env = d.cli({"--tls-ca", certs.file("ca.pem"), "jobs"},
                            {{"SOARTUNE_TOKEN", "correct-horse-battery-staple"}});
  EXPECT_EQ(env.exit_code, 0) << env.err_tail;
  EXPECT_NE(env.out.find("sec"), std::string::npos) << env.out;

  ProcessResult wrong = d.cli({"--tls-ca", certs.file("ca.pem"), "--token-file", dir.file("wrong-token"), "jobs"});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err_tail.find("UNAUTHENTICATED"), std::string::npos) << wrong.err_tail;
  ProcessResult none = d.cli({"--tls-ca", certs.file("ca.pem"), "jobs"}, {{"SOARTUNE_TOKEN", ""}});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err_tail.find("UNAUTHENTICATED"), std::string::npos) << none.err_tail;
  // Plaintext to a TLS daemon gets nowhere.
  ProcessResult plain = d.cli({"jobs"});
  EXPECT_EQ(plain.exit_code, 4) << plain.err_tail;
  // A token given without TLS is refused by the CLI before it could be sent in clear.
  ProcessResult clear = d.cli({"--token-file", dir.file("token"), "jobs"});
  EXPECT_EQ(clear.exit_code, 2);
  EXPECT_NE(clear.err_tail.find("--tls-ca"), std::string::npos) << clear.err_tail;
}

TEST(ListenSecurity, MutualTlsRequiresAClientCertificate) {
  TempDir dir;
  Certificates certs(dir);
  ASSERT_TRUE(certs.ok);
  write_file(dir.file("token"), "t0ken\n");
  Daemon d(dir, {"--tls-cert", certs.file("server.pem"), "--tls-key", certs.file("server.key"), "--tls-client-ca",
                 certs.file("ca.pem"), "--token-file", dir.file("token")});
  ASSERT_TRUE(d.start()) << d.log();
  ProcessResult without = d.cli({"--tls-ca", certs.file("ca.pem"), "--token-file", dir.file("token"), "jobs"});
  EXPECT_NE(without.exit_code, 0) << "served a client without a certificate";
  ProcessResult with = d.cli({"--tls-ca", certs.file("ca.pem"), "--tls-cert", certs.file("client.pem"), "--tls-key",
                              certs.file("client.key"), "--token-file", dir.file("token"), "jobs"});
  EXPECT_EQ(with.exit_code, 0) << with.err_tail;
}

TEST(ListenSecurity, InsecureOverrideIsWarnedInTheLogAndInStatus) {
  TempDir dir;
  write_file(dir.file("job.yaml"), kJob);
  Daemon d(dir, {"--listen", "0.0.0.0:0", "--insecure-listen-anywhere"});
  ASSERT_TRUE(d.start()) << d.log();
  EXPECT_NE(d.log().find("without tls_cert and tls_key"), std::string::npos) << d.log();
  ProcessResult sub = d.cli({"submit", dir.file("job.yaml")});
  ASSERT_EQ(sub.exit_code, 0) << sub.err_tail;
  std::string id = sub.out.substr(0, sub.out.find_first_of(" \n"));
  ProcessResult st = d.cli({"status", id});
  ASSERT_EQ(st.exit_code, 0) << st.err_tail;
  EXPECT_NE(st.out.find("warning"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("--insecure-listen-anywhere"), std::string::npos) << st.out;
  d.cli({"cancel", id});
}

TEST(ListenSecurity, PortZeroBindsOnePort) {
  for (const char* listen : {"localhost:0", "127.0.0.1:0"}) {
    TempDir dir;
    // The dashboard's HTTP listener is a second socket by design; this is about gRPC's own binding.
    Daemon d(dir, {"--listen", listen, "--http-listen", "off"});
    ASSERT_TRUE(d.start()) << d.log();
    std::set<int> ports = listening_ports(d.pid());
    EXPECT_EQ(ports.size(), 1u) << listen << ": listening on " << ports.size() << " ports";
  }
}


TEST(DataRoots, SpecsCannotMakeTheDaemonReadOutsideItsRoots) {
  TempDir dir;
  const std::string root = dir.file("root"), outside = dir.file("outside");
  std::filesystem::create_directories(root);
  write_file(outside + "/secret.jsonl", "root:x:0:0:SECRET-FIRST-LINE\n");
  write_file(outside + "/model/config.json", "{\"SECRET\": 1}\n");
  std::filesystem::create_symlink(outside + "/secret.jsonl", root + "/x.jsonl");
  std::filesystem::create_symlink(outside + "/model", root + "/model");
  Daemon d(dir, {"--data-root", root});
  ASSERT_TRUE(d.start()) << d.log();

  auto submit = [&](const std::string& from, const std::string& to) {
    std::string spec = kJob;
    spec.replace(spec.find(from), from.size(), to);
    write_file(dir.file("job.yaml"), spec);
    return d.cli({"submit", dir.file("job.yaml")});
  };
  const std::string synthetic_set = "accuracy: {set: synthetic, samples: 2, prompt_len: 8, continuation_len: 4}";
  for (const std::string& set : {root + "/x.jsonl", outside + "/secret.jsonl", root + "/../outside/secret.jsonl"}) {
    ProcessResult r = submit(synthetic_set, "accuracy: {set: " + set + ", samples: 2}");
    EXPECT_NE(r.exit_code, 0) << set;
    EXPECT_NE(r.err_tail.find("PERMISSION_DENIED: accuracy.set"), std::string::npos) << r.err_tail;
    EXPECT_EQ(r.err_tail.find("SECRET"), std::string::npos) << r.err_tail;
  }
  // A model directory outside the roots, existing or not, gets the same answer: nothing about it leaks.
  for (const std::string& model : {root + "/model", outside + "/model", std::string("/nonexistent/dir"),
                                   std::string("/etc")}) {
    ProcessResult r = submit("synthetic:tiny", "hf:" + model);
    EXPECT_NE(r.exit_code, 0) << model;
    EXPECT_NE(r.err_tail.find("PERMISSION_DENIED: model"), std::string::npos) << r.err_tail;
    EXPECT_EQ(r.err_tail.find("SECRET"), std::string::npos) << r.err_tail;
    EXPECT_EQ(r.err_tail.find("not a directory"), std::string::npos) << r.err_tail;
  }
  // The proxy accuracy model too.
  ProcessResult proxy = submit(synthetic_set, "accuracy: {set: synthetic, samples: 2, model: hf:" + root + "/model}");
  EXPECT_NE(proxy.err_tail.find("PERMISSION_DENIED: accuracy.model"), std::string::npos) << proxy.err_tail;
  ProcessResult jobs = d.cli({"jobs"});
  EXPECT_EQ(jobs.exit_code, 0);
  EXPECT_EQ(jobs.out.find("sec"), std::string::npos) << "a refused job was stored:\n" << jobs.out;
}


// ---- the dashboard (http_listen) under the same rule ----

// The dashboard's bound port, once soartuned has written it.
int http_port_of(const TempDir& dir) {
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(dir.file("http_port"));
    int port = 0;
    if (in >> port) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

TEST(DashboardAccess, SessionsAndBearerHeaders) {
  HttpAccess open("");
  EXPECT_FALSE(open.required());
  EXPECT_TRUE(open.allows("", ""));
  EXPECT_FALSE(open.sign_in("anything"));

  HttpAccess access("s3cret");
  EXPECT_TRUE(access.allows("Bearer s3cret", ""));
  EXPECT_FALSE(access.allows("Bearer s3cre", ""));
  EXPECT_FALSE(access.allows("Basic s3cret", ""));
  EXPECT_FALSE(access.allows("", ""));
  EXPECT_FALSE(access.allows("", "soartune_session=s3cret"));   // the token is not a session
  EXPECT_FALSE(access.sign_in("wrong"));
  std::optional<std::string> cookie = access.sign_in("s3cret");
  ASSERT_TRUE(cookie);
  for (const char* attr : {"HttpOnly", "Secure", "SameSite=Strict", "Path=/"})
    EXPECT_NE(cookie->find(attr), std::string::npos) << *cookie;
  const std::string id = cookie_value(cookie->substr(0, cookie->find(';')), HttpAccess::kCookie);
  EXPECT_EQ(id.size(), 64u) << *cookie;
  EXPECT_EQ(id.find("s3cret"), std::string::npos);
  EXPECT_TRUE(access.allows("", "theme=dark; soartune_session=" + id));
  EXPECT_FALSE(access.allows("", "soartune_session=" + id.substr(1)));
  EXPECT_NE(*access.sign_in("s3cret"), *cookie) << "every sign-in gets a session of its own";
  EXPECT_EQ(cookie_value("a=1; b=22;c=3", "b"), "22");
  EXPECT_EQ(cookie_value("ab=1", "b"), "");
}

TEST(DashboardAccess, OffLoopbackWithoutTlsAndTokenExitsNamingWhatIsMissing) {
  TempDir dir;
  Daemon d(dir, {"--http-listen", "0.0.0.0:0"});
  ASSERT_FALSE(d.start()) << "soartuned served its dashboard on 0.0.0.0 with neither TLS nor a token";
  EXPECT_TRUE(WIFEXITED(d.status) && WEXITSTATUS(d.status) != 0);
  EXPECT_NE(d.log().find("http_listen: 0.0.0.0:0 is not a loopback address"), std::string::npos) << d.log();
  EXPECT_NE(d.log().find("tls_cert and tls_key"), std::string::npos) << d.log();
  EXPECT_NE(d.log().find("bearer token"), std::string::npos) << d.log();
}

TEST(DashboardAccess, InsecureOverrideIsWarnedInTheLogAndInStatus) {
  TempDir dir;
  write_file(dir.file("job.yaml"), kJob);
  Daemon d(dir, {"--http-listen", "0.0.0.0:0", "--http-port-file", dir.file("http_port"),
                 "--insecure-listen-anywhere"});
  ASSERT_TRUE(d.start()) << d.log();
  ASSERT_GT(http_port_of(dir), 0) << d.log();
  EXPECT_NE(d.log().find("dashboard (http_listen) on 0.0.0.0:0 (not loopback) without"), std::string::npos) << d.log();
  ProcessResult sub = d.cli({"submit", dir.file("job.yaml")});
  ASSERT_EQ(sub.exit_code, 0) << sub.err_tail;
  std::string id = sub.out.substr(0, sub.out.find_first_of(" \n"));
  ProcessResult st = d.cli({"status", id});
  EXPECT_NE(st.out.find("dashboard (http_listen)"), std::string::npos) << st.out;
  d.cli({"cancel", id});
}

TEST(DashboardAccess, HttpsWithTheTokenOffLoopback) {
  TempDir dir;
  Certificates certs(dir);
  ASSERT_TRUE(certs.ok);
  write_file(dir.file("token"), "correct-horse-battery-staple\n");
  Daemon d(dir, {"--listen", "0.0.0.0:0", "--tls-cert", certs.file("server.pem"), "--tls-key",
                 certs.file("server.key"), "--token-file", dir.file("token"), "--http-listen", "0.0.0.0:0",
                 "--http-port-file", dir.file("http_port")});
  ASSERT_TRUE(d.start()) << d.log();
  const int port = http_port_of(dir);
  ASSERT_GT(port, 0) << d.log();
  EXPECT_NE(d.log().find("dashboard on https://"), std::string::npos) << d.log();

  httplib::SSLClient c("127.0.0.1", port);
  c.set_ca_cert_path(certs.file("ca.pem").c_str());
  c.enable_server_certificate_verification(true);
  auto none = c.Get("/api/jobs");
  ASSERT_TRUE(none) << httplib::to_string(none.error());
  EXPECT_EQ(none->status, 401);
  EXPECT_NE(none->body.find("UNAUTHENTICATED"), std::string::npos) << none->body;
  auto wrong = c.Get("/api/jobs", {{"Authorization", "Bearer correct-horse-battery-stapler"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto right = c.Get("/api/jobs", {{"Authorization", "Bearer correct-horse-battery-staple"}});
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200) << right->body;
  EXPECT_NE(right->body.find("\"jobs\""), std::string::npos) << right->body;

  // A page sends the browser to sign in and come back; the sign-in page itself is served.
  auto page = c.Get("/jobs/some-job?x=1");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 303);
  const std::string location = page->get_header_value("Location");
  ASSERT_EQ(location.rfind("/signin?next=", 0), 0u) << location;
  EXPECT_EQ(httplib::detail::decode_url(location.substr(13), true), "/jobs/some-job?x=1") << location;
  auto signin = c.Get("/signin");
  ASSERT_TRUE(signin);
  EXPECT_EQ(signin->status, 200);
  EXPECT_NE(signin->body.find("name=\"token\""), std::string::npos);

  // Signing in with the wrong token: 401 and no cookie; with the right one: an HttpOnly, Secure, SameSite=Strict
  // session that the API and the event stream accept, and a redirect only to a path of this site.
  auto bad = c.Post("/signin", "token=nope&next=%2Fjobs%2Fx", "application/x-www-form-urlencoded");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 401);
  EXPECT_FALSE(bad->has_header("Set-Cookie"));
  EXPECT_NE(bad->body.find("data-failed=\"1\""), std::string::npos);
  auto good = c.Post("/signin", "token=correct-horse-battery-staple&next=%2Fjobs%2Fx",
                     "application/x-www-form-urlencoded");
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 303);
  EXPECT_EQ(good->get_header_value("Location"), "/jobs/x");
  const std::string set_cookie = good->get_header_value("Set-Cookie");
  for (const char* attr : {"soartune_session=", "HttpOnly", "Secure", "SameSite=Strict"})
    EXPECT_NE(set_cookie.find(attr), std::string::npos) << set_cookie;
  const std::string cookie = set_cookie.substr(0, set_cookie.find(';'));
  auto with_cookie = c.Get("/api/jobs", {{"Cookie", cookie}});
  ASSERT_TRUE(with_cookie);
  EXPECT_EQ(with_cookie->status, 200);
  auto page_with_cookie = c.Get("/jobs/x", {{"Cookie", cookie}});
  ASSERT_TRUE(page_with_cookie);
  EXPECT_EQ(page_with_cookie->status, 200);
  auto elsewhere = c.Post("/signin", "token=correct-horse-battery-staple&next=%2F%2Fevil.example%2F",
                          "application/x-www-form-urlencoded");
  ASSERT_TRUE(elsewhere);
  EXPECT_EQ(elsewhere->get_header_value("Location"), "/");

  // Plain HTTP to the HTTPS port gets no answer.
  httplib::Client plain("127.0.0.1", port);
  plain.set_connection_timeout(5);
  auto clear = plain.Get("/api/jobs", {{"Authorization", "Bearer correct-horse-battery-staple"}});
  EXPECT_TRUE(!clear || clear->status != 200);
}

}  // namespace
}  // namespace soartune::daemon
