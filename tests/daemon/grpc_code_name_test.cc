// core/grpc_code_name.h names gRPC's status codes by number, since core links no gRPC; here, where gRPC is
// linked, every grpc::StatusCode is checked against its name, so the table and gRPC's enum cannot drift apart.
#include "core/grpc_code_name.h"

#include <grpcpp/support/status.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace soartune {
namespace {

TEST(GrpcCodeName, NamesEveryGrpcStatusCodeAsGrpcSpellsIt) {
  const std::vector<std::pair<grpc::StatusCode, std::string>> codes = {
      {grpc::StatusCode::OK, "OK"},
      {grpc::StatusCode::CANCELLED, "CANCELLED"},
      {grpc::StatusCode::UNKNOWN, "UNKNOWN"},
      {grpc::StatusCode::INVALID_ARGUMENT, "INVALID_ARGUMENT"},
      {grpc::StatusCode::DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"},
      {grpc::StatusCode::NOT_FOUND, "NOT_FOUND"},
      {grpc::StatusCode::ALREADY_EXISTS, "ALREADY_EXISTS"},
      {grpc::StatusCode::PERMISSION_DENIED, "PERMISSION_DENIED"},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"},
      {grpc::StatusCode::FAILED_PRECONDITION, "FAILED_PRECONDITION"},
      {grpc::StatusCode::ABORTED, "ABORTED"},
      {grpc::StatusCode::OUT_OF_RANGE, "OUT_OF_RANGE"},
      {grpc::StatusCode::UNIMPLEMENTED, "UNIMPLEMENTED"},
      {grpc::StatusCode::INTERNAL, "INTERNAL"},
      {grpc::StatusCode::UNAVAILABLE, "UNAVAILABLE"},
      {grpc::StatusCode::DATA_LOSS, "DATA_LOSS"},
      {grpc::StatusCode::UNAUTHENTICATED, "UNAUTHENTICATED"},
  };
  for (const auto& [code, name] : codes) EXPECT_EQ(grpc_code_name(static_cast<int>(code)), name);
}

TEST(GrpcCodeName, ANumberOutsideTheProtocolIsUnknown) {
  EXPECT_STREQ(grpc_code_name(-1), "UNKNOWN");
  EXPECT_STREQ(grpc_code_name(17), "UNKNOWN");
  EXPECT_STREQ(grpc_code_name(1000), "UNKNOWN");
}

}  // namespace
}  // namespace soartune
