#include "core/bearer_token.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace soartune {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

}  // namespace

Result<std::string> read_bearer_token(const std::string& token_file, const std::string& field) {
  if (token_file.empty()) {
    const char* env = std::getenv(kTokenEnv);
    return trim(env ? env : "");
  }
  std::ifstream in(token_file, std::ios::binary);
  if (!in) return Status::Invalid(field + ": cannot read " + token_file);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token = trim(ss.str());
  if (token.empty()) return Status::Invalid(field + ": " + token_file + " is empty or holds only blanks");
  return token;
}

}  // namespace soartune
