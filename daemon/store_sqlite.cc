#include "daemon/store_sqlite.h"

#include <sqlite3.h>

#include <utility>

namespace soartune::daemon::sql {

namespace {

Status sqlite_error(sqlite3* db, int rc, std::string_view what) {
  std::string msg = "sqlite: ";
  msg += what;
  msg += ": ";
  msg += db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return Status::Internal(std::move(msg));
}

}  // namespace

// ---- Connection ----

Result<Connection> Connection::open(const std::string& path, int busy_timeout_ms) {
  sqlite3* db = nullptr;
  // NOMUTEX: a connection is only ever used by one thread at a time (the store's pool guarantees it).
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = "cannot open database " + path + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return Status::Internal(std::move(msg));
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_timeout_ms);
  Connection c(db);
  // WAL: readers never block the writer and the writer never blocks readers. synchronous=NORMAL is durable
  // against a crash of the process (kill -9); only an OS crash can lose the last commits.
  for (const char* pragma : {"PRAGMA foreign_keys = ON", "PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL"}) {
    Status s = c.exec(pragma);
    if (!s.ok()) return Status::Internal("cannot open database " + path + ": " + s.message);
  }
  return c;
}

Connection::~Connection() {
  if (db_) sqlite3_close_v2(db_);
}

Connection::Connection(Connection&& o) noexcept : db_(std::exchange(o.db_, nullptr)) {}

Connection& Connection::operator=(Connection&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
  }
  return *this;
}

Status Connection::exec(const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = "sqlite: " + sql.substr(0, 80) + ": " + (err ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    return Status::Internal(std::move(msg));
  }
  return Status::Ok();
}

int64_t Connection::changes() const { return sqlite3_changes64(db_); }
int64_t Connection::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
std::string Connection::error_message() const { return db_ ? sqlite3_errmsg(db_) : "no connection"; }

// ---- Statement ----

Result<Statement> Statement::prepare(Connection& c, std::string_view sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(c.get(), sql.data(), static_cast<int>(sql.size()), &s, nullptr);
  if (rc != SQLITE_OK) return sqlite_error(c.get(), rc, "prepare " + std::string(sql.substr(0, 80)));
  return Statement(s, c.get(), std::string(sql));
}

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& o) noexcept
    : stmt_(std::exchange(o.stmt_, nullptr)),
      db_(o.db_),
      sql_(std::move(o.sql_)),
      last_error_(o.last_error_),
      bind_error_(std::move(o.bind_error_)) {}

Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    if (stmt_) sqlite3_finalize(stmt_);
    stmt_ = std::exchange(o.stmt_, nullptr);
    db_ = o.db_;
    sql_ = std::move(o.sql_);
    last_error_ = o.last_error_;
    bind_error_ = std::move(o.bind_error_);
  }
  return *this;
}

Statement& Statement::bind(int i, int64_t v) {
  int rc = sqlite3_bind_int64(stmt_, i, v);
  if (rc != SQLITE_OK && bind_error_.ok()) bind_error_ = sqlite_error(db_, rc, "bind #" + std::to_string(i));
  return *this;
}

Statement& Statement::bind(int i, double v) {
  int rc = sqlite3_bind_double(stmt_, i, v);
  if (rc != SQLITE_OK && bind_error_.ok()) bind_error_ = sqlite_error(db_, rc, "bind #" + std::to_string(i));
  return *this;
}

Statement& Statement::bind(int i, std::string_view v) {
  int rc = sqlite3_bind_text64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK && bind_error_.ok()) bind_error_ = sqlite_error(db_, rc, "bind #" + std::to_string(i));
  return *this;
}

Statement& Statement::bind_null(int i) {
  int rc = sqlite3_bind_null(stmt_, i);
  if (rc != SQLITE_OK && bind_error_.ok()) bind_error_ = sqlite_error(db_, rc, "bind #" + std::to_string(i));
  return *this;
}

Result<bool> Statement::step() {
  if (!bind_error_.ok()) return bind_error_;
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  last_error_ = sqlite3_extended_errcode(db_);
  Status s = sqlite_error(db_, rc, sql_.substr(0, 60));
  sqlite3_reset(stmt_);
  return s;
}

Status Statement::run() {
  while (true) {
    Result<bool> r = step();
    if (!r.ok()) return r.status();
    if (!r.value()) return Status::Ok();
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_error_ = Status::Ok();
  last_error_ = 0;
}

bool Statement::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
int64_t Statement::int64(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::real(int col) const { return sqlite3_column_double(stmt_, col); }

std::string Statement::text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  if (!p) return {};
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

// ---- Transaction ----

Result<Transaction> Transaction::begin(Connection& c, Kind kind) {
  Status s = c.exec(kind == Kind::kWrite ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED");
  if (!s.ok()) return s;
  return Transaction(&c);
}

Transaction::~Transaction() {
  if (conn_) conn_->exec("ROLLBACK");
}

Transaction::Transaction(Transaction&& o) noexcept : conn_(std::exchange(o.conn_, nullptr)) {}

Transaction& Transaction::operator=(Transaction&& o) noexcept {
  if (this != &o) {
    if (conn_) conn_->exec("ROLLBACK");
    conn_ = std::exchange(o.conn_, nullptr);
  }
  return *this;
}

Status Transaction::commit() {
  if (!conn_) return Status::Internal("sqlite: commit of a finished transaction");
  Status s = conn_->exec("COMMIT");
  if (!s.ok()) return s;   // still open: the destructor rolls it back
  conn_ = nullptr;
  return Status::Ok();
}

bool is_constraint_error(int extended_code) { return (extended_code & 0xff) == SQLITE_CONSTRAINT; }
bool is_foreign_key_error(int extended_code) { return extended_code == SQLITE_CONSTRAINT_FOREIGNKEY; }
bool is_unique_error(int extended_code) {
  return extended_code == SQLITE_CONSTRAINT_PRIMARYKEY || extended_code == SQLITE_CONSTRAINT_UNIQUE;
}

}  // namespace soartune::daemon::sql
