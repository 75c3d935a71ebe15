// `soartune-worker --trial FILE --write-checkpoint DIR`: the trial's model quantised under the trial's launch
// config, written as a GPTQ checkpoint into DIR (engine/gptq_checkpoint.h). Prints one JSON line,
// {"ok": true, "dir": DIR, "files": [...]} (exit 0) or {"ok": false, "error": MESSAGE} (exit 2): the daemon's
// bundle export reads it.
#pragma once

#include <string>

namespace soartune::engine::worker {

int write_checkpoint(const std::string& trial_path, const std::string& dir);

}  // namespace soartune::engine::worker
