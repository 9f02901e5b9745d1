// Images in requests: parsing, the refusal by a model without a vision tower, and the
// fetch and decode for one with (a fake that says it reads images).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/base64.h"
#include "server/api_error.h"
#include "server/app_test_util.h"
#include "server/image_inputs.h"

namespace tachyon::server {
namespace {

using testing::TestServer;

std::string png_data_url(const char* media_type = "image/png") {
  std::ifstream f(std::string(TACHYON_SOURCE_DIR) + "/tests/media/fixtures/images/rgb.png",
                  std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string b = ss.str();
  const std::string out = base64_encode(b);
  return std::string("data:") + media_type + ";base64," + out;
}

Json chat_with_image(const std::string& url) {
  return {
      {"max_tokens", 2},
      {"messages", Json::array({{{"role", "user"},
                                 {"content", Json::array({{{"type", "text"}, {"text", "what? "}},
                                                          {{"type", "image_url"},
                                                           {"image_url", {{"url", url}}}}})}}})}};
}

TEST(ImageRequests, ATextModelTakesNoImages) {
  TestServer s;
  auto r = s.post("/v1/chat/completions", chat_with_image(png_data_url()));
  EXPECT_EQ(r.status, 400) << r.body;
  Json j = Json::parse(r.body);
  EXPECT_EQ(j["error"]["message"], "this model takes no images");
  EXPECT_EQ(j["error"]["param"], "messages[0].content[1]");
  r = s.post("/", {{"prompt", "x"}, {"images", {png_data_url()}}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("this model takes no images"), std::string::npos) << r.body;
  // Nothing was fetched: an unreachable URL is refused the same way, at once.
  r = s.post("/v1/chat/completions", chat_with_image("http://127.0.0.1:1/x.png"));
  EXPECT_NE(r.body.find("this model takes no images"), std::string::npos) << r.body;
  EXPECT_EQ(s.backend->submitted, 0);
}

TEST(ImageRequests, AVisionModelGetsTheDecodedImages) {
  TestServer s;
  s.backend->set_takes_images(true);
  auto r = s.post("/v1/chat/completions", chat_with_image(png_data_url()));
  ASSERT_EQ(r.status, 200) << r.body;
  GenerationParams p = s.backend->last_params();
  ASSERT_EQ(p.images.size(), 1u);
  ASSERT_TRUE(p.images[0].image);
  EXPECT_EQ(p.images[0].image->width, 37);
  EXPECT_EQ(p.images[0].image->height, 23);
  EXPECT_EQ(p.images[0].field, "messages[0].content[1]");

  r = s.post(
      "/", {{"prompt", "x"}, {"max_new_tokens", 2}, {"images", {png_data_url(), png_data_url()}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.backend->last_params().images.size(), 2u);
  r = s.post("/", {{"prompt_batch", {"x", "y"}},
                   {"max_new_tokens", 2},
                   {"images", Json::array({Json::array(), Json::array({png_data_url()})})}});
  ASSERT_EQ(r.status, 200) << r.body;
}

TEST(ImageRequests, BadImagesAre400NamingTheProblem) {
  TestServer s;
  s.backend->set_takes_images(true);
  struct Case {
    const char* name;
    Json body;
    const char* words;
    const char* param;
  };
  const std::vector<Case> cases = {
      {"media type", chat_with_image(png_data_url("image/jpeg")),
       "says image/jpeg but its bytes are PNG", "messages[0].content[1]"},
      {"base64", chat_with_image("data:image/png;base64,@@@@"), "bad base64",
       "messages[0].content[1]"},
      {"not an image", chat_with_image("data:;base64,aGVsbG8gd29ybGQ="), "not a known image format",
       "messages[0].content[1]"},
      {"scheme", chat_with_image("ftp://example.com/a.png"),
       "must be a data:", "messages[0].content[1].image_url.url"},
      {"fetch", chat_with_image("http://127.0.0.1:1/a.png"), "failed", "messages[0].content[1]"},
      {"local file", chat_with_image("file:///etc/hostname"), "local files are not allowed",
       "messages[0].content[1]"},
      {"native path",
       {{"prompt", "x"}, {"images", {"/etc/hostname"}}},
       "local files are not allowed",
       "images[0]"},
      {"native not a list", {{"prompt", "x"}, {"images", "a.png"}}, "must be a list", "images"},
      {"native entry", {{"prompt", "x"}, {"images", {5}}}, "must be a string", "images[0]"},
      {"native batch count",
       {{"prompt_batch", {"x", "y"}}, {"images", Json::array({Json::array()})}},
       "1 lists for 2 prompts",
       "images"},
      {"native batch flat",
       {{"prompt_batch", {"x", "y"}}, {"images", {png_data_url()}}},
       "one list of images per prompt",
       "images"},
      {"urls", {{"prompt", "x"}, {"urls", {"a"}}}, "give images", "urls"},
  };
  for (const Case& c : cases) {
    const bool native = c.body.contains("prompt") || c.body.contains("prompt_batch");
    auto r = s.post(native ? "/" : "/v1/chat/completions", c.body);
    EXPECT_EQ(r.status, 400) << c.name << ": " << r.body;
    EXPECT_NE(r.body.find(c.words), std::string::npos) << c.name << ": " << r.body;
    if (!native) {
      EXPECT_EQ(Json::parse(r.body)["error"]["param"], c.param) << c.name << ": " << r.body;
    }
  }
  EXPECT_EQ(s.backend->submitted, 0);
}

TEST(ImageRequests, ImageUrlParts) {
  RequestImage in =
      parse_image_url(Json{{"url", "https://a.example/x.png"}, {"detail", "low"}}, "p");
  EXPECT_EQ(in.url, "https://a.example/x.png");
  EXPECT_EQ(in.detail, "low");
  EXPECT_EQ(parse_image_url(Json("data:image/png;base64,AAAA"), "p").url,
            "data:image/png;base64,AAAA");
  EXPECT_THROW(parse_image_url(Json{{"detail", "low"}}, "p"), ApiError);
  EXPECT_THROW(parse_image_url(Json{{"url", "x.png"}}, "p"), ApiError);
  EXPECT_THROW(parse_image_url(Json{{"url", "https://a/x.png"}, {"size", 1}}, "p"), ApiError);
  EXPECT_THROW(parse_image_url(Json(5), "p"), ApiError);
}

}  // namespace
}  // namespace tachyon::server
