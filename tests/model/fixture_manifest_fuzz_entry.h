// The entry point of the fixture manifest fuzz target, shared with the corpus replay test
// so the same code runs under libFuzzer (clang) and in the ordinary test binary (g++).
//
// An input is a manifest's text (any bytes). parse_fixture_manifest either accepts it or
// refuses it with InvalidArgument; an accepted manifest small enough to build quickly
// (at most 2^16 stream elements) is built, which either gives its files or refuses them
// with InvalidArgument (a checksum that differs). A bug, reported by abort() with a
// message, is any other exception; sanitizer reports are bugs too.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "core/error.h"
#include "model/fixture_weights.h"

namespace tachyon::fuzz {

[[noreturn]] inline void fixture_manifest_bug(const char* what) {
  std::fprintf(stderr, "fixture manifest fuzz: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

// True when the input parsed as a manifest.
inline bool fixture_manifest_one(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  FixtureManifest m;
  try {
    m = parse_fixture_manifest(text);
  } catch (const InvalidArgument&) {
    return false;
  } catch (const std::exception& e) {
    fixture_manifest_bug(e.what());
  }
  int64_t elements = 0;
  for (const auto& s : m.streams)
    for (const auto& t : s.tensors) elements += shape_numel(t.shape);
  if (elements <= (int64_t{1} << 16) && m.streams.size() <= 64) {
    try {
      build_fixture_files(m);
    } catch (const InvalidArgument&) {
    } catch (const std::exception& e) {
      fixture_manifest_bug(e.what());
    }
  }
  return true;
}

}  // namespace tachyon::fuzz
