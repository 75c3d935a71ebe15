// Schema step v6: text an older soartuned stored without checking (a worker's error, log tail and result, a job's
// name, a submission's note, ...) may hold bytes that are not UTF-8, and protobuf refuses to send such a string,
// so one bad byte made every listing that carried it fail. The step rewrites each such value with the bad bytes
// replaced by U+FFFD (core/utf8.h), the same repair the daemon applies to everything it stores since.
#include <string>
#include <vector>

#include "core/utf8.h"
#include "daemon/store_sqlite.h"

namespace soartune::daemon::sql {

namespace {

struct TextColumn {
  std::string table, column;
};

// Every TEXT column of every table of ours, except key columns: keys (job ids, tier and knob names) are written by
// the daemon itself, never copied from outside, and rewriting one would break the rows that refer to it.
Result<std::vector<TextColumn>> text_columns(Connection& c) {
  std::vector<TextColumn> out;
  auto tables = Statement::prepare(
      c, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'schema_version'");
  if (!tables.ok()) return tables.status();
  std::vector<std::string> names;
  while (true) {
    auto row = tables.value().step();
    if (!row.ok()) return row.status();
    if (!row.value()) break;
    names.push_back(tables.value().text(0));
  }
  for (const std::string& t : names) {
    auto cols = Statement::prepare(c, "SELECT name, type, pk FROM pragma_table_info(?1)");
    if (!cols.ok()) return cols.status();
    cols.value().bind(1, t);
    while (true) {
      auto row = cols.value().step();
      if (!row.ok()) return row.status();
      if (!row.value()) break;
      const std::string name = cols.value().text(0), type = cols.value().text(1);
      if (type == "TEXT" && cols.value().int64(2) == 0 && name != "job_id") out.push_back({t, name});
    }
  }
  return out;
}

std::string quoted(const std::string& identifier) { return "\"" + identifier + "\""; }

}  // namespace

Status repair_text_encoding(Connection& c) {
  auto columns = text_columns(c);
  if (!columns.ok()) return columns.status();
  for (const TextColumn& col : columns.value()) {
    auto read = Statement::prepare(c, "SELECT rowid, " + quoted(col.column) + " FROM " + quoted(col.table) + " WHERE " +
                                          quoted(col.column) + " IS NOT NULL");
    if (!read.ok()) return read.status();
    std::vector<std::pair<int64_t, std::string>> repaired;
    while (true) {
      auto row = read.value().step();
      if (!row.ok()) return row.status();
      if (!row.value()) break;
      const std::string text = read.value().text(1);
      std::string valid = valid_utf8(text);
      if (valid != text) repaired.emplace_back(read.value().int64(0), std::move(valid));
    }
    if (repaired.empty()) continue;
    auto write = Statement::prepare(c, "UPDATE " + quoted(col.table) + " SET " + quoted(col.column) + " = ?1 WHERE rowid = ?2");
    if (!write.ok()) return write.status();
    for (const auto& [rowid, text] : repaired) {
      write.value().reset();
      if (Status s = write.value().bind(1, text).bind(2, rowid).run(); !s.ok()) return s;
    }
  }
  return Status::Ok();
}

}  // namespace soartune::daemon::sql
