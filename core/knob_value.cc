#include "core/knob_value.h"

#include <charconv>
#include <sstream>

namespace soartune {

std::string to_text(const Value& v) {
  if (const bool* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const int64_t* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  return std::get<std::string>(v);
}

Value value_from_text(const std::string& text) {
  if (text == "true" || text == "True") return true;
  if (text == "false" || text == "False") return false;
  int64_t i = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, i);
  if (!text.empty() && ec == std::errc() && ptr == end) return i;
  return text;
}

std::map<std::string, std::string> to_text(const Config& c) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : c) m[k] = to_text(v);
  return m;
}

Config config_from_text(const std::map<std::string, std::string>& m) {
  Config c;
  for (const auto& [k, v] : m) c[k] = value_from_text(v);
  return c;
}

std::string config_key(const Config& c) {
  std::ostringstream os;
  for (const auto& [k, v] : c) os << k << '=' << to_text(v) << ';';
  return os.str();
}

}  // namespace soartune
