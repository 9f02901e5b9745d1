#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

#include "core/checked.h"
#include "core/error.h"
#include "core/json.h"
#include "core/logging.h"
#include "core/mmap.h"

namespace tachyon {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> list_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code ec2;
    if (e.is_regular_file(ec2)) out.push_back(e.path().filename().string());
  }
  if (ec) raise<InvalidArgument>("cannot list {}: {}", dir, ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

std::string join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// A shard file name from an index must name a file in the same folder.
void check_shard_name(const std::string& index, const std::string& file) {
  if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
      file.find('\\') != std::string::npos || file.find('\0') != std::string::npos)
    raise<InvalidArgument>("{}: invalid shard file name '{}'", index, file);
}

// Files named <stem>-NNNNN-of-MMMMM.<ext>, checked for completeness: every number from
// 1 to MMMMM must be present.
std::vector<std::string> numbered_shards(const std::string& dir,
                                         const std::vector<std::string>& files,
                                         const std::string& ext) {
  static const std::regex re(R"(^(.+)-(\d+)-of-(\d+)\.([A-Za-z]+)$)");
  std::map<std::pair<std::string, std::string>, std::set<std::string>> groups;
  for (const auto& f : files) {
    std::smatch m;
    if (std::regex_match(f, m, re) && m[4] == ext) groups[{m[1], m[3]}].insert(f);
  }
  std::vector<std::string> out;
  for (const auto& [key, names] : groups) {
    const auto& [stem, total] = key;
    if (total.size() > 6)
      raise<InvalidArgument>("{}: implausible shard count in {}", dir, *names.begin());
    int n = std::stoi(total);
    for (int i = 1; i <= n; ++i) {
      std::string want = fmt::format("{}-{:0{}}-of-{}.{}", stem, i, total.size(), total, ext);
      if (!names.count(want)) raise<NotFound>("{}: missing shard {}", dir, want);
      out.push_back(join(dir, want));
    }
  }
  return out;
}

struct WeightMap {
  std::map<std::string, std::string> name_to_file;
  std::vector<std::string> files;  // distinct, sorted
};

WeightMap load_index(const std::string& index) {
  Json j = load_json_file(index);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    raise<InvalidArgument>("{}: index needs a \"weight_map\" object", index);
  WeightMap wm;
  std::set<std::string> files;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      raise<InvalidArgument>("{}: weight_map entry for '{}' must be a file name", index, it.key());
    std::string file = it.value().get<std::string>();
    check_shard_name(index, file);
    wm.name_to_file[it.key()] = file;
    files.insert(file);
  }
  if (files.empty()) raise<InvalidArgument>("{}: weight_map is empty", index);
  wm.files.assign(files.begin(), files.end());
  return wm;
}

std::string pick_index(const std::vector<std::string>& files, const std::string& preferred,
                       std::string_view suffix) {
  if (std::find(files.begin(), files.end(), preferred) != files.end()) return preferred;
  for (const auto& f : files)
    if (ends_with(f, suffix)) return f;
  return "";
}

}  // namespace

std::unique_ptr<TensorSource> open_tensor_source(const std::string& path) {
  if (ends_with(path, ".safetensors")) return open_safetensors_source(path);
  if (ends_with(path, ".bin") || ends_with(path, ".pt") || ends_with(path, ".pth"))
    return open_torch_source(path);
  raise<InvalidArgument>("{}: unknown weights file type (want .safetensors or .bin)", path);
}

void Checkpoint::add_source(std::unique_ptr<TensorSource> source) {
  for (auto& info : source->tensors()) {
    auto it = entries_.find(info.name);
    if (it != entries_.end())
      raise<InvalidArgument>("tensor '{}' appears in both {} and {}", info.name,
                             it->second.info.file, source->path());
    std::string name = info.name;
    entries_.emplace(name, Entry{std::move(info), source.get()});
  }
  sources_.push_back(std::move(source));
}

std::unique_ptr<Checkpoint> Checkpoint::open_files(const std::vector<std::string>& files) {
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  for (const auto& f : files) ck->add_source(open_tensor_source(f));
  return ck;
}

std::unique_ptr<Checkpoint> Checkpoint::from_sources(
    std::vector<std::unique_ptr<TensorSource>> sources) {
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  for (auto& s : sources) ck->add_source(std::move(s));
  return ck;
}

namespace {

std::unique_ptr<Checkpoint> open_indexed(const std::string& dir, const std::string& index_name) {
  std::string index = join(dir, index_name);
  WeightMap wm = load_index(index);
  std::vector<std::string> paths;
  for (const auto& f : wm.files) {
    std::string p = join(dir, f);
    if (!file_exists(p)) raise<NotFound>("{}: shard {} not found", index, p);
    paths.push_back(p);
  }
  auto ck = Checkpoint::open_files(paths);
  for (const auto& [name, file] : wm.name_to_file) {
    std::string p = join(dir, file);
    if (!ck->contains(name))
      raise<InvalidArgument>("{}: tensor '{}' is mapped to {} which does not contain it", index,
                             name, p);
    if (ck->info(name).file != p)
      raise<InvalidArgument>("{}: tensor '{}' is mapped to {} but found in {}", index, name, p,
                             ck->info(name).file);
  }
  return ck;
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) return open_files({dir});
  if (!fs::is_directory(dir, ec)) raise<NotFound>("model directory not found: {}", dir);
  std::vector<std::string> files = list_files(dir);
  auto has = [&](const std::string& f) {
    return std::find(files.begin(), files.end(), f) != files.end();
  };
  std::string index = pick_index(files, "model.safetensors.index.json", ".safetensors.index.json");
  if (!index.empty()) return open_indexed(dir, index);
  if (has("model.safetensors")) return open_files({join(dir, "model.safetensors")});
  if (auto shards = numbered_shards(dir, files, "safetensors"); !shards.empty())
    return open_files(shards);
  index = pick_index(files, "pytorch_model.bin.index.json", ".bin.index.json");
  if (!index.empty()) return open_indexed(dir, index);
  if (has("pytorch_model.bin")) return open_files({join(dir, "pytorch_model.bin")});
  if (auto shards = numbered_shards(dir, files, "bin"); !shards.empty()) return open_files(shards);
  std::vector<std::string> any;
  for (const auto& f : files)
    if (ends_with(f, ".safetensors")) any.push_back(join(dir, f));
  if (!any.empty()) return open_files(any);
  raise<NotFound>(
      "no weights in {} (looked for *.safetensors, *.safetensors.index.json, "
      "pytorch_model.bin, pytorch_model.bin.index.json)",
      dir);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

bool Checkpoint::contains(const std::string& name) const {
  return entries_.count(name) > 0;
}

const TensorInfo& Checkpoint::info(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) raise<NotFound>("checkpoint has no tensor named '{}'", name);
  return it->second.info;
}

Tensor Checkpoint::get(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) raise<NotFound>("checkpoint has no tensor named '{}'", name);
  return it->second.source->get(name);
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, e] : entries_) {
    uint64_t n = static_cast<uint64_t>(shape_numel(e.info.shape));
    total += n * dtype_size(e.info.dtype);
  }
  return total;
}

std::vector<std::string> Checkpoint::files() const {
  std::vector<std::string> out;
  for (const auto& s : sources_) out.push_back(s->path());
  return out;
}

}  // namespace tachyon
