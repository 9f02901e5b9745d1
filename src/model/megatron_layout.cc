// Finding a Megatron-LM checkpoint's iteration folder and its shards (model/megatron.h).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "model/megatron.h"

namespace tachyon {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTracker = "latest_checkpointed_iteration.txt";
constexpr const char* kShardFiles[] = {"model_optim_rng.pt", "model_rng.pt"};

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::vector<fs::directory_entry> entries(const fs::path& dir) {
  std::vector<fs::directory_entry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e);
  if (ec) raise<InvalidArgument>("cannot list {}: {}", dir.string(), ec.message());
  return out;
}

bool has_shards(const fs::path& dir) {
  static const std::regex re(R"(^mp_rank_\d{2}(_\d{3})?(_model_states\.pt)?$)");
  if (!is_dir(dir)) return false;
  for (const auto& e : entries(dir))
    if (std::regex_match(e.path().filename().string(), re)) return true;
  return false;
}

// The iteration folder a run folder's tracker file names.
fs::path tracked_iteration(const fs::path& run) {
  const fs::path tracker = run / kTracker;
  std::ifstream f(tracker);
  if (!f) raise<NotFound>("cannot read {}", tracker.string());
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (text.size() > 64) raise<InvalidArgument>("{}: not an iteration number", tracker.string());
  text.erase(0, text.find_first_not_of(" \t\r\n"));
  text.erase(text.find_last_not_of(" \t\r\n") + 1);
  fs::path dir;
  if (text == "release") {
    dir = run / "release";
  } else {
    if (text.empty() || text.size() > 12 || text.find_first_not_of("0123456789") != text.npos)
      raise<InvalidArgument>("{}: '{}' is neither 'release' nor an iteration number",
                             tracker.string(), text);
    char name[32];
    std::snprintf(name, sizeof name, "iter_%07lld", std::stoll(text));
    dir = run / name;
  }
  if (!is_dir(dir))
    raise<NotFound>("{} names iteration '{}', but {} is not there", tracker.string(), text,
                    dir.string());
  return dir;
}

}  // namespace

const MegatronShard* MegatronLayout::find(int32_t tp, int32_t pp) const {
  for (const auto& s : shards)
    if (s.tp == tp && s.pp == pp) return &s;
  return nullptr;
}

bool is_megatron_checkpoint(const std::string& dir) {
  if (!is_dir(dir) || is_file(fs::path(dir) / "config.json")) return false;
  return is_file(fs::path(dir) / kTracker) || has_shards(dir);
}

MegatronLayout find_megatron_layout(const std::string& dir) {
  const fs::path root(dir);
  if (!is_dir(root)) raise<NotFound>("model directory not found: {}", dir);
  const fs::path iter = is_file(root / kTracker) ? tracked_iteration(root) : root;
  MegatronLayout out;
  out.dir = iter.string();
  static const std::regex folder_re(R"(^mp_rank_(\d{2})(_(\d{3}))?$)");
  static const std::regex file_re(R"(^mp_rank_(\d{2})_model_states\.pt$)");
  bool plain = false;
  for (const auto& e : entries(iter)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    MegatronShard s;
    if (std::regex_match(name, m, folder_re) && is_dir(e.path())) {
      s.tp = std::stoi(m[1]);
      s.pp = m[3].matched ? std::stoi(m[3]) : 0;
      (m[3].matched ? out.pipeline_named : plain) = true;
      for (const char* f : kShardFiles)
        if (s.path.empty() && is_file(e.path() / f)) s.path = (e.path() / f).string();
      if (s.path.empty())
        raise<NotFound>("{}: no model_optim_rng.pt (or model_rng.pt) in the shard folder",
                        e.path().string());
    } else if (std::regex_match(name, m, file_re) && is_file(e.path())) {
      s.tp = std::stoi(m[1]);
      s.path = e.path().string();
      plain = true;
    } else {
      continue;
    }
    if (out.find(s.tp, s.pp))
      raise<InvalidArgument>("{}: two shards for tensor rank {}, pipeline rank {}", out.dir, s.tp,
                             s.pp);
    out.shards.push_back(std::move(s));
  }
  if (out.shards.empty())
    raise<NotFound>("{}: no Megatron shards (mp_rank_TT/ or mp_rank_TT_PPP/ folders)", out.dir);
  if (plain && out.pipeline_named)
    raise<InvalidArgument>("{}: mp_rank_TT and mp_rank_TT_PPP shards mixed", out.dir);
  std::sort(out.shards.begin(), out.shards.end(), [](const auto& a, const auto& b) {
    return std::tie(a.pp, a.tp) < std::tie(b.pp, b.tp);
  });
  return out;
}

}  // namespace tachyon
