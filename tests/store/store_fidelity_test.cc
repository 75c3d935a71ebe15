// The fidelity of each trial in the store (schema v7): it round-trips, a database from before it reads as full
// runs, rankings put screening runs after the full runs, and warm starts take full runs only.
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "daemon/store.h"
#include "daemon/store_sqlite.h"
#include "store_db_dir.h"

namespace soartune::daemon {
namespace {

namespace fs = std::filesystem;

class StoreFidelityTest : public testing::StoreDbDir {};

JobRecord job(const std::string& id, int64_t created_ms) {
  JobRecord j;
  j.id = id;
  j.device_key = "synthetic:tiny|cpu";
  j.state = JobState::kRunning;
  j.created_ms = created_ms;
  return j;
}

TrialRecord trial(const std::string& job_id, int64_t n, double fidelity, double score, double c1) {
  TrialRecord t;
  t.job_id = job_id;
  t.number = n;
  t.fidelity = fidelity;
  t.params = {{"weight_bits", "8"}};
  return t;
}

TrialRecord finished(TrialRecord t, double score, double c1) {
  t.status = TrialStatus::kComplete;
  t.score = score;
  t.relative_accuracy = 100 - c1;
  t.tiers = {{"c1", 1, c1}, {"c8", 8, c1}, {"cinf", 0, c1}};
  return t;
}

TEST_F(StoreFidelityTest, RoundTripsRanksFullRunsFirstAndWarmStartsFromFullRunsOnly) {
  auto opened = Store::open(path_);
  ASSERT_TRUE(opened.ok()) << opened.status().message;
  Store& s = *opened.value();
  ASSERT_TRUE(s.insert_job(job("a", 1)).ok());
  // Screening runs score higher within their level (their workload is shorter): they still rank after full runs.
  const std::vector<std::tuple<int64_t, double, double, double>> rows = {
      {0, 1.0, 80, 2.0}, {1, 1.0 / 3, 99, 0.5}, {2, 1.0 / 3, 95, 0.6}, {3, 1.0, 90, 1.8}};
  for (const auto& [n, f, score, c1] : rows) {
    TrialRecord t = trial("a", n, f, score, c1);
    ASSERT_TRUE(s.insert_trial(t).ok());
    ASSERT_TRUE(s.finish_trial(finished(t, score, c1)).ok());
  }
  EXPECT_DOUBLE_EQ(s.get_trial("a", 1).value().fidelity, 1.0 / 3);   // exactly: the level compares by value
  EXPECT_EQ(s.get_trial("a", 0).value().fidelity, 1.0);
  auto order = [&](const std::string& key) {
    TrialQuery q;
    q.job_id = "a";
    q.order_by = key;
    std::vector<int64_t> out;
    for (const TrialRecord& t : s.find_trials(q).value()) out.push_back(t.number);
    return out;
  };
  EXPECT_EQ(order("-score"), (std::vector<int64_t>{3, 0, 1, 2}));
  EXPECT_EQ(order("c1"), (std::vector<int64_t>{3, 0, 1, 2}));
  EXPECT_EQ(order("-accuracy"), (std::vector<int64_t>{3, 0, 1, 2}));
  ASSERT_TRUE(s.insert_job(job("b", 2)).ok());
  std::vector<int64_t> prior;
  for (const TrialRecord& t : s.trials_for_device_key("synthetic:tiny|cpu", "b")) prior.push_back(t.number);
  EXPECT_EQ(prior, (std::vector<int64_t>{0, 3}));
}

TEST_F(StoreFidelityTest, ADatabaseFromBeforeFidelitiesReadsAsFullRunsAndRejectsNoFidelity) {
  {
    auto c = sql::Connection::open(path_);
    ASSERT_TRUE(c.ok());
    // Migrations up to 5, as an older database holds (6, the text repair, and 7, the fidelity, come on open).
    ASSERT_NO_FATAL_FAILURE(migrate_to(c.value(), 5));
    ASSERT_TRUE(c.value().exec("INSERT INTO jobs (id, state) VALUES ('old', 'SUCCEEDED')").ok());
    ASSERT_TRUE(c.value().exec("INSERT INTO trials (job_id, number, status) VALUES ('old', 0, 'COMPLETE')").ok());
  }
  auto opened = Store::open(path_);
  ASSERT_TRUE(opened.ok()) << opened.status().message;
  EXPECT_EQ(opened.value()->schema_version(), sql::latest_schema_version());
  EXPECT_EQ(opened.value()->get_trial("old", 0).value().fidelity, 1.0);
  TrialRecord bad = trial("old", 1, 0.0, 0, 0);
  EXPECT_FALSE(opened.value()->insert_trial(bad).ok()) << "a fidelity outside (0, 1] is refused by the schema";
}

}  // namespace
}  // namespace soartune::daemon
