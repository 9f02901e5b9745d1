#include "cli/generate_engine.h"

#include <cstdio>
#include <fstream>
#include <iostream>

#include "core/error.h"
#include "core/logging.h"
#include "core/mmap.h"
#include "media/decode.h"

namespace tachyon::cli {

RequestConfig request_config(Json config) {
  RequestConfig rc;
  if (config.is_object() && config.contains("adapter_name")) {
    const Json& a = config["adapter_name"];
    if (!a.is_null() && !a.is_string())
      raise<InvalidArgument>("generate_config.adapter_name must be an adapter's name (a string)");
    if (a.is_string()) rc.adapter_name = a.get<std::string>();
    config.erase("adapter_name");
  }
  rc.config = GenerateConfig::from_json(config);
  return rc;
}

GenerateRequest make_request(const LoraOptions& lora, const AdapterRegistry* adapters,
                             std::vector<int32_t> prompt, const RequestConfig& rc) {
  GenerateRequest req{std::move(prompt), rc.config};
  if (rc.adapter_name.empty()) return req;
  std::string given;
  for (const AdapterInfo& a : lora.adapters) {
    if (a.name != rc.adapter_name) {
      given += (given.empty() ? "" : ", ") + a.name;
      continue;
    }
    // A merged adapter is in the weights every request runs on; the others are
    // registered (never unloaded here, so the id alone is enough).
    if (!lora.merge && adapters != nullptr) req.adapter = adapters->acquire(rc.adapter_name)->id();
    return req;
  }
  raise<InvalidArgument>("adapter_name '{}' is not an adapter given with --lora NAME=DIR{}",
                         rc.adapter_name, given.empty() ? "" : " (given: " + given + ")");
}

std::vector<RequestImage> read_images(const std::vector<std::string>& paths,
                                      const std::string& what) {
  std::vector<RequestImage> out;
  for (size_t i = 0; i < paths.size(); ++i) {
    RequestImage r;
    r.url = paths[i];
    r.field = fmt::format("{}[{}]", what, i);
    const media::DecodeLimits limits;
    try {
      const std::string bytes = read_file(paths[i], static_cast<size_t>(limits.max_bytes));
      r.image = std::make_shared<const media::RgbImage>(media::decode_image(
          std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), limits));
    } catch (const InvalidArgument& e) {
      raise<InvalidArgument>("{}: {}", r.field, e.what());
    }
    out.push_back(std::move(r));
  }
  return out;
}

void attach_images(const ImagePreprocessor* pre, const LanguageModel& model,
                   GenerateRequest& request, const std::vector<RequestImage>& images,
                   const std::string& what) {
  if (pre == nullptr) {
    if (!images.empty()) raise<InvalidArgument>("{}: this model takes no images", what);
    return;
  }
  ImagePrompt p = pre->prepare(model, request.prompt_ids, images, what);
  request.prompt_ids = std::move(p.ids);
  request.images = std::move(p.images);
}

RequestConfig merged_config(const Json& defaults, const Json& line) {
  Json merged = defaults.is_object() ? defaults : Json::object();
  if (line.contains("generate_config")) {
    const Json& g = line["generate_config"];
    if (!g.is_object()) raise<InvalidArgument>("\"generate_config\" must be an object");
    for (const auto& [k, v] : g.items()) merged[k] = v;
  }
  return request_config(std::move(merged));
}

int run_generate_batch(EngineBundle& b, const LoraOptions& lora, const std::string& input,
                       const std::string& output, const Json& defaults,
                       const ImagePreprocessor* images) {
  std::ifstream in(input);
  if (!in) raise<NotFound>("cannot open --input {}", input);
  struct Line {
    std::shared_ptr<RequestStream> stream;
    std::optional<Json> error;
  };
  std::vector<Line> lines;
  std::string text;
  int64_t number = 0;
  while (std::getline(in, text)) {
    ++number;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    Line l;
    try {
      const Json j = parse_json(text, fmt::format("{} line {}", input, number));
      const RequestConfig rc = merged_config(defaults, j);
      GenerateRequest req =
          make_request(lora, b.adapters.get(), prompt_from_json(j, b.tokenizer.get()), rc);
      std::vector<std::string> paths;
      if (j.contains("images")) {
        const Json& v = j["images"];
        if (!v.is_array()) raise<InvalidArgument>("\"images\" must be an array of file paths");
        for (const Json& x : v) {
          if (!x.is_string()) raise<InvalidArgument>("\"images\" must be an array of file paths");
          paths.push_back(x.get<std::string>());
        }
      }
      attach_images(images, *b.model, req, read_images(paths, "images"), "images");
      l.stream = b.engine->submit(std::move(req));
    } catch (const Error& e) {
      l.error = Json{{"error", fmt::format("line {}: {}", number, e.what())},
                     {"error_code", std::string(error_code_name(e.code()))}};
    }
    lines.push_back(std::move(l));
  }
  std::FILE* out = output == "-" ? stdout : std::fopen(output.c_str(), "wb");
  if (!out) raise<InvalidArgument>("cannot write --output {}", output);
  int failed = 0;
  for (auto& l : lines) {
    Json j;
    if (l.error) {
      j = *l.error;
      ++failed;
    } else {
      const GenerateResult r = l.stream->wait();
      failed += r.error.has_value();
      j = result_json(r);
    }
    const std::string s = j.dump(-1, ' ', false, Json::error_handler_t::replace);
    std::fwrite(s.data(), 1, s.size(), out);
    std::fputc('\n', out);
  }
  if (out != stdout) std::fclose(out);
  log_info("generate: {} requests, {} failed", lines.size(), failed);
  return failed;
}

GenerateResult run_generate_one(EngineBundle& b, GenerateRequest request, bool json) {
  auto stream = b.engine->submit(std::move(request));
  if (json) return stream->wait();
  // Stream text pieces (or ids without a tokenizer) as they come, then gather.
  GenerateResult result;
  while (true) {
    auto e = stream->next(std::chrono::hours(24));
    if (!e) break;
    if (e->index == 0) {
      if (b.tokenizer) {
        std::fwrite(e->text.data(), 1, e->text.size(), stdout);
      } else {
        for (int32_t t : e->token_ids) std::printf("%d ", t);
      }
      std::fflush(stdout);
    }
    if (e->index >= 0) {
      if (static_cast<size_t>(e->index) >= result.sequences.size())
        result.sequences.resize(static_cast<size_t>(e->index) + 1);
      auto& s = result.sequences[static_cast<size_t>(e->index)];
      s.output_ids.insert(s.output_ids.end(), e->token_ids.begin(), e->token_ids.end());
      s.text += e->text;
      if (e->finish_reason) s.finish_reason = *e->finish_reason;
    }
    if (e->done) {
      result.timings = e->timings;
      result.error = e->error;
      break;
    }
  }
  std::printf("\n");
  return result;
}

}  // namespace tachyon::cli
