#include "cli/load_progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/logging.h"

namespace tachyon::cli {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

std::string gib(double bytes) {
  char buf[32];
  if (bytes >= 1e9) {
    std::snprintf(buf, sizeof(buf), "%.2f GB", bytes / 1e9);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / 1e6);
  }
  return buf;
}

}  // namespace

LoadProgress::LoadProgress(bool enabled) : tty_(isatty(STDERR_FILENO) != 0), enabled_(enabled) {}

void LoadProgress::update(double done, double total, const std::string& stage) {
  if (!enabled_) return;
  if (total <= 0) {
    if (stage == stage_) return;
    if (tty_ && last_percent_ >= 0) std::fputc('\n', stderr);
    last_percent_ = -1;
    stage_ = stage;
    log_info("loading: {}", stage);
    return;
  }
  int percent = static_cast<int>(100.0 * done / total);
  if (stage != stage_) {
    stage_ = stage;
    last_percent_ = -1;
  }
  if (tty_) {
    double t = now_ms();
    if (percent == last_percent_ && t - last_draw_ms_ < 100) return;
    last_draw_ms_ = t;
    constexpr int kWidth = 30;
    int filled = percent * kWidth / 100;
    std::fprintf(stderr, "\rloading %s [%.*s%*s] %3d%% %s / %s", stage.c_str(), filled,
                 "==============================", kWidth - filled, "", percent, gib(done).c_str(),
                 gib(total).c_str());
    std::fflush(stderr);
    last_percent_ = percent;
  } else if (percent / 10 != last_percent_ / 10 || last_percent_ < 0) {
    log_info("loading {}: {}% ({} / {})", stage, percent, gib(done), gib(total));
    last_percent_ = percent;
  }
}

void LoadProgress::finish() {
  if (enabled_ && tty_ && last_percent_ >= 0) std::fputc('\n', stderr);
  last_percent_ = -1;
}

WeightBytes prefetch_weights(const std::string& model_dir, LoadProgress& progress) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  double total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(model_dir, ec)) {
    auto ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".safetensors" || ext == ".bin" || ext == ".pt")) {
      files.push_back(e.path());
      total += static_cast<double>(e.file_size());
    }
  }
  if (files.empty()) return {};
  if (total > 0.5 * static_cast<double>(mem_available_bytes())) {
    log_info("weights: {} in the checkpoint's files, mapped and read as the model touches them",
             gib(total));
    return {total, 0};
  }
  std::vector<char> buf(8u << 20);
  double done = 0;
  for (const auto& f : files) {
    int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // the loader reports unreadable files properly
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (;;) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n <= 0) break;
      done += static_cast<double>(n);
      progress.update(done, total, "weights");
    }
    ::close(fd);
  }
  progress.update(total, total, "weights");
  progress.finish();
  log_info("weights: {} in the checkpoint's files, {} read ahead into the page cache", gib(total),
           gib(done));
  return {total, done};
}

}  // namespace tachyon::cli
