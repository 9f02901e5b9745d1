// What the LoRA tests share: the LoRA fixtures (tests/conformance/fixtures/lora: a PEFT
// adapter for one of the dense fixtures, with PEFT's references for the adapter and for
// its base), and a model loaded with one adapter merged into its weights.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "conformance/fixture_dir.h"
#include "conformance/paged_runner.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "model/loader.h"

namespace tachyon::testing_util {

struct LoraFixture {
  std::string name;                         // "lora/llama_qv"
  std::string base;                         // the dense fixture it adapts ("llama")
  std::vector<ConformanceCase> adapter;     // the adapter's references
  std::vector<ConformanceCase> base_cases;  // the base's, on the same prompts
};

// Every LoRA fixture (a folder under fixtures/lora with an adapter_config.json), sorted.
inline std::vector<std::string> lora_fixture_names() {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  const fs::path root = fs::path(fixtures_source_dir()) / "lora";
  if (!fs::is_directory(root)) return names;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && fs::exists(e.path() / "adapter_config.json"))
      names.push_back("lora/" + e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline LoraFixture load_lora_fixture(const std::string& name) {
  LoraFixture f;
  f.name = name;
  Json ref = load_json_file(fixture_source_dir(name) + "/reference.json");
  f.base = ref["base"].get<std::string>();
  auto logits = SafetensorsFile::open(fixture_source_dir(name) + "/reference.safetensors");
  for (size_t i = 0; i < ref["cases"].size(); ++i) {
    const Json& c = ref["cases"][i];
    for (const char* who : {"adapter", "base"}) {
      ConformanceCase k;
      k.input_ids = c["input_ids"].get<std::vector<int32_t>>();
      k.greedy_new_ids = c[who]["greedy_new_ids"].get<std::vector<int32_t>>();
      k.logits = logits->get(std::string(who) + ".case" + std::to_string(i) + ".logits").clone();
      (std::string(who) == "adapter" ? f.adapter : f.base_cases).push_back(std::move(k));
    }
  }
  return f;
}

// The bases the LoRA fixtures adapt, sorted.
inline std::vector<std::string> lora_fixture_bases() {
  std::set<std::string> bases;
  for (const auto& n : lora_fixture_names()) {
    Json ref = load_json_file(fixture_source_dir(n) + "/reference.json");
    bases.insert(ref["base"].get<std::string>());
  }
  return {bases.begin(), bases.end()};
}

// The model of folder `dir` on the CPU with the PEFT adapter of folder `adapter_dir`
// merged into its weights at load (LoadOptions::merge_lora).
inline std::unique_ptr<Model> load_merged_model(const std::string& dir,
                                                const std::string& adapter_dir) {
  LoadOptions opts;
  opts.device = Device{};  // the CPU
  opts.merge_lora = adapter_dir;
  return load_model(dir, opts);
}

}  // namespace tachyon::testing_util
