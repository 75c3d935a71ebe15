// The bearer token as soartuned (which requires it of every request) and the soartune CLI (which sends it) read
// it: from the token file when one is named, else from $SOARTUNE_TOKEN; blanks around it and the file's final
// newline are not part of it. One reading for both, so a file the daemon takes is one the CLI sends the same.
#pragma once

#include <string>

#include "core/status.h"

namespace soartune {

// The environment variable that may hold the bearer token, for the daemon and the CLI alike.
inline constexpr const char* kTokenEnv = "SOARTUNE_TOKEN";

// The token from `token_file` when it is not empty, else from $SOARTUNE_TOKEN ("" when that is unset or blank:
// no token). A token file that cannot be read or holds only blanks is an error naming `field` (the setting that
// named the file: "token_file", "--token-file") and the path.
Result<std::string> read_bearer_token(const std::string& token_file, const std::string& field);

}  // namespace soartune
