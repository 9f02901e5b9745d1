// Where the CLI finds a model when --model is not given.
#pragma once

#include <string>

namespace tachyon::cli {

// `flag` when non-empty; else models/tiny-kjv-chat next to the executable's
// directory's parent (the source tree of a build/ folder), then under the current
// directory. Throws NotFound naming the places tried.
std::string resolve_model_dir(const std::string& flag);

}  // namespace tachyon::cli
