// The one error type of every layer (core, kernels' CPU side, engine, search, daemon). The daemon maps it to a
// grpc::Status in one place (daemon/grpc_status.h).
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace soartune {

enum class Code { kOk, kInvalidArgument, kNotFound, kFailedPrecondition, kResourceExhausted, kInternal,
                  kPermissionDenied };

struct Status {
  Code code = Code::kOk;
  std::string message;   // for kInvalidArgument: "<field>: <what is wrong>; allowed: <values>"

  bool ok() const { return code == Code::kOk; }
  static Status Ok() { return {}; }
  static Status Invalid(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Precondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
  static Status Exhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
};

template <typename T>
class Result {
 public:
  Result(T v) : v_(std::move(v)) {}                 // NOLINT: implicit on purpose
  Result(Status s) : v_(std::move(s)) {}            // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  // By value: a reference into a temporary Result would dangle (`for (x : f().value())` outlives f()'s Result).
  T value() && { return std::get<T>(std::move(v_)); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }

 private:
  std::variant<T, Status> v_;
};

}  // namespace soartune
