// The conformance fixtures for the tests: a fixture folder holds its config, its
// reference outputs (a twin names the fixture whose logits it shares) and a weights.json
// manifest; its checkpoint is materialised once per process into the build tree
// (TACHYON_BINARY_DIR/fixtures, or /tmp/tachyon-fixtures where the build tree is absent,
// as on a machine running a copied test binary). A fixture that stores its weights
// (the file-format cases) is used in place.
//
// Several test processes may materialise the same fixture at once: each writes into a
// folder of its own and renames it into place, so none ever sees a half-written one. The
// folder's name carries a checksum of the manifest and the copied files, so a changed
// fixture gets a fresh folder.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "model/fixture_weights.h"

namespace tachyon::testing_util {

inline std::string fixtures_source_dir() {
  return std::string(TACHYON_SOURCE_DIR) + "/tests/conformance/fixtures";
}

// Every fixture folder (one with a config.json) directly under the fixtures folder, or
// under its subfolder `group` (named "group/NAME" then, as "quant/gptq_sym"), sorted.
inline std::vector<std::string> fixture_names(const std::string& group = "") {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  const fs::path root =
      group.empty() ? fs::path(fixtures_source_dir()) : fs::path(fixtures_source_dir()) / group;
  if (!fs::is_directory(root)) return names;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && fs::exists(e.path() / "config.json"))
      names.push_back((group.empty() ? "" : group + "/") + e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline std::string read_file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) raise<NotFound>("cannot open {}", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::filesystem::path fixtures_build_root() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path root = fs::path(TACHYON_BINARY_DIR);
  if (fs::is_directory(root, ec) && ::access(root.c_str(), W_OK) == 0) return root / "fixtures";
  return fs::temp_directory_path() / "tachyon-fixtures";
}

// The folder of fixture `name`'s source files (config, manifest, references).
inline std::string fixture_source_dir(const std::string& name) {
  return fixtures_source_dir() + "/" + name;
}

// The fixture's reference logits: its own reference.safetensors, or that of the fixture
// its manifest names under "references" (a twin computes exactly what its source does).
inline std::string fixture_reference_logits(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path manifest = fs::path(fixture_source_dir(name)) / "weights.json";
  std::string refs;
  if (fs::exists(manifest)) refs = load_fixture_manifest(manifest.string()).references;
  return fixture_source_dir(refs.empty() ? name : refs) + "/reference.safetensors";
}

// A folder with the fixture's complete checkpoint (config and weights), loadable by the
// public loading path.
inline std::string fixture(const std::string& name) {
  namespace fs = std::filesystem;
  static std::mutex mu;
  static std::map<std::string, std::string> done;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = done.find(name); it != done.end()) return it->second;
  const fs::path src = fixture_source_dir(name);
  const fs::path manifest_path = src / "weights.json";
  if (!fs::exists(manifest_path)) return done[name] = src.string();

  const std::string manifest_text = read_file_bytes(manifest_path);
  std::map<std::string, std::string> copies;  // the folder's other files, as they are
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string f = e.path().filename().string();
    if (!e.is_regular_file() || f == "weights.json" || f.rfind("reference", 0) == 0) continue;
    copies[f] = read_file_bytes(e.path());
  }
  std::string key = manifest_text;
  for (const auto& [f, bytes] : copies) key += f + '\0' + bytes;
  const fs::path root = fixtures_build_root();
  std::string flat = name;  // a grouped fixture's folder sits beside the others
  std::replace(flat.begin(), flat.end(), '/', '.');
  const fs::path final_dir = root / fmt::format("{}-{:016x}", flat, fnv1a64(key));
  std::error_code ec;
  if (!fs::exists(final_dir / ".complete", ec)) {
    static std::atomic<int> counter{0};
    const fs::path tmp =
        root / fmt::format(".{}.tmp.{}.{}", flat, ::getpid(), counter.fetch_add(1));
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp);
    write_fixture_weights(parse_fixture_manifest(manifest_text), tmp.string());
    for (const auto& [f, bytes] : copies) {
      std::ofstream out(tmp / f, std::ios::binary);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out) raise<InvalidArgument>("cannot write {}", (tmp / f).string());
    }
    std::ofstream(tmp / ".complete").put('\n');
    fs::rename(tmp, final_dir, ec);  // fails when another process got there first
    if (ec) fs::remove_all(tmp, ec);
    if (!fs::exists(final_dir / ".complete"))
      raise<InvalidArgument>("could not materialise fixture {} into {}", name, final_dir.string());
  }
  return done[name] = final_dir.string();
}

}  // namespace tachyon::testing_util
