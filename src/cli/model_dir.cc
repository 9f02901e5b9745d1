#include "cli/model_dir.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace tachyon::cli {

std::string resolve_model_dir(const std::string& flag) {
  namespace fs = std::filesystem;
  if (!flag.empty()) return flag;
  const fs::path rel = fs::path("models") / "tiny-kjv-chat";
  std::vector<fs::path> tried;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back(exe.parent_path().parent_path() / rel);
  tried.push_back(fs::current_path(ec) / rel);
  for (const auto& p : tried)
    if (fs::exists(p / "config.json", ec)) return p.string();
  std::string where;
  for (const auto& p : tried) where += (where.empty() ? "" : ", ") + p.string();
  raise<NotFound>("no --model given and the default model was not found (looked in {})", where);
}

}  // namespace tachyon::cli
