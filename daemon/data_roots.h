// The directories under which soartuned reads what a job spec names (models, accuracy sets, workloads), so that
// a client cannot make the daemon read, or tell the existence of, any other file on its host.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace soartune::daemon {

// `path` (relative to the daemon's working directory) with every symlink resolved, as far as it exists.
// Ok when that lies under one of `roots` (themselves resolved); else kPermissionDenied naming `field`, the path
// as given and the roots, and nothing read from the file. An empty `roots` confines nothing.
soartune::Result<std::string> confine_to_data_roots(const std::string& path, const std::vector<std::string>& roots,
                                                    const std::string& field);

}  // namespace soartune::daemon
