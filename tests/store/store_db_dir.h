// The store tests' fixture: a fresh directory for the test's database file (path_), removed afterwards, and one
// value read from that file with SQL, bypassing the store (to see what a migration or a write left there).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "daemon/store_sqlite.h"

namespace soartune::daemon::testing {

class StoreDbDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() /
           ("soartune-store-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "soartune.db").string();
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // The first column of the first row of `q`, as text.
  std::string scalar(const std::string& q) {
    auto c = sql::Connection::open(path_);
    EXPECT_TRUE(c.ok());
    auto st = sql::Statement::prepare(c.value(), q);
    EXPECT_TRUE(st.ok()) << q;
    auto row = st.value().step();
    EXPECT_TRUE(row.ok() && row.value()) << q;
    return st.value().text(0);
  }

  // Leaves the database as schema `version` did: every migration up to it (with its rewrite), recorded.
  static void migrate_to(sql::Connection& c, int version) {
    ASSERT_TRUE(c.exec("CREATE TABLE schema_version (version INTEGER NOT NULL, applied_ms INTEGER NOT NULL DEFAULT 0)").ok());
    for (const sql::Migration& m : sql::migrations()) {
      if (m.version > version) break;
      ASSERT_TRUE(c.exec(m.sql).ok()) << m.version;
      if (m.rewrite) ASSERT_TRUE(m.rewrite(c).ok()) << m.version;
      ASSERT_TRUE(c.exec("INSERT INTO schema_version (version) VALUES (" + std::to_string(m.version) + ")").ok());
    }
  }

  std::filesystem::path dir_;
  std::string path_;
};

}  // namespace soartune::daemon::testing
