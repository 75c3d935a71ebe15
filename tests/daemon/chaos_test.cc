// kill -9 of the daemon at random moments of a CPU job, again and again on the same database: the job still
// finishes, every trial that was COMPLETE before a kill is there unchanged at the end, no trial number is given to
// a worker twice, and the SQLite file passes its integrity check. The random delays come from a seed printed with
// every failure, so a failing sequence can be replayed.
#include <sqlite3.h>

#include <chrono>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "daemon_process.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

using testing::Daemon;
using testing::TempDir;
using testing::write_file;
using testing::write_script;

// What a COMPLETE trial must keep across kills: what its worker measured.
struct Measured {
  std::string status, result_json, tiers;
  bool operator==(const Measured&) const = default;
};

// Rows of `sql` (two columns: a key and a value) read straight from the file, as another process would while
// soartuned runs (WAL: readers never block the writer).
std::vector<std::vector<std::string>> rows(const std::string& path, const std::string& sql, int columns) {
  std::vector<std::vector<std::string>> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return out;
  }
  sqlite3_busy_timeout(db, 5000);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> r;
      for (int i = 0; i < columns; ++i) {
        const unsigned char* p = sqlite3_column_text(st, i);
        r.emplace_back(p ? reinterpret_cast<const char*>(p) : "");
      }
      out.push_back(std::move(r));
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

std::map<int, Measured> complete_trials(const std::string& db, const std::string& job) {
  std::map<int, Measured> out;
  for (const auto& r : rows(db,
                            "SELECT t.number, t.status, t.result_json, (SELECT group_concat(tier || '=' || duration_s, ';') "
                            "FROM trial_tiers x WHERE x.job_id = t.job_id AND x.number = t.number) FROM trials t "
                            "WHERE t.job_id = '" + job + "' AND t.status = 'COMPLETE'",
                            4))
    out[std::stoi(r[0])] = Measured{r[1], r[2], r[3]};
  return out;
}

const char* kJob =
    "name: chaos\nmodel: synthetic:tiny\nbackend: cpu\nstrategy: random\nseed: 5\n"
    "budget: {trials: 40}\ntrial_timeout_s: 60\n"
    "workload: {name: chaos, requests: [{name: a, input_len: 32, output_len: 16, count: 8}]}\n"
    "accuracy: {set: synthetic, samples: 2, prompt_len: 8, continuation_len: 4}\n"
    "space:\n  weight_bits: {type: choice, values: [16, 8, 4]}\n"
    "  max_running_requests: {type: pow2, low: 1, high: 16}\n"
    "  max_prefill_tokens: {type: pow2, low: 64, high: 1024}\n"
    "  kv_cache_dtype: {type: choice, values: [bf16, fp8_e4m3]}\n";

TEST(Chaos, RandomKillsOfTheDaemonLoseNoCompleteTrial) {
  TempDir dir;
  const std::string db = dir.file("soartune.db");
  // Each worker start is logged by its trial file, so a number given to two workers shows.
  Daemon d(dir, {"--http-listen", "off"});   // ten restarts: no dashboard port to contend for with other tests
  d.worker = write_script(dir.file("worker.sh"),
                          "echo \"$2\" >> " + dir.file("starts.log") + "\nexec " SOARTUNE_WORKER_PATH " \"$@\"");
  ASSERT_TRUE(d.start()) << d.log();
  write_file(dir.file("job.yaml"), kJob);
  ProcessResult submitted = d.cli({"submit", dir.file("job.yaml")});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err_tail;
  const std::string job = submitted.out.substr(0, submitted.out.find_first_of(" \n"));

  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("chaos seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> delay_ms(200, 2500);
  std::map<int, Measured> seen;   // COMPLETE before some kill
  const int kKills = 10;
  int kills_while_running = 0;   // with a trial RUNNING in the store: a worker was (about to be) under way
  for (int k = 0; k < kKills; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    for (const auto& [n, m] : complete_trials(db, job)) seen.emplace(n, m);
    kills_while_running += !rows(db, "SELECT 1 FROM trials WHERE status = 'RUNNING'", 1).empty();
    d.kill_hard();
    ASSERT_TRUE(d.start()) << "restart " << k + 1 << " failed:\n" << d.log();
  }

  // Left alone, the job finishes.
  std::string state;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(150);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = rows(db, "SELECT state FROM jobs WHERE id = '" + job + "'", 1);
    state = r.empty() ? "" : r[0][0];
    if (state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(state, "SUCCEEDED") << d.log();

  const std::map<int, Measured> end = complete_trials(db, job);
  EXPECT_GE(seen.size(), 1u) << "no trial completed before a kill: the delays are too short to test anything";
  // A loaded machine restarts slowly, so fewer kills land mid-trial there; three of ten still test the case.
  EXPECT_GE(kills_while_running, 3) << "fewer than 3 kills found a trial running: the job is too short";
  std::cout << kKills << " kills, " << kills_while_running << " with a trial running; " << seen.size()
            << " trials COMPLETE before a kill, " << end.size() << " at the end\n";
  for (const auto& [n, m] : seen) {
    auto it = end.find(n);
    ASSERT_NE(it, end.end()) << "trial " << n << " was COMPLETE before a kill and is gone";
    EXPECT_EQ(it->second, m) << "trial " << n << " changed after a kill";
  }
  std::map<std::string, int> starts;
  std::istringstream log(testing::read_text(dir.file("starts.log")));
  for (std::string line; std::getline(log, line);) ++starts[line];
  for (const auto& [file, count] : starts) EXPECT_EQ(count, 1) << file << " was given to " << count << " workers";
  auto trials = rows(db, "SELECT COUNT(*) FROM trials WHERE job_id = '" + job + "'", 1);
  ASSERT_FALSE(trials.empty());
  EXPECT_LE(starts.size(), std::stoul(trials[0][0])) << "a worker ran for a trial the store does not have";
  auto check = rows(db, "PRAGMA integrity_check", 1);
  ASSERT_FALSE(check.empty());
  EXPECT_EQ(check[0][0], "ok");
  ProcessResult listed = d.cli({"trials", job});
  EXPECT_EQ(listed.exit_code, 0) << listed.err_tail;
}

}  // namespace
}  // namespace soartune::daemon
