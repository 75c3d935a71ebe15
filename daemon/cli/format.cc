#include "daemon/cli/format.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <set>

#include <yaml-cpp/yaml.h>

#include "core/knob_catalogue.h"

namespace soartune::cli {

namespace {

// printf into a string: every number this file prints fits in 63 characters.
[[gnu::format(printf, 1, 2)]] std::string printed(const char* format, ...) {
  char buf[64];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

}  // namespace

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s <= 0) return "-";
  // Round to 3 significant digits first, so 9.996 prints as "10.0", not "10.00".
  int p = static_cast<int>(std::floor(std::log10(s)));
  const double unit = std::pow(10.0, p - 2);
  const double r = std::round(s / unit) * unit;
  p = static_cast<int>(std::floor(std::log10(r)));
  return printed("%.*f", std::max(0, 2 - p), r);
}

std::string fmt_trial_timings(const v1::TrialTimings& t) {
  if (!(t.load_s() > 0)) return "";
  std::string parts;
  auto part = [&parts](const char* name, double s) {
    if (!(s > 0)) return;
    parts += (parts.empty() ? "" : ", ") + std::string(name) + " " + fmt_duration(s);
  };
  part("weights", t.weights_s());
  part("quantise", t.quantize_s());
  part("engine", t.prepare_s());
  std::string out = "load " + fmt_duration(t.load_s()) + " s";
  if (!parts.empty()) out += " (" + parts + ")";
  if (t.accuracy_s() > 0) out += ", accuracy " + fmt_duration(t.accuracy_s()) + " s";
  if (t.tiers_s() > 0) out += ", tiers " + fmt_duration(t.tiers_s()) + " s";
  return out;
}

std::string fmt_score(double score) {
  return printed("%.2f", score);
}

std::string fmt_accuracy(double pct) {
  return printed("%.2f%%", pct);
}

std::string fmt_percent(double p) {
  const double pct = 100.0 * p;
  return pct >= 9.95 || pct == 0 ? printed("%.0f%%", pct) : printed("%.1f%%", pct);
}

std::string fmt_gate(double c) {
  return printed("%g", c);
}

std::string fmt_bytes(int64_t bytes) {
  if (bytes <= 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? printed("%.0f %s", v, units[u]) : printed("%.1f %s", v, units[u]);
}

std::string fmt_time(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string fmt_elapsed(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  const auto ll = [](int64_t v) { return static_cast<long long>(v); };
  if (s < 60) return printed("%llds", ll(s));
  if (s < 3600) return printed("%lldm%02llds", ll(s / 60), ll(s % 60));
  return printed("%lldh%02lldm", ll(s / 3600), ll((s % 3600) / 60));
}

namespace {

std::string strip_prefix(std::string name, const std::string& prefix) {
  if (name.rfind(prefix, 0) == 0) name.erase(0, prefix.size());
  return name;
}

}  // namespace

std::string state_name(v1::JobState s) {
  if (s == v1::JOB_STATE_UNSPECIFIED) return "UNKNOWN";
  return strip_prefix(v1::JobState_Name(s), "JOB_");
}

std::string status_name(v1::TrialStatus s) {
  if (s == v1::TRIAL_STATUS_UNSPECIFIED) return "UNKNOWN";
  return strip_prefix(v1::TrialStatus_Name(s), "TRIAL_");
}

std::string failure_name(v1::FailureKind k) {
  if (k == v1::FAILURE_KIND_UNSPECIFIED) return "";
  std::string name = strip_prefix(v1::FailureKind_Name(k), "FAILURE_");
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

bool is_terminal(v1::JobState s) {
  return s == v1::JOB_SUCCEEDED || s == v1::JOB_FAILED || s == v1::JOB_CANCELLED;
}

double tier_duration(const v1::Trial& t, const std::string& tier) {
  for (const auto& m : t.tiers()) {
    if (m.tier() == tier) return m.duration_s();
  }
  return 0;
}

std::vector<std::string> tier_names(const std::vector<const v1::Trial*>& trials) {
  std::vector<std::string> names;
  for (const v1::Trial* t : trials) {
    for (const auto& m : t->tiers()) {
      if (std::find(names.begin(), names.end(), m.tier()) == names.end()) names.push_back(m.tier());
    }
  }
  if (names.empty()) names = {"c1", "c8", "cinf"};
  return names;
}

std::vector<std::string> varying_params(
    const std::vector<const google::protobuf::Map<std::string, std::string>*>& sets) {
  std::set<std::string> all;
  for (const auto* s : sets) {
    for (const auto& [k, v] : *s) all.insert(k);
  }
  std::vector<std::string> out;
  for (const std::string& k : all) {
    if (sets.size() < 2) {
      out.push_back(k);
      continue;
    }
    const std::string* first = nullptr;
    bool missing = false, differs = false;
    for (const auto* s : sets) {
      auto it = s->find(k);
      if (it == s->end()) {
        missing = true;
        continue;
      }
      if (!first) {
        first = &it->second;
      } else if (*first != it->second) {
        differs = true;
      }
    }
    if (missing || differs) out.push_back(k);
  }
  return out;
}

std::string params_brief(const google::protobuf::Map<std::string, std::string>& params,
                         const std::vector<std::string>& names) {
  std::vector<std::string> keys = names;
  if (keys.empty()) {
    for (const auto& [k, v] : params) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
  }
  std::string out;
  for (const std::string& k : keys) {
    auto it = params.find(k);
    if (it == params.end()) continue;
    if (!out.empty()) out += ' ';
    out += k + "=" + it->second;
  }
  return out;
}

std::string params_vs(const google::protobuf::Map<std::string, std::string>& params,
                      const google::protobuf::Map<std::string, std::string>& reference) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : params) {
    auto it = reference.find(k);
    if (it == reference.end() || it->second != v) keys.push_back(k);
  }
  std::sort(keys.begin(), keys.end());
  if (keys.empty()) return "(reference)";
  return params_brief(params, keys);
}

std::vector<std::string> space_params(const std::string& spec_yaml) {
  std::vector<std::string> out;
  try {
    YAML::Node spec = YAML::Load(spec_yaml);
    if (!spec.IsMap() || !spec["space"] || !spec["space"].IsMap()) return out;
    for (const auto& kv : spec["space"]) out.push_back(kv.first.as<std::string>());
  } catch (const std::exception&) {
    out.clear();
  }
  return out;
}

std::string knob_header(const std::string& knob) {
  const core::KnobSpec* k = core::find_knob(knob);
  return k ? k->short_name : knob;
}

std::vector<double> gate_levels(const v1::Job* job) {
  if (!job) return {};
  return {job->gate_levels().begin(), job->gate_levels().end()};
}

std::vector<std::string> gate_labels(const std::vector<double>& levels, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(levels.size() == n ? "P(C=" + fmt_gate(levels[i]) + ")" : "P(gate " + std::to_string(i) + ")");
  }
  return out;
}

// ---- Table ----

void Table::add_column(std::string header, Align align) {
  headers_.push_back(std::move(header));
  align_.push_back(align);
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::print(std::ostream& out) const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    width[c] = display_width(headers_[c]);
    for (const auto& row : rows_) width[c] = std::max(width[c], display_width(row[c]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < cells.size(); ++c) {
      const size_t pad = width[c] - display_width(cells[c]);
      const bool last = c + 1 == cells.size();
      if (c > 0) s += "  ";
      if (align_[c] == kRight) {
        s += std::string(pad, ' ') + cells[c];
      } else {
        s += cells[c];
        if (!last) s += std::string(pad, ' ');
      }
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << "\n";
  };
  line(headers_);
  for (const auto& row : rows_) line(row);
}

size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char ch : s) {
    if ((ch & 0xC0) != 0x80) ++n;
  }
  return n;
}

std::string truncate(const std::string& s, size_t width) {
  std::string flat;
  for (char ch : s) flat += (ch == '\n' || ch == '\r' || ch == '\t') ? ' ' : ch;
  while (!flat.empty() && flat.back() == ' ') flat.pop_back();
  if (display_width(flat) <= width) return flat;
  std::string out;
  size_t n = 0;
  for (size_t i = 0; i < flat.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(flat[i]);
    if ((ch & 0xC0) != 0x80) {
      if (n + 3 >= width) break;
      ++n;
    }
    out += flat[i];
  }
  return out + "...";
}

}  // namespace soartune::cli
