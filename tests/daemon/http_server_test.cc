// The dashboard server's address rules: off loopback only with TLS and the token (listen_security's rule, named
// http_listen), HOST:PORT checked, errors that name http_listen.
#include "daemon/http_server.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>

#include "daemon/store.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

using testing::TempDir;

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
  for (const char* addr : {"0.0.0.0:0", "192.168.1.2:8700", "[::]:0"}) {
    auto p = resolve_listen_policy("http_listen", addr, ListenSecurity{});
    ASSERT_FALSE(p.ok()) << addr;
    EXPECT_EQ(p.status().message.rfind(std::string("http_listen: ") + addr + " is not a loopback address", 0), 0u)
        << p.status().message;
  }
  for (const char* addr : {"127.0.0.1", "127.0.0.1:70000", "127.0.0.1:http", ":8700"}) {
    DashboardServer server(*service_, dir_.path());
    ListenPolicy policy;
    policy.listen = addr;
    auto r = server.start(policy);
    ASSERT_FALSE(r.ok()) << addr;
    EXPECT_EQ(r.status().message.rfind("http_listen:", 0), 0u) << r.status().message;
  }
}

TEST_F(DashboardStart, MissingPagesAreNamed) {
  DashboardServer server(*service_, dir_.file("no-such-dir"));
  auto r = server.start(resolve_listen_policy("http_listen", "127.0.0.1:0", ListenSecurity{}).value());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message.find("web_dir:"), std::string::npos) << r.status().message;
}

TEST_F(DashboardStart, BindsAFreePortOnLoopback) {
  DashboardServer server(*service_, dir_.path());
  auto r = server.start(resolve_listen_policy("http_listen", "127.0.0.1:0", ListenSecurity{}).value());
  ASSERT_TRUE(r.ok()) << r.status().message;
  EXPECT_GT(r.value(), 0);
  server.stop();
}

}  // namespace
}  // namespace soartune::daemon
