// The entry point of the LoRA adapter fuzz target, shared with the corpus replay test so
// the same code runs under libFuzzer (clang) and in the ordinary test binary.
//
// An input is JSON text: {"config": <adapter_config.json: an object, or any text as a
// string>, "header": <the safetensors header: an object, or any text as a string>,
// "data": bytes after the header (at most 2^16, drawn from "seed"), "model": "llama" or
// "neox"}. The two files are written to a scratch folder and read for a tiny model of
// that family (hidden 16, 4 heads, 2 kv heads for llama, 2 layers, largest rank 16);
// a loaded adapter is then merged into dense weights. Only InvalidArgument and NotFound
// may come out; a bug, reported by abort() with a message, is any other exception or an
// adapter that breaks its invariants; sanitizer reports are bugs too.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/json.h"
#include "model/hf_config.h"
#include "model/lora_adapter.h"
#include "model/registry.h"

namespace tachyon::fuzz {

[[noreturn]] inline void lora_adapter_bug(const char* what) {
  std::fprintf(stderr, "lora adapter fuzz: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

struct LoraFuzzModel {
  ModelConfig cfg;
  WeightMap map;
};

inline const LoraFuzzModel& lora_fuzz_model(bool neox) {
  auto make = [](const char* text) {
    const HfConfig c(Json::parse(text), "config.json");
    LoraFuzzModel m;
    m.cfg = map_model_config(c, "");
    m.map = find_arch(c, "").map_weights(m.cfg);
    return m;
  };
  static const LoraFuzzModel llama = make(R"({"architectures": ["LlamaForCausalLM"],
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 32, "max_position_embeddings": 64})");
  static const LoraFuzzModel gpt_neox = make(R"({"architectures": ["GPTNeoXForCausalLM"],
    "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 32, "max_position_embeddings": 64, "rotary_pct": 0.5})");
  return neox ? gpt_neox : llama;
}

// The adapter's invariants, then a merge into zero weights of each module's slot.
inline void lora_fuzz_check(const LoraAdapter& a, const ModelConfig& cfg) {
  if (a.modules.empty() || a.max_rank <= 0 || a.max_rank > 16) lora_adapter_bug("bad max_rank");
  ModelWeights w;
  w.layers.resize(static_cast<size_t>(cfg.layer_num));
  for (size_t i = 0; i < a.modules.size(); ++i) {
    const LoraModule& m = a.modules[i];
    const Shape want = slot_shape(cfg, m.slot, m.layer);
    if (m.a.dtype() != DType::kF32 || m.b.dtype() != DType::kF32 ||
        m.a.shape() != Shape{m.rank(), want[1]} || m.b.shape() != Shape{want[0], m.rank()})
      lora_adapter_bug("a module of the wrong shape");
    if (i > 0 &&
        std::pair(a.modules[i - 1].layer, a.modules[i - 1].slot) >= std::pair(m.layer, m.slot))
      lora_adapter_bug("modules out of order");
    LayerWeights& L = w.layers[static_cast<size_t>(m.layer)];
    LinearWeights* own[] = {&L.qkv, &L.q, &L.k, &L.v, &L.o, &L.gate_up, &L.gate, &L.up, &L.down};
    const Slot slots[] = {Slot::kQkv,    Slot::kQ,    Slot::kK,  Slot::kV,   Slot::kO,
                          Slot::kGateUp, Slot::kGate, Slot::kUp, Slot::kDown};
    for (size_t s = 0; s < std::size(slots); ++s)
      if (slots[s] == m.slot) own[s]->w = Tensor::zeros(want, DType::kBF16);
  }
  merge_lora(w, a);
}

// True when the input described an adapter that loaded.
inline bool lora_adapter_one(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  Json j;
  try {
    j = parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz input", 64);
  } catch (const InvalidArgument&) {
    return false;
  }
  if (!j.is_object()) return false;
  auto text = [&](const char* key) {
    auto it = j.find(key);
    if (it == j.end()) return std::string();
    return it->is_string() ? it->get<std::string>() : it->dump();
  };
  uint64_t extra = 0, seed = 0;
  if (auto it = j.find("data"); it != j.end() && it->is_number_unsigned())
    extra = std::min<uint64_t>(it->get<uint64_t>(), uint64_t{1} << 16);
  if (auto it = j.find("seed"); it != j.end() && it->is_number_unsigned())
    seed = it->get<uint64_t>();
  const bool neox = text("model") == "neox";

  static const fs::path dir =
      fs::temp_directory_path() / ("tachyon_lora_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup;
  std::ofstream(dir / "adapter_config.json", std::ios::binary) << text("config");
  {
    const std::string header = text("header");
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i)
      file[i] = static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xff);
    file += header;
    uint32_t state = 0x9e3779b9u ^ static_cast<uint32_t>(seed);
    for (uint64_t i = 0; i < extra; ++i) {
      state = state * 1664525u + 1013904223u;
      file += static_cast<char>(state >> 24);
    }
    std::ofstream(dir / "adapter_model.safetensors", std::ios::binary) << file;
  }
  const LoraFuzzModel& model = lora_fuzz_model(neox);
  try {
    const LoraAdapter a = load_lora_adapter(dir.string(), model.cfg, model.map, {.max_rank = 16});
    lora_fuzz_check(a, model.cfg);
    return true;
  } catch (const InvalidArgument&) {
  } catch (const NotFound&) {
  } catch (const std::exception& e) {
    lora_adapter_bug(e.what());
  }
  return false;
}

}  // namespace tachyon::fuzz
