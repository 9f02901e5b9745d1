#include "cli/lora_options.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "frontend/adapter_names.h"

namespace tachyon::cli {
namespace {

bool is_json(const std::string& item) {
  const size_t first = item.find_first_not_of(" \t\n\r");
  return first != std::string::npos && (item[first] == '{' || item[first] == '[');
}

Json parse_item_json(const std::string& item, const std::string& where) {
  return parse_json(item, where, 8);
}

// RTP-LLM's LORA_INFO: {"NAME": "DIR", ...}.
void read_lora_info(const std::string& value, std::vector<AdapterInfo>& out) {
  const Json j = parse_item_json(value, "LORA_INFO");
  if (!j.is_object())
    raise<InvalidArgument>("LORA_INFO must be a JSON object {{\"NAME\": \"DIR\", ...}}, not {}",
                           json_type_name(j));
  for (const auto& [name, path] : j.items()) {
    if (!path.is_string())
      raise<InvalidArgument>("LORA_INFO: the path of adapter '{}' must be a string, not {}", name,
                             json_type_name(path));
    out.push_back({name, path.get<std::string>()});
  }
}

// NAME=DIR, or vLLM's JSON item {"name": NAME, "path": DIR}.
AdapterInfo read_item(const std::string& item, const std::string& where) {
  if (is_json(item)) {
    const Json j = parse_item_json(item, where);
    if (!j.is_object() || !j.contains("name") || !j.contains("path"))
      raise<InvalidArgument>("{}: '{}' must be NAME=DIR or {{\"name\": NAME, \"path\": DIR}}",
                             where, item);
    for (const auto& [key, value] : j.items()) {
      if (key != "name" && key != "path")
        raise<InvalidArgument>("{}: unknown key '{}' in '{}' (only name and path are read)", where,
                               key, item);
      if (!value.is_string())
        raise<InvalidArgument>("{}: \"{}\" must be a string in '{}'", where, key, item);
    }
    return {j["name"].get<std::string>(), j["path"].get<std::string>()};
  }
  const size_t eq = item.find('=');
  if (eq == std::string::npos)
    raise<InvalidArgument>("{}: '{}' must be NAME=DIR (or {{\"name\": NAME, \"path\": DIR}})",
                           where, item);
  return {item.substr(0, eq), item.substr(eq + 1)};
}

}  // namespace

LoraOptions lora_options(const SettingValues& v) {
  LoraOptions o;
  const std::string source = v.source("lora");
  if (v.given("lora")) {
    for (const std::string& item : v.list("lora")) {
      if (source == "LORA_INFO") {
        read_lora_info(item, o.adapters);
      } else {
        o.adapters.push_back(read_item(item, source));
      }
    }
  }
  std::set<std::string> names;
  for (const AdapterInfo& a : o.adapters) {
    if (const std::string problem = adapter_name_problem(a.name); !problem.empty())
      raise<InvalidArgument>("{}: {}", source, problem);
    if (a.path.empty())
      raise<InvalidArgument>("{}: adapter '{}' has an empty path", source, a.name);
    if (!names.insert(a.name).second)
      raise<InvalidArgument>("{}: adapter '{}' is given twice", source, a.name);
  }
  o.merge = v.flag("merge-lora");
  const bool enable = v.flag("enable-lora");
  if (o.merge) {
    if (o.adapters.size() != 1)
      raise<InvalidArgument>("--merge-lora folds exactly one adapter into the weights; {} given",
                             o.adapters.size());
    if (enable)
      raise<InvalidArgument>(
          "--merge-lora does not mix with --enable-lora (a merged adapter is not selectable)");
  }
  o.enabled = !o.merge && (enable || !o.adapters.empty());
  o.max_loras = static_cast<int32_t>(v.integer("max-loras"));
  o.max_rank = static_cast<int32_t>(v.integer("max-lora-rank"));
  if (v.given("max-cpu-loras")) {
    o.max_registered = static_cast<int32_t>(v.integer("max-cpu-loras"));
    if (o.max_registered < o.max_loras)
      raise<InvalidArgument>("{} ({}) must be at least --max-loras ({})", v.source("max-cpu-loras"),
                             o.max_registered, o.max_loras);
  } else {
    o.max_registered = std::max(o.max_registered, o.max_loras);
  }
  if (static_cast<int64_t>(o.adapters.size()) > o.max_registered)
    raise<InvalidArgument>("{} adapters given; --max-cpu-loras allows {}", o.adapters.size(),
                           o.max_registered);
  return o;
}

}  // namespace tachyon::cli
