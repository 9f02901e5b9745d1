// Images end to end through the HTTP server on a real LLaVA model (the fixture's, on the
// CPU): an OpenAI chat image_url part and the native API's images give the greedy tokens
// the engine gives for the same images' pixel_values; more placeholders than images, a
// corrupt image, an image for a text model are 400s, and the server keeps serving.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "conformance/llava_model_dir.h"
#include "core/base64.h"
#include "core/json.h"
#include "core/mmap.h"
#include "frontend/engine_backend.h"
#include "server/app_test_util.h"

namespace tachyon::server {
namespace {

using testing::TestConnection;
using testing::TestResponse;

const std::string kImages = std::string(TACHYON_SOURCE_DIR) + "/tests/media/fixtures/images/";
constexpr int32_t kNew = 8;

std::string data_url(const std::string& path, const char* type, size_t keep = 0) {
  std::string b = read_file(path);
  if (keep > 0) b.resize(keep);
  const std::string out = base64_encode(b);
  return std::string("data:") + type + ";base64," + out;
}

struct LlavaServer {
  explicit LlavaServer(const std::string& dir) {
    EngineBackendOptions o;
    o.model_dir = dir;
    o.device = "cpu";
    backend = EngineBackend::load(o);
    AppOptions ao;
    ao.model_name = "llava";
    app = std::make_unique<ServerApp>(ao);
    app->set_backend(backend);
    http = testing::serve_app(*app);
  }
  ~LlavaServer() {
    app->cancel_all();
    http->stop();
    backend->shutdown();
  }
  TestResponse post(const std::string& path, const Json& body) {
    TestConnection c(http->port());
    return c.request("POST", path, body.dump(), {});
  }

  std::shared_ptr<EngineBackend> backend;
  std::unique_ptr<ServerApp> app;
  std::unique_ptr<HttpServer> http;
};

Json chat(const std::vector<std::string>& urls, const std::string& text) {
  Json content = Json::array();
  for (const auto& u : urls)
    content.push_back({{"type", "image_url"}, {"image_url", {{"url", u}}}});
  content.push_back({{"type", "text"}, {"text", text}});
  return {{"max_tokens", kNew},
          {"temperature", 0},
          {"ignore_eos", true},
          {"logprobs", true},
          {"messages", Json::array({{{"role", "user"}, {"content", content}}})}};
}

// The chat completion's tokens, read back from their logprobs' token strings ("w70").
std::vector<int32_t> chat_tokens(const TestResponse& r) {
  std::vector<int32_t> ids;
  const std::vector<std::string> specials = {"<unk>", "<s>", "</s>"};
  const Json body = Json::parse(r.body);
  for (const Json& t : body["choices"][0]["logprobs"]["content"]) {
    const std::string s = t["token"].get<std::string>();
    const auto it = std::find(specials.begin(), specials.end(), s);
    ids.push_back(it != specials.end() ? static_cast<int32_t>(it - specials.begin())
                                       : std::stoi(s.substr(1)));
  }
  return ids;
}

Json native(const std::string& prompt, const std::vector<std::string>& urls) {
  return {{"prompt", prompt},
          {"images", urls},
          {"generate_config",
           {{"max_new_tokens", kNew},
            {"temperature", 0},
            {"ignore_eos", true},
            {"return_output_ids", true}}}};
}

TEST(LlavaServer, ChatAndNativeImagesGiveTheEngineTheirPixelValues) {
  const std::string dir = testing_util::llava_model_dir();
  LlavaServer s(dir);
  EXPECT_TRUE(s.backend->model_info().takes_images);
  const std::string png = kImages + "gray.png", jpg = kImages + "baseline.jpg";

  // llava-hf's template puts a message's images first: "USER: <image>\n<text> ASSISTANT:",
  // the words outside the vocabulary ("USER:") the unknown token <unk>.
  auto r = s.post("/v1/chat/completions", chat({data_url(png, "image/png")}, "w264 w454"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(chat_tokens(r),
            testing_util::llava_engine_tokens(dir, {0, 511, 264, 454, 0}, {png}, kNew))
      << r.body;

  // The native API: "<image>" in the prompt, one per image, in order.
  r = s.post("/", native("w264 w454 <image> w175 <image> w426",
                         {data_url(jpg, "image/jpeg"), data_url(png, "image/png")}));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<int32_t> want =
      testing_util::llava_engine_tokens(dir, {264, 454, 511, 175, 511, 426}, {jpg, png}, kNew);
  EXPECT_EQ(Json::parse(r.body)["output_ids"][0].get<std::vector<int32_t>>(), want) << r.body;

  // Refused alone, naming the field: more placeholders than images, fewer, a corrupt
  // image (a chat part and a native entry).
  r = s.post("/", native("w5 <image> <image>", {data_url(png, "image/png")}));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("images: the prompt holds 2 image placeholders (<image>) but 1 image"),
            std::string::npos)
      << r.body;
  r = s.post("/", native("w5 w6", {data_url(png, "image/png")}));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("holds 0 image placeholders"), std::string::npos) << r.body;
  r = s.post("/", native("w5 <image>", {}));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("prompt: the prompt holds 1 image placeholder"), std::string::npos)
      << r.body;
  const std::string corrupt = data_url(png, "image/png", 60);
  r = s.post("/v1/chat/completions", chat({corrupt}, "w5"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Json::parse(r.body)["error"]["param"], "messages[0].content[0]") << r.body;
  r = s.post("/", native("w5 <image>", {corrupt}));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("images[0]"), std::string::npos) << r.body;

  // The images' tokens take room in the window: a request that leaves max_tokens to the
  // server gets what the expanded prompt leaves (256 - 5 - 8 more for the image).
  Json open_ended = chat({data_url(png, "image/png")}, "w264 w454");
  open_ended.erase("max_tokens");
  open_ended.erase("logprobs");
  r = s.post("/v1/chat/completions", open_ended);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["usage"]["completion_tokens"], 256 - 5 - 8) << r.body;
  EXPECT_EQ(Json::parse(r.body)["choices"][0]["finish_reason"], "length") << r.body;

  // The server keeps serving, with the same result.
  r = s.post("/", native("w264 w454 <image> w175 <image> w426",
                         {data_url(jpg, "image/jpeg"), data_url(png, "image/png")}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["output_ids"][0].get<std::vector<int32_t>>(), want) << r.body;
}

TEST(LlavaServer, AnImageTheTowerCannotTakeIsRefusedNamingIt) {
  // A processor that makes 28x28 images for a tower of 42x42: every image is refused.
  LlavaServer s(testing_util::llava_model_dir(true, 28));
  const std::string png = kImages + "gray.png";
  auto r = s.post("/v1/chat/completions", chat({data_url(png, "image/png")}, "w5"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(
      Json::parse(r.body)["error"]["message"].get<std::string>().find("messages[0].content[0]: "),
      std::string::npos)
      << r.body;
  r = s.post("/", native("w5 <image>", {data_url(png, "image/png")}));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("images[0]: "), std::string::npos) << r.body;
  // A request without images is served.
  r = s.post("/", native("w5 w6", {}));
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(LlavaServer, TextModelsTakeNoImagesAndVisionModelsNeedTheirProcessor) {
  EngineBackendOptions o;
  o.model_dir = std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat";
  o.device = "cpu";
  auto text = EngineBackend::load(o);
  EXPECT_FALSE(text->model_info().takes_images);
  GenerationParams p;
  p.max_new_tokens = 2;
  RequestImage image;
  image.field = "images[0]";
  image.image = std::make_shared<const media::RgbImage>(4, 4);
  p.images.push_back(image);
  try {
    text->generate(text->encode("In the", true), p, [](std::vector<GenEvent>&&) {});
    ADD_FAILURE() << "a text model took an image";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("images[0]: this model takes no images"),
              std::string::npos)
        << e.what();
  }
  text->shutdown();

  // A vision model's folder without its processor's config fails before the weights
  // load (here there are none to load).
  o.model_dir = testing_util::llava_model_dir(/*with_processor=*/false);
  std::filesystem::remove(std::filesystem::path(o.model_dir) / "model.safetensors");
  try {
    EngineBackend::load(o);
    ADD_FAILURE() << "a vision model loaded without its image processor";
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("preprocessor_config.json"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tachyon::server
