// The dashboard server's address rules: loopback only (it has no TLS or token), HOST:PORT checked, errors that
// name http_listen.
#include "daemon/http_server.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>

#include "daemon/store.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

using testing::TempDir;

TEST(HttpServer, LoopbackHostsOnly) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"}) EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"0.0.0.0", "10.0.0.1", "::", "[::]", "example.org", "127.0.0.256", "127.0.0.1x", ""})
    EXPECT_FALSE(is_loopback_host(h)) << h;
}

class DashboardStart : public ::testing::Test {
 protected:
  void SetUp() override {
    DaemonConfig cfg;
    cfg.database = dir_.file("db.sqlite");
    cfg.work_dir = dir_.file("work");
    auto store = Store::open(cfg.database);
    ASSERT_TRUE(store.ok());
    jobs_ = std::make_unique<JobManager>(cfg, std::move(store).value());
    service_ = std::make_unique<TunerService>(*jobs_);
    std::ofstream(dir_.file("index.html")) << "<!doctype html>";
  }
  TempDir dir_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<TunerService> service_;
};

TEST_F(DashboardStart, RefusesWhatItCannotServeSafely) {
  DashboardServer server(*service_, dir_.path());
  for (const char* addr : {"0.0.0.0:0", "192.168.1.2:8700", "[::]:0"}) {
    auto r = server.start(addr);
    ASSERT_FALSE(r.ok()) << addr;
    EXPECT_NE(r.status().message.find("http_listen: host"), std::string::npos) << r.status().message;
    EXPECT_NE(r.status().message.find("not loopback"), std::string::npos) << r.status().message;
  }
  for (const char* addr : {"127.0.0.1", "127.0.0.1:70000", "127.0.0.1:http", ":8700"}) {
    auto r = server.start(addr);
    ASSERT_FALSE(r.ok()) << addr;
    EXPECT_EQ(r.status().message.rfind("http_listen:", 0), 0u) << r.status().message;
  }
}

TEST_F(DashboardStart, MissingPagesAreNamed) {
  DashboardServer server(*service_, dir_.file("no-such-dir"));
  auto r = server.start("127.0.0.1:0");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message.find("web_dir:"), std::string::npos) << r.status().message;
}

TEST_F(DashboardStart, BindsAFreePortOnLoopback) {
  DashboardServer server(*service_, dir_.path());
  auto r = server.start("127.0.0.1:0");
  ASSERT_TRUE(r.ok()) << r.status().message;
  EXPECT_GT(r.value(), 0);
  server.stop();
}

}  // namespace
}  // namespace soartune::daemon
