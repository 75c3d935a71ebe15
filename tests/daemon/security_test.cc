// Who may talk to soartuned, end to end: the real daemon and the real CLI over TLS with a bearer token, with
// certificates made here by openssl; the refusal to serve a non-loopback address unprotected; the warning when
// that refusal is overridden; one listening port for port 0.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace soartune::daemon
