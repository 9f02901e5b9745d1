#include "cli/model_dir.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "core/settings.h"

namespace tachyon::cli {

std::string resolve_model_dir(const std::string& flag) {
  namespace fs = std::filesystem;
  if (!flag.empty()) return flag;
  const fs::path rel = fs::path("models") / "tiny-kjv-chat";
  std::vector<fs::path> roots;
  if (auto home = setting_env("home")) roots.emplace_back(*home);
  std::error_code ec;
  roots.push_back(fs::current_path(ec));
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    roots.push_back(exe.parent_path().parent_path());
    roots.push_back(exe.parent_path().parent_path() / "share" / "tachyon");
  }
  for (const auto& r : roots)
    if (fs::exists(r / rel / "config.json", ec)) return (r / rel).string();
  std::string where;
  for (const auto& r : roots) where += (where.empty() ? "" : ", ") + (r / rel).string();
  raise<NotFound>("no --model given and the bundled demo model was not found (looked in {})",
                  where);
}

}  // namespace tachyon::cli
