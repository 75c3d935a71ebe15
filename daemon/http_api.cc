#include "daemon/http_api.h"

#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <optional>
#include <sstream>
#include <vector>

#include "core/grpc_code_name.h"

namespace soartune::daemon {

namespace {

namespace gp = google::protobuf;

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  std::string p;
  while (std::getline(ss, p, '/'))
    if (!p.empty()) parts.push_back(p);
  return parts;
}

HttpAnswer invalid(const std::string& message) {
  return error_answer(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message));
}

// Fills `req` from the path's fields and the query parameters, which must be among `allowed` (request field
// names). Values go through protobuf's JSON parser, so numbers and enum names are checked as gRPC would get them.
std::optional<HttpAnswer> fill_request(gp::Message& req, nlohmann::json fields,
                                       const std::multimap<std::string, std::string>& query,
                                       const std::vector<std::string>& allowed) {
  for (const auto& [k, v] : query) {
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      std::string names;
      for (const auto& a : allowed) names += (names.empty() ? "" : ", ") + a;
      return invalid("query parameter '" + k + "' is not one of: " + (names.empty() ? "(none)" : names));
    }
    fields[k] = v;   // the last one wins
  }
  gp::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  gp::util::Status s = gp::util::JsonStringToMessage(fields.dump(), &req, opts);
  if (!s.ok()) return invalid(std::string(s.message()));
  return std::nullopt;
}

template <typename Req, typename Resp, typename Call>
HttpAnswer answer(Req& req, Call call, const std::function<void(Resp&)>& trim = nullptr) {
  grpc::ServerContext ctx;
  Resp resp;
  grpc::Status s = call(&ctx, &req, &resp);
  if (!s.ok()) return error_answer(s);
  if (trim) trim(resp);
  return {200, to_api_json(resp)};
}

// The bulky per-trial fields a listing leaves out (the worker's JSON, its log, kernel plans, environment).
void trim_for_listing(pb::ListTrialsResponse& r) {
  for (pb::Trial& t : *r.mutable_trials()) {
    t.clear_result_json();
    t.clear_log_tail();
    t.clear_plans();
    t.clear_env();
  }
}

}  // namespace

std::string to_api_json(const gp::Message& m) {
  gp::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  std::string out;
  gp::util::MessageToJsonString(m, &out, opts);
  return out;
}

int http_status_of(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE: return 400;
    case grpc::StatusCode::NOT_FOUND: return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::FAILED_PRECONDITION: return 409;
    case grpc::StatusCode::PERMISSION_DENIED: return 403;
    case grpc::StatusCode::UNAUTHENTICATED: return 401;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return 429;
    case grpc::StatusCode::UNIMPLEMENTED: return 501;
    case grpc::StatusCode::UNAVAILABLE: return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return 504;
    default: return 500;
  }
}

HttpAnswer error_answer(const grpc::Status& s) {
  nlohmann::json j;
  j["error"]["code"] = grpc_code_name(static_cast<int>(s.error_code()));
  j["error"]["message"] = s.error_message();
  return {http_status_of(s.error_code()), j.dump()};
}

HttpAnswer HttpApi::get(const std::string& path, const std::multimap<std::string, std::string>& query) {
  std::vector<std::string> p = split_path(path);
  TunerService& svc = service_;
  auto bind = [&svc](auto method) {
    return [&svc, method](auto* ctx, auto* req, auto* resp) { return (svc.*method)(ctx, req, resp); };
  };
  if (p.size() < 2 || p[0] != "api")
    return error_answer({grpc::StatusCode::NOT_FOUND, "no API route " + path + " (see daemon/http_api.h)"});
  if (p[1] == "submissions" && p.size() == 2) {
    pb::ListSubmissionsRequest req;
    if (auto e = fill_request(req, nlohmann::json::object(), query, {"job_id", "page_size", "page_token"})) return *e;
    return answer<pb::ListSubmissionsRequest, pb::ListSubmissionsResponse>(req, bind(&TunerService::ListSubmissions));
  }
  if (p[1] != "jobs")
    return error_answer({grpc::StatusCode::NOT_FOUND, "no API route " + path + " (see daemon/http_api.h)"});
  if (p.size() == 2) {
    pb::ListJobsRequest req;
    if (auto e = fill_request(req, nlohmann::json::object(), query, {"page_size", "page_token"})) return *e;
    return answer<pb::ListJobsRequest, pb::ListJobsResponse>(req, bind(&TunerService::ListJobs));
  }
  nlohmann::json job = {{"job_id", p[2]}};
  if (p.size() == 3) {
    pb::GetJobRequest req;
    if (auto e = fill_request(req, job, query, {})) return *e;
    return answer<pb::GetJobRequest, pb::Job>(req, bind(&TunerService::GetJob));
  }
  const std::string& what = p[3];
  if (what == "trials" && p.size() == 4) {
    pb::ListTrialsRequest req;
    if (auto e = fill_request(req, job, query, {"status", "order_by", "page_size", "page_token"})) return *e;
    return answer<pb::ListTrialsRequest, pb::ListTrialsResponse>(req, bind(&TunerService::ListTrials), trim_for_listing);
  }
  if (what == "trials" && p.size() == 5) {
    pb::GetTrialRequest req;
    nlohmann::json f = job;
    f["number"] = p[4];
    if (auto e = fill_request(req, f, query, {})) return *e;
    return answer<pb::GetTrialRequest, pb::Trial>(req, bind(&TunerService::GetTrial));
  }
  if (p.size() == 4 && what == "best") {
    pb::GetBestRequest req;
    if (auto e = fill_request(req, job, query, {})) return *e;
    return answer<pb::GetBestRequest, pb::Trial>(req, bind(&TunerService::GetBest));
  }
  if (p.size() == 4 && what == "export") {
    pb::ExportConfigRequest req;
    nlohmann::json f = job;
    f["trial"] = "-1";   // the best unless the query names one
    if (auto e = fill_request(req, f, query, {"trial", "format"})) return *e;
    return answer<pb::ExportConfigRequest, pb::ExportConfigResponse>(req, bind(&TunerService::ExportConfig));
  }
  if (p.size() == 4 && what == "plan") {
    pb::PlanSubmissionsRequest req;
    if (auto e = fill_request(req, job, query, {"k", "accuracy_sigma"})) return *e;
    return answer<pb::PlanSubmissionsRequest, pb::PlanSubmissionsResponse>(req, bind(&TunerService::PlanSubmissions));
  }
  return error_answer({grpc::StatusCode::NOT_FOUND, "no API route " + path +
                                                        "; a job has: trials, trials/<number>, best, export, plan"});
}

HttpAnswer HttpApi::events(const std::string& job_id, const std::function<bool()>& cancelled,
                           const std::function<bool(const std::string&)>& write, bool& streamed) {
  streamed = false;
  grpc::Status s = service_.watch(job_id, cancelled, [&](const pb::JobEvent& e) {
    streamed = true;
    return write(to_api_json(e));
  });
  if (!s.ok() && !streamed) return error_answer(s);
  return {200, ""};
}

}  // namespace soartune::daemon
