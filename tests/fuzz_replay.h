// The fuzz corpora's replay in the ordinary test binaries: every input file of a corpus
// directory (README.md aside) handed to the fuzz target's entry point.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tachyon::testing {

// Calls fn(data) for each input file of TACHYON_SOURCE_DIR/<corpus>, the bytes in an
// allocation of their own (so that a sanitizer sees reads past their end), with the
// file named in any failure; returns how many there were.
template <typename F>
int for_each_corpus_input(const std::string& corpus, F&& fn) {
  int files = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(TACHYON_SOURCE_DIR) / corpus)) {
    if (!e.is_regular_file() || e.path().filename() == "README.md") continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string bytes = ss.str();
    SCOPED_TRACE(e.path().string());
    std::vector<uint8_t> data(bytes.begin(), bytes.end());
    fn(data);
    ++files;
  }
  return files;
}

}  // namespace tachyon::testing
