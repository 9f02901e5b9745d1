// Progress while `tachyon serve` loads a model: a bar redrawn in place on a terminal,
// plain log lines otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tachyon::cli {

class LoadProgress {
 public:
  explicit LoadProgress(bool enabled);
  // done/total in bytes when total > 0; a stage name otherwise.
  void update(double done, double total, const std::string& stage);
  void finish();

 private:
  bool tty_;
  bool enabled_;
  std::string stage_;
  int last_percent_ = -1;
  double last_draw_ms_ = 0;
};

// The checkpoint's weight files: their bytes (what the loader maps), and how many of
// those prefetch_weights() read ahead.
struct WeightBytes {
  double files = 0;
  double read = 0;
};
// Reads the checkpoint's weight files once, sequentially, so that the loader's mmap
// finds them in the page cache; reports bytes read. Skipped (read stays 0) when the files
// would not fit in the memory available. Logs what was mapped and read either way.
WeightBytes prefetch_weights(const std::string& model_dir, LoadProgress& progress);

}  // namespace tachyon::cli
