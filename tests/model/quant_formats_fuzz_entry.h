// The entry point of the quantized-format fuzz target, shared with the corpus replay
// test so the same code runs under libFuzzer (clang) and in the ordinary test binary.
//
// An input is JSON text: {"config": <a quantization_config>, "n": rows, "k": columns,
// "tensors": {"<part>": {"dtype": "I32", "shape": [...]}, ...}, "seed": s}. The config
// is parsed; when it parses, the tensors (at most 2^16 elements each, filled with bytes
// drawn from the seed) are the parts of module "m" of shape [n, k] (each at most 512),
// and the reader either builds a valid matrix or refuses with InvalidArgument. A bug,
// reported by abort() with a message, is any other exception; sanitizer reports are
// bugs too.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "model/quant_formats.h"

namespace tachyon::fuzz {

[[noreturn]] inline void quant_formats_bug(const char* what) {
  std::fprintf(stderr, "quant formats fuzz: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

// The tensors an input describes (invalid descriptions are skipped).
inline std::map<std::string, Tensor> quant_fuzz_tensors(const Json& j) {
  std::map<std::string, Tensor> out;
  auto it = j.find("tensors");
  if (it == j.end() || !it->is_object()) return out;
  uint32_t state = 0x9e3779b9u;
  if (auto s = j.find("seed"); s != j.end() && s->is_number_unsigned())
    state ^= static_cast<uint32_t>(s->get<uint64_t>());
  for (const auto& [name, d] : it->items()) {
    if (!d.is_object() || !d.contains("dtype") || !d["dtype"].is_string() || !d.contains("shape") ||
        !d["shape"].is_array() || d["shape"].size() > 3)
      continue;
    const auto dtype = parse_safetensors_dtype(d["dtype"].get<std::string>());
    if (!dtype) continue;
    Shape shape;
    int64_t numel = 1;
    bool ok = true;
    for (const Json& x : d["shape"]) {
      if (!x.is_number_unsigned() || x.get<uint64_t>() > 4096) {
        ok = false;
        break;
      }
      shape.push_back(static_cast<int64_t>(x.get<uint64_t>()));
      numel *= shape.back();
    }
    if (!ok || numel > (int64_t{1} << 16)) continue;
    Tensor t = Tensor::empty(shape, *dtype);
    auto* bytes = static_cast<uint8_t*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) {
      state = state * 1664525u + 1013904223u;
      bytes[i] = static_cast<uint8_t>(state >> 24);
    }
    out["m." + name] = t;
  }
  return out;
}

// True when the input's config parsed.
inline bool quant_formats_one(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Json j;
  QuantConfig cfg;
  try {
    j = parse_json(text, "fuzz input", 64);
    if (!j.is_object() || !j.contains("config")) return false;
    cfg = parse_quant_config(j["config"], "fuzz config");
  } catch (const InvalidArgument&) {
    return false;
  } catch (const std::exception& e) {
    quant_formats_bug(e.what());
  }
  auto dim = [&](const char* key) -> int64_t {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_unsigned()) return 16;
    return static_cast<int64_t>(std::min<uint64_t>(it->get<uint64_t>(), 512));
  };
  const int64_t n = dim("n"), k = dim("k");
  const std::map<std::string, Tensor> tensors = quant_fuzz_tensors(j);
  const TensorLookup get = [&](const std::string& name) {
    auto it = tensors.find(name);
    return it == tensors.end() ? Tensor{} : it->second;
  };
  try {
    (void)cfg.quantizes("m", false);
    (void)has_quantized_tensors(cfg, "m", get);
    auto m = read_quantized(cfg, "m", n, k, get);
    if (!m || m->n != n || m->k != k) quant_formats_bug("a matrix of the wrong shape");
    (void)dequantize(*m);
  } catch (const InvalidArgument&) {
  } catch (const std::exception& e) {
    quant_formats_bug(e.what());
  }
  return true;
}

}  // namespace tachyon::fuzz
