// The dashboard's read-only JSON API: each route is one TunerService call (the same code, validation and paging
// as the gRPC API), its request filled from the path and the query string, its answer the response message in
// protobuf's JSON mapping (field names as in tuner.proto; int64 values as strings, as that mapping says).
//
//   GET /api/jobs                         ListJobs          page_size, page_token
//   GET /api/jobs/<id>                    GetJob
//   GET /api/jobs/<id>/trials             ListTrials        status, order_by, page_size, page_token
//                                         (each trial without result_json, log_tail, plans and env: the
//                                         trial's own route has them; a page of 1000 stays small)
//   GET /api/jobs/<id>/trials/<number>    GetTrial
//   GET /api/jobs/<id>/best               GetBest
//   GET /api/jobs/<id>/export             ExportConfig      trial (default: the best), format
//   GET /api/jobs/<id>/plan               PlanSubmissions   k, accuracy_sigma
//   GET /api/submissions                  ListSubmissions   job_id, page_size, page_token
//
// Errors answer {"error": {"code": "NOT_FOUND", "message": "..."}} with the HTTP status of the gRPC code.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "daemon/tuner_service.h"

namespace soartune::daemon {

struct HttpAnswer {
  int status = 200;
  std::string body;   // application/json
};

class HttpApi {
 public:
  explicit HttpApi(TunerService& service) : service_(service) {}

  // `path` starts with /api/; `query` holds the decoded query parameters.
  HttpAnswer get(const std::string& path, const std::multimap<std::string, std::string>& query);

  // The job's watch stream, each event as one JSON text (a pb::JobEvent); ends like WatchJob. An error before
  // the first event (unknown job) comes back as the answer to send instead of a stream.
  HttpAnswer events(const std::string& job_id, const std::function<bool()>& cancelled,
                    const std::function<bool(const std::string& json)>& write, bool& streamed);

 private:
  TunerService& service_;
};

// protobuf's JSON mapping of a message as the API serves it (every field present, proto field names).
std::string to_api_json(const google::protobuf::Message& m);
// The HTTP status for a gRPC status code.
int http_status_of(grpc::StatusCode code);
HttpAnswer error_answer(const grpc::Status& s);

}  // namespace soartune::daemon
