// The LLaVA fixture (tests/conformance/fixtures/vision/llava) as a whole model folder a
// frontend loads: the materialised checkpoint, with a tokenizer (<unk>, <s>, </s>, words
// "w3".."w510" and the image token "<image>" at the fixture's image_token_index, a
// special added token), LLaVA-1.5's chat template in chat_template.json (llava-hf's: the
// images of a message first, each "<image>\n", then its text) and a CLIP
// preprocessor_config.json of the tower's image size.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>

#include "conformance/fixture_dir.h"
#include "core/json.h"
#include "core/mmap.h"
#include "engine/async_model.h"
#include "media/decode.h"
#include "media/image_processor.h"
#include "model/loader.h"

namespace tachyon::testing_util {

inline constexpr const char* kLlavaChatTemplate =
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() "
    "+ ': '}}{% endif %}{% for content in message['content'] | selectattr('type', 'equalto', "
    "'image') %}{{ '<image>\\n' }}{% endfor %}{% for content in message['content'] | "
    "selectattr('type', 'equalto', 'text') %}{{ content['text'] + ' '}}{% endfor %}{% endfor "
    "%}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}";

// The folder (made once per process); `with_processor` false leaves out
// preprocessor_config.json; `crop` > 0 makes the processor's images that size instead of
// the tower's.
inline std::string llava_model_dir(bool with_processor = true, int64_t crop = 0) {
  namespace fs = std::filesystem;
  const fs::path src = fixture("vision/llava");
  const fs::path dir =
      fs::temp_directory_path() /
      ("tachyon-llava-model-" + std::to_string(::getpid()) + (with_processor ? "" : "-bare") +
       (crop > 0 ? "-crop" + std::to_string(crop) : ""));
  static std::mutex mu;
  static std::set<std::string> made;
  std::lock_guard<std::mutex> lock(mu);
  if (made.count(dir.string()) != 0) return dir.string();
  fs::remove_all(dir);  // a folder an earlier process of the same id left
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src))
    if (e.is_regular_file())
      fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  const Json config = load_json_file((src / "config.json").string());
  const int64_t image_token = config["image_token_index"].get<int64_t>();
  Json vocab = Json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int64_t i = 3; i < image_token; ++i) vocab["w" + std::to_string(i)] = i;
  vocab["<image>"] = image_token;
  const Json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", Json::array({{{"id", image_token},
                                     {"content", "<image>"},
                                     {"single_word", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "WhitespaceSplit"}}},
      {"post_processor", nullptr},
      {"decoder", nullptr},
      {"model", {{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", "<unk>"}}}};
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  std::ofstream(dir / "tokenizer_config.json")
      << Json{{"bos_token", "<s>"}, {"eos_token", "</s>"}}.dump();
  // The template where llava-hf keeps it: the processor's chat_template.json.
  std::ofstream(dir / "chat_template.json") << Json{{"chat_template", kLlavaChatTemplate}}.dump();
  if (with_processor) {
    const int64_t size = crop > 0 ? crop : config["vision_config"]["image_size"].get<int64_t>();
    const Json pre = {{"image_processor_type", "CLIPImageProcessor"},
                      {"do_resize", true},
                      {"size", {{"shortest_edge", size}}},
                      {"resample", 3},
                      {"do_center_crop", true},
                      {"crop_size", {{"height", size}, {"width", size}}},
                      {"do_rescale", true},
                      {"rescale_factor", 1.0 / 255.0},
                      {"do_normalize", true},
                      {"image_mean", {0.48145466, 0.4578275, 0.40821073}},
                      {"image_std", {0.26862954, 0.26130258, 0.27577711}},
                      {"do_convert_rgb", true}};
    std::ofstream(dir / "preprocessor_config.json") << pre.dump();
  }
  made.insert(dir.string());
  return dir.string();
}

// The greedy tokens (EOS ignored) of `ids` (one image token, 511, per image) with each
// image file through the folder's processor, straight into the engine (the engine
// tests' path).
inline std::vector<int32_t> llava_engine_tokens(const std::string& dir,
                                                const std::vector<int32_t>& ids,
                                                const std::vector<std::string>& files,
                                                int32_t max_new) {
  LoadOptions lo;
  lo.device = Device{};
  EngineConfig c;
  c.num_kv_blocks = 64;
  c.block_size = 4;
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 64;
  AsyncModel engine(load_model(dir, lo), c);
  const auto processor = media::load_image_processor(dir);
  GenerateRequest r;
  for (int32_t id : ids)
    for (int32_t k = 0; k < (id == 511 ? 9 : 1); ++k) r.prompt_ids.push_back(id);
  for (const std::string& f : files) {
    const std::string bytes = read_file(f);
    const media::RgbImage image = media::decode_image(
        std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    r.images.push_back(make_image_input(processor->process(image).pixel_values));
  }
  r.config.temperature = 0.0f;
  r.config.max_new_tokens = max_new;
  r.config.ignore_eos = true;
  const GenerateResult res = engine.submit(std::move(r))->wait();
  if (res.error) raise<Internal>("{}", res.error->message);
  return res.sequences.at(0).output_ids;
}

}  // namespace tachyon::testing_util
