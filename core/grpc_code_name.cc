#include "core/grpc_code_name.h"

#include <iterator>

namespace soartune {

const char* grpc_code_name(int code) {
  static constexpr const char* kNames[] = {
      "OK",                   // 0
      "CANCELLED",            // 1
      "UNKNOWN",              // 2
      "INVALID_ARGUMENT",     // 3
      "DEADLINE_EXCEEDED",    // 4
      "NOT_FOUND",            // 5
      "ALREADY_EXISTS",       // 6
      "PERMISSION_DENIED",    // 7
      "RESOURCE_EXHAUSTED",   // 8
      "FAILED_PRECONDITION",  // 9
      "ABORTED",              // 10
      "OUT_OF_RANGE",         // 11
      "UNIMPLEMENTED",        // 12
      "INTERNAL",             // 13
      "UNAVAILABLE",          // 14
      "DATA_LOSS",            // 15
      "UNAUTHENTICATED",      // 16
  };
  if (code < 0 || code >= static_cast<int>(std::size(kNames))) return "UNKNOWN";
  return kNames[code];
}

}  // namespace soartune
