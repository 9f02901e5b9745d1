// Where the CLI finds a model when --model is not given.
#pragma once

#include <string>

namespace tachyon::cli {

// `flag` when non-empty; else the bundled demo model, models/tiny-kjv-chat, under
// $TACHYON_HOME, then the current directory, then the executable's directory's parent
// (the source tree of a build/ folder) and its share/tachyon. Throws NotFound naming
// the places tried.
std::string resolve_model_dir(const std::string& flag);

}  // namespace tachyon::cli
