// Tokenizer benchmark: load time of each tokenizer and single-thread encode throughput
// (MB/s of UTF-8 input) on ~10 MB of English and of mixed-script text.
//
// Text: the gettext catalogs Debian packages install under /usr/share/locale — their
// msgid strings are English, their translations cover dozens of scripts — concatenated
// (repeated if needed) to the requested size.
//
// Each figure is the median of --reps repetitions (a fresh load, then encoding both texts),
// with the 10th percentile of the time in brackets (MB/s: at that time).
//
// Usage: tokenizer_bench [--tokenizers DIR] [--mb N] [--reps N] [--throughput a,b,...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/mmap.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU time of this thread / of the whole process: on a shared machine wall-clock time
// mostly measures the other jobs.
double thread_cpu() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
double process_cpu() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Appends the original (English) and translated strings of one .mo catalog.
void read_mo(const std::string& path, std::string& english, std::string& translated) {
  std::string data;
  try {
    data = tachyon::read_file(path, 64u << 20);
  } catch (...) {
    return;
  }
  if (data.size() < 28) return;
  uint32_t magic, n, orig, trans;
  std::memcpy(&magic, data.data(), 4);
  if (magic != 0x950412DEu) return;
  std::memcpy(&n, data.data() + 8, 4);
  std::memcpy(&orig, data.data() + 12, 4);
  std::memcpy(&trans, data.data() + 16, 4);
  auto get = [&](uint32_t table, uint32_t i, std::string& out) {
    uint64_t at = uint64_t(table) + 8ull * i;
    if (at + 8 > data.size()) return;
    uint32_t len, off;
    std::memcpy(&len, data.data() + at, 4);
    std::memcpy(&off, data.data() + at + 4, 4);
    if (uint64_t(off) + len > data.size()) return;
    out.append(data, off, len);
    out.push_back('\n');
  };
  for (uint32_t i = 1; i < n; ++i) {
    get(orig, i, english);
    get(trans, i, translated);
  }
}

// The q-quantile (nearest rank) of `v`: 0.5 the median, 0.1 the 10th percentile.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}

std::string grow(std::string s, size_t bytes) {
  if (s.empty()) s = "The quick brown fox jumps over the lazy dog. ";
  std::string out;
  while (out.size() < bytes) out.append(s, 0, std::min(s.size(), bytes - out.size()));
  // Cut at a character boundary.
  while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
  if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "build/tokenizers";
  double mb = 10;
  int reps = 5;
  std::vector<std::string> names = {"llama3", "gemma3", "qwen3", "llama2", "gpt4o", "deepseek_v3"};
  std::set<std::string> throughput = {"llama3", "gemma3"};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizers")) dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--mb")) mb = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--throughput")) {
      throughput.clear();
      std::string s = argv[i + 1];
      for (size_t p = 0; p <= s.size();) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        throughput.insert(s.substr(p, q - p));
        p = q + 1;
      }
    }
  }
  std::string english, mixed;
  for (const auto& e : std::filesystem::recursive_directory_iterator("/usr/share/locale")) {
    if (e.path().extension() == ".mo") read_mo(e.path().string(), english, mixed);
    if (english.size() > 12e6 && mixed.size() > 12e6) break;
  }
  const size_t bytes = static_cast<size_t>(mb * 1e6);
  english = grow(english, bytes);
  mixed = grow(mixed, bytes);
  std::printf("text: %.1f MB English, %.1f MB mixed-script; MB/s per thread-CPU-second (wall)\n",
              english.size() / 1e6, mixed.size() / 1e6);
  std::printf("%d repetitions: median [p10] (median wall)\n", reps);
  std::printf("%-12s %24s %24s %24s %14s\n", "tokenizer", "load cpu_s", "english MB/s",
              "mixed MB/s", "tokens/byte");
  for (const auto& name : names) {
    const std::string path = dir + "/" + name;
    if (!std::filesystem::exists(path)) {
      std::printf("%-18s missing (run scripts/fetch_tokenizers.sh %s)\n", name.c_str(),
                  dir.c_str());
      continue;
    }
    // Each repetition loads the tokenizer afresh and encodes both texts with it (an
    // empty word cache, as the first encode after a load).
    std::vector<double> load, load_wall, enc[2], enc_wall[2];
    double per_byte[2] = {0, 0};
    const std::string* texts[2] = {&english, &mixed};
    for (int r = 0; r < reps; ++r) {
      std::unique_ptr<tachyon::Tokenizer> tok;
      auto t0 = Clock::now();
      double c0 = process_cpu();
      tok = tachyon::Tokenizer::load(path);
      load.push_back(process_cpu() - c0);
      load_wall.push_back(seconds_since(t0));
      if (!throughput.count(name)) continue;
      for (int k = 0; k < 2; ++k) {
        auto t1 = Clock::now();
        double c1 = thread_cpu();
        auto ids = tok->encode(*texts[k], false);
        enc[k].push_back(thread_cpu() - c1);
        enc_wall[k].push_back(seconds_since(t1));
        per_byte[k] = double(ids.size()) / texts[k]->size();
      }
    }
    std::printf("%-12s %7.3f [%5.3f] (%6.3f)", name.c_str(), quantile(load, 0.5),
                quantile(load, 0.1), quantile(load_wall, 0.5));
    if (throughput.count(name)) {
      for (int k = 0; k < 2; ++k) {
        const double mb = texts[k]->size() / 1e6;
        std::printf(" %8.2f [%6.2f] (%6.2f)", mb / quantile(enc[k], 0.5),
                    mb / quantile(enc[k], 0.1), mb / quantile(enc_wall[k], 0.5));
      }
      std::printf("   %.3f, %.3f", per_byte[0], per_byte[1]);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
