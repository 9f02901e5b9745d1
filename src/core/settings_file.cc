#include "core/settings_file.h"

#include <yaml-cpp/yaml.h>

#include "core/error.h"

namespace tachyon {
namespace {

std::string scalar(const YAML::Node& n, const std::string& what) {
  if (!n.IsScalar()) raise<InvalidArgument>("{}: expected a single value", what);
  return n.Scalar();
}

}  // namespace

std::vector<std::pair<std::string, std::vector<std::string>>> read_settings_file(
    const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    raise<InvalidArgument>("--config: cannot read '{}'", path);
  } catch (const YAML::Exception& e) {
    raise<InvalidArgument>("--config {}: {}", path, e.what());
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  if (root.IsNull()) return out;
  if (!root.IsMap())
    raise<InvalidArgument>("--config {}: expected a mapping of setting names to values", path);
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = scalar(it->first, "--config " + path + ": a key");
    const std::string what = "--config " + path + ": " + key;
    std::vector<std::string> values;
    if (it->second.IsSequence()) {
      for (const auto& item : it->second) values.push_back(scalar(item, what));
    } else {
      values.push_back(scalar(it->second, what));
    }
    out.emplace_back(key, std::move(values));
  }
  return out;
}

}  // namespace tachyon
