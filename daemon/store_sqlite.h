// Thin RAII wrappers over the SQLite C API used by the store: a connection, a prepared statement and a
// transaction that rolls back unless committed. Every failure comes back as a soartune::Status naming the SQL
// that failed; nothing here throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace soartune::daemon::sql {

using soartune::Result;
using soartune::Status;

// One connection. Not shared between threads: the store lends each connection to one caller at a time.
class Connection {
 public:
  // Opens (creating if needed) `path` with foreign keys on, WAL journal, synchronous=NORMAL and a busy
  // timeout, so a writer waits for another writer instead of failing at once.
  static Result<Connection> open(const std::string& path, int busy_timeout_ms = 10000);
  Connection() = default;
  ~Connection();
  Connection(Connection&& o) noexcept;
  Connection& operator=(Connection&& o) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  sqlite3* get() const { return db_; }
  // Runs one or more statements without results (DDL, PRAGMA, BEGIN/COMMIT).
  Status exec(const std::string& sql);
  int64_t changes() const;
  int64_t last_insert_rowid() const;
  std::string error_message() const;

 private:
  explicit Connection(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

// A prepared statement; parameters are bound by 1-based index, columns read by 0-based index.
class Statement {
 public:
  static Result<Statement> prepare(Connection& c, std::string_view sql);
  Statement() = default;
  ~Statement();
  Statement(Statement&& o) noexcept;
  Statement& operator=(Statement&& o) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, int64_t v);
  Statement& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Statement& bind(int i, double v);
  Statement& bind(int i, std::string_view v);
  Statement& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Statement& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
  Statement& bind_null(int i);

  // One step: true when a row is ready, false when done; an error (constraint, busy, ...) otherwise.
  Result<bool> step();
  // Steps to the end, for statements without rows.
  Status run();
  void reset();

  bool is_null(int col) const;
  int64_t int64(int col) const;
  double real(int col) const;          // NULL reads as 0
  std::string text(int col) const;     // NULL reads as ""

  // SQLite's extended result code of the last failed step (e.g. SQLITE_CONSTRAINT_PRIMARYKEY), 0 if none.
  int last_error_code() const { return last_error_; }

 private:
  Statement(sqlite3_stmt* s, sqlite3* db, std::string sql) : stmt_(s), db_(db), sql_(std::move(sql)) {}
  sqlite3_stmt* stmt_ = nullptr;
  sqlite3* db_ = nullptr;
  std::string sql_;
  int last_error_ = 0;
  Status bind_error_;
};

// BEGIN on construction (IMMEDIATE for writers: takes the write lock up front, so a read-then-write
// transaction never fails half-way on a lock upgrade), ROLLBACK in the destructor unless commit() succeeded.
class Transaction {
 public:
  enum class Kind { kRead, kWrite };
  static Result<Transaction> begin(Connection& c, Kind kind);
  Transaction() = default;
  ~Transaction();
  Transaction(Transaction&& o) noexcept;
  Transaction& operator=(Transaction&& o) noexcept;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  Status commit();

 private:
  explicit Transaction(Connection* c) : conn_(c) {}
  Connection* conn_ = nullptr;   // null once committed or rolled back
};

// The schema's forward migrations, in order: applying migrations()[i] takes a database from version
// migrations()[i].version - 1 to migrations()[i].version.
struct Migration {
  int version;
  const char* description;
  const char* sql;
  Status (*rewrite)(Connection&) = nullptr;   // a step SQL alone cannot say, run after `sql` in its transaction
};
const std::vector<Migration>& migrations();
int latest_schema_version();

// Reads the schema version (0 for a new, empty database) and applies the missing migrations, each in one write
// transaction together with its version bump. A database written by a newer build is refused
// (kFailedPrecondition) and left untouched. Returns the version the database is at afterwards.
Result<int> migrate(Connection& c, const std::string& path);

// Replaces the bytes that are not UTF-8 in every stored text by U+FFFD (store_text_repair.cc; schema step v6).
Status repair_text_encoding(Connection& c);

// True for SQLITE_CONSTRAINT_* result codes.
bool is_constraint_error(int extended_code);
bool is_foreign_key_error(int extended_code);
bool is_unique_error(int extended_code);   // primary key or unique

}  // namespace soartune::daemon::sql
