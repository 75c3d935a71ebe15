// The canonical names of gRPC's status codes ("NOT_FOUND", "INVALID_ARGUMENT", ...), which the CLI prints
// ("error: NOT_FOUND: ...") and the dashboard's JSON API answers with ({"error": {"code": "NOT_FOUND"}}). They
// live here because both reach core and neither reaches the other (the CLI links no daemon library); core links
// no gRPC, so the code comes as its number, which the gRPC protocol fixes (0 OK ... 16 UNAUTHENTICATED).
#pragma once

namespace soartune {

// The name of gRPC status code `code` (static_cast<int>(grpc::StatusCode)); "UNKNOWN" for a number outside 0-16,
// as gRPC itself treats one.
const char* grpc_code_name(int code);

}  // namespace soartune
