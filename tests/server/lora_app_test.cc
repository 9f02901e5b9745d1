// LoRA adapters over HTTP: selecting them (native adapter_name, OpenAI model), listing
// them (/v1/models) and changing them (RTP-LLM's /update, vLLM's load/unload routes),
// against the fake backend's adapter registry.
#include <gtest/gtest.h>

#include "server/app_test_util.h"

namespace tachyon::server::testing {
namespace {

using Strings = std::vector<std::string>;

// A server with adapters a (/lora/a) and b (/lora/b) registered.
struct LoraServer : TestServer {
  explicit LoraServer(AppOptions opt = default_options()) : TestServer(opt) {
    backend->load_adapter("a", "/lora/a");
    backend->load_adapter("b", "/lora/b");
  }
  Strings calls_after_setup() const {
    Strings c = backend->adapter_calls();
    return Strings(c.begin() + 2, c.end());
  }
  Strings names() const {
    Strings out;
    for (const auto& a : backend->adapters()) out.push_back(a.name + "=" + a.path);
    return out;
  }
};

Json update_body(const Json& lora_info) {
  return Json{{"peft_info", {{"lora_info", lora_info}}}};
}

TEST(LoraNative, AdapterNameSelectsTheAdapterOfEveryPrompt) {
  LoraServer s;
  Json b = {{"prompt", "x"}, {"generate_config", {{"max_new_tokens", 1}, {"adapter_name", "a"}}}};
  ASSERT_EQ(s.post("/", b).status, 200);
  EXPECT_EQ(s.backend->last_params().adapter_name, "a");
  // One name for a whole batch; top-level fields win over generate_config's.
  b = {{"prompt_batch", {"x", "y"}},
       {"max_new_tokens", 1},
       {"adapter_name", "b"},
       {"generate_config", {{"adapter_name", "a"}}}};
  ASSERT_EQ(s.post("/", b).status, 200);
  // "" and null: the base model.
  b = {{"prompt", "x"}, {"max_new_tokens", 1}, {"adapter_name", ""}};
  ASSERT_EQ(s.post("/", b).status, 200);
  b = {{"prompt", "x"}, {"max_new_tokens", 1}, {"adapter_name", nullptr}};
  ASSERT_EQ(s.post("/", b).status, 200);
  EXPECT_EQ(s.backend->submitted_adapters(), (Strings{"a", "b", "b", "", ""}));
}

TEST(LoraNative, AdapterNameListAlignsWithPromptBatch) {
  LoraServer s;
  Json b = {{"prompt_batch", {"x", "y", "z"}},
            {"generate_config", {{"max_new_tokens", 1}, {"adapter_name", {"b", "", "a"}}}}};
  auto r = s.post("/", b);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(parse(r.body)["response_batch"].size(), 3u);
  Strings got = s.backend->submitted_adapters();
  std::sort(got.begin(), got.end());  // submitted in order, but check the set
  EXPECT_EQ(got, (Strings{"", "a", "b"}));
  EXPECT_EQ(s.backend->last_prompt().back(), 'z' + 3);
  EXPECT_EQ(s.backend->last_params().adapter_name, "a");
}

TEST(LoraNative, BadAdapterNamesAreRefused) {
  LoraServer s;
  struct Case {
    Json body;
    int status, code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"prompt_batch", {"x", "y"}}, {"generate_config", {{"adapter_name", {"a"}}}}},
       400,
       604,
       "adapter_name holds 1 names for 2 prompts"},
      {{{"prompt", "x"}, {"generate_config", {{"adapter_name", {"a", "b"}}}}},
       400,
       604,
       "adapter_name holds 2 names for 1 prompts"},
      {{{"prompt", "x"}, {"generate_config", {{"adapter_name", 3}}}},
       400,
       604,
       "generate_config.adapter_name must be an adapter's name"},
      {{{"prompt_batch", {"x"}}, {"adapter_name", {true}}}, 400, 604, "adapter_name[0] must be"},
      {{{"prompt", "x"}, {"adapter_name", "nope"}}, 400, 507, "LoRA adapter 'nope' is not loaded"},
  };
  for (const auto& c : cases) {
    auto r = s.post("/", c.body);
    EXPECT_EQ(r.status, c.status) << c.body.dump() << " -> " << r.body;
    Json j = parse(r.body);
    EXPECT_EQ(j["error_code"], c.code) << r.body;
    EXPECT_NE(j["message"].get<std::string>().find(c.message), std::string::npos) << r.body;
  }
  // A batch whose second prompt names an unknown adapter runs nothing to the end.
  Json b = {{"prompt_batch", {"x", "y"}}, {"adapter_name", {"a", "nope"}}, {"max_new_tokens", 3}};
  EXPECT_EQ(s.post("/", b).status, 400);
}

TEST(LoraOpenAI, ModelSelectsAnAdapter) {
  LoraServer s;
  auto r = s.post("/v1/completions", Json{{"model", "a"}, {"prompt", "x"}, {"max_tokens", 1}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(parse(r.body)["model"], "a");
  EXPECT_EQ(s.backend->last_params().adapter_name, "a");
  Json chat = {
      {"model", "b"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 1}};
  r = s.post("/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(parse(r.body)["model"], "b");
  EXPECT_EQ(s.backend->last_params().adapter_name, "b");
  // The served name, the model's path and no model at all: the base model.
  for (const Json& model : {Json("fake-model"), Json("/models/fake"), Json(nullptr)}) {
    Json body = {{"prompt", "x"}, {"max_tokens", 1}};
    if (!model.is_null()) body["model"] = model;
    r = s.post("/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(s.backend->last_params().adapter_name, "");
    EXPECT_EQ(parse(r.body)["model"], "fake-model");
  }
  // Anything else: vLLM's 404 model_not_found.
  r = s.post("/v1/completions", Json{{"model", "c"}, {"prompt", "x"}});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(parse(r.body)["error"]["code"], "model_not_found");
  chat["model"] = "c";
  EXPECT_EQ(s.post("/v1/chat/completions", chat).status, 404);
  EXPECT_EQ(s.post("/tokenize", Json{{"model", "a"}, {"prompt", "x"}}).status, 200);
  EXPECT_EQ(s.post("/tokenize", Json{{"model", "c"}, {"prompt", "x"}}).status, 404);
}

TEST(LoraOpenAI, ModelsListsTheAdapters) {
  LoraServer s;
  Json models = parse(s.get("/v1/models").body);
  ASSERT_EQ(models["data"].size(), 3u) << models.dump();
  EXPECT_EQ(models["data"][0]["id"], "fake-model");
  EXPECT_EQ(models["data"][0]["parent"], nullptr);
  const Json& a = models["data"][1];
  EXPECT_EQ(a["id"], "a");
  EXPECT_EQ(a["root"], "/lora/a");
  EXPECT_EQ(a["parent"], "fake-model");
  EXPECT_EQ(a["object"], "model");
  EXPECT_EQ(a["max_model_len"], 256);
  auto r = s.get("/v1/models/b");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(parse(r.body)["root"], "/lora/b");
  EXPECT_EQ(s.get("/v1/models/c").status, 404);
}

TEST(LoraUpdate, IsDeclarative) {
  LoraServer s;
  // a stays, b goes, c comes.
  auto r = s.post("/update", update_body({{"a", "/lora/a"}, {"c", "/lora/c"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = parse(r.body);
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["unloaded"], Json({"b"}));
  EXPECT_EQ(j["loaded"], Json({"c"}));
  EXPECT_EQ(s.calls_after_setup(), (Strings{"unload b", "load c /lora/c"}));
  EXPECT_EQ(s.names(), (Strings{"a=/lora/a", "c=/lora/c"}));
  // The same set again changes nothing; an empty one unloads all.
  ASSERT_EQ(s.post("/update", update_body({{"a", "/lora/a"}, {"c", "/lora/c"}})).status, 200);
  EXPECT_EQ(s.calls_after_setup().size(), 2u);
  ASSERT_EQ(s.post("/update", update_body(Json::object())).status, 200);
  EXPECT_TRUE(s.names().empty());
}

TEST(LoraUpdate, BadBodiesChangeNothing) {
  LoraServer s;
  const std::vector<std::pair<Json, std::string>> cases = {
      {update_body({{"a", "/lora/other"}}), "adapter 'a' is loaded from '/lora/a'"},
      {update_body({{"c", "/lora/c"}, {"bad name", "/x"}}), "may hold only letters"},
      {update_body({{"c", 3}}), "peft_info.lora_info.c must be the adapter's folder"},
      {update_body({{"c", ""}}), "peft_info.lora_info.c must be the adapter's folder"},
      {update_body({{"fake-model", "/x"}}), "the served model's name"},
      {update_body(Json::array()), "peft_info.lora_info must be an object"},
      {Json{{"peft_info", 1}}, "peft_info must be an object"},
      {Json::object(), "peft_info must be an object"},
      {Json{{"peft_info", {{"lora_info", Json::object()}, {"x", 1}}}}, "peft_info.x"},
      {Json{{"peft_info", {{"lora_info", Json::object()}}}, {"models_info", {{"m", "/m"}}}},
       "updating the model's weights is not supported"},
  };
  for (const auto& [body, message] : cases) {
    auto r = s.post("/update", body);
    EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
    Json j = parse(r.body);
    EXPECT_EQ(j["error_code"], 601) << r.body;
    EXPECT_EQ(j["error_code_str"], "601_UPDATE_ERROR");
    EXPECT_NE(j["message"].get<std::string>().find(message), std::string::npos) << r.body;
  }
  auto r = s.post("/update", std::string("{oops"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(parse(r.body)["error_code"], 601);
  EXPECT_TRUE(s.calls_after_setup().empty());
  EXPECT_EQ(s.names(), (Strings{"a=/lora/a", "b=/lora/b"}));
}

TEST(LoraUpdate, AFailureMidwaySaysWhatChanged) {
  LoraServer s;
  s.backend->bad_adapter_paths = {"/lora/d"};
  auto r = s.post("/update", update_body({{"a", "/lora/a"}, {"c", "/lora/c"}, {"d", "/lora/d"}}));
  EXPECT_EQ(r.status, 400) << r.body;
  Json j = parse(r.body);
  EXPECT_EQ(j["error_code"], 601);
  EXPECT_EQ(j["unloaded"], Json({"b"}));
  EXPECT_EQ(j["loaded"], Json({"c"}));
  const std::string m = j["message"];
  EXPECT_NE(m.find("bad adapter in '/lora/d'"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(unloaded ["b"], loaded ["c"])"), std::string::npos) << m;
  EXPECT_EQ(s.names(), (Strings{"a=/lora/a", "c=/lora/c"}));
  // A folder that does not exist: the backend's NotFound, nothing changed before it.
  r = s.post("/update", update_body({{"a", "/lora/a"}, {"c", "/lora/c"}, {"e", "relative"}}));
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_NE(parse(r.body)["message"].get<std::string>().find("nothing changed"), std::string::npos);
}

TEST(LoraVllmRoutes, LoadAndUnload) {
  LoraServer s;
  auto r = s.post("/v1/load_lora_adapter", Json{{"lora_name", "c"}, {"lora_path", "/lora/c"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "Success: LoRA adapter 'c' added successfully.");
  EXPECT_EQ(r.headers["content-type"].rfind("text/plain", 0), 0u);
  EXPECT_EQ(
      s.post("/v1/completions", Json{{"model", "c"}, {"prompt", "x"}, {"max_tokens", 1}}).status,
      200);
  r = s.post("/v1/unload_lora_adapter", Json{{"lora_name", "c"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "Success: LoRA adapter 'c' removed successfully.");
  EXPECT_EQ(s.calls_after_setup(), (Strings{"load c /lora/c", "unload c"}));
  EXPECT_EQ(s.post("/v1/completions", Json{{"model", "c"}, {"prompt", "x"}}).status, 404);
}

TEST(LoraVllmRoutes, ErrorsAre400) {
  LoraServer s;
  s.backend->max_adapters = 3;
  const std::vector<std::tuple<std::string, Json, std::string>> cases = {
      {"/v1/load_lora_adapter", Json{{"lora_name", "c"}},
       "Both 'lora_name' and 'lora_path' must be provided."},
      {"/v1/load_lora_adapter", Json{{"lora_path", "/x"}}, "Both 'lora_name' and 'lora_path'"},
      {"/v1/load_lora_adapter", Json{{"lora_name", "a"}, {"lora_path", "/lora/a"}},
       "The lora adapter 'a' has already been loaded."},
      {"/v1/load_lora_adapter", Json{{"lora_name", "c d"}, {"lora_path", "/x"}},
       "may hold only letters"},
      {"/v1/load_lora_adapter", Json{{"lora_name", "fake-model"}, {"lora_path", "/x"}},
       "the served model's name"},
      {"/v1/load_lora_adapter", Json{{"lora_name", "c"}, {"lora_path", "nowhere"}},
       "no adapter folder 'nowhere'"},
      {"/v1/load_lora_adapter", Json{{"lora_name", "c"}, {"lora_path", "/x"}, {"extra", 1}},
       "extra"},
      {"/v1/unload_lora_adapter", Json::object(), "'lora_name' needs to be provided"},
      {"/v1/unload_lora_adapter", Json{{"lora_name", "zz"}},
       "The lora adapter 'zz' cannot be found."},
  };
  for (const auto& [path, body, message] : cases) {
    auto r = s.post(path, body);
    EXPECT_EQ(r.status, 400) << path << " " << body.dump() << " -> " << r.body;
    EXPECT_NE(parse(r.body)["error"]["message"].get<std::string>().find(message), std::string::npos)
        << r.body;
  }
  // Past the backend's limit: its ResourceExhausted, answered 400 as vLLM does.
  ASSERT_EQ(s.post("/v1/load_lora_adapter", Json{{"lora_name", "c"}, {"lora_path", "/c"}}).status,
            200);
  auto r = s.post("/v1/load_lora_adapter", Json{{"lora_name", "d"}, {"lora_path", "/d"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("too many adapters"), std::string::npos);
  EXPECT_EQ(s.names(), (Strings{"a=/lora/a", "b=/lora/b", "c=/c"}));
}

TEST(LoraRoutes, NeedTheApiKeyAndTheModel) {
  auto opt = TestServer::default_options();
  opt.api_keys = {"k"};
  LoraServer s(opt);
  const Json load = {{"lora_name", "c"}, {"lora_path", "/lora/c"}};
  EXPECT_EQ(s.post("/update", update_body(Json::object())).status, 401);
  EXPECT_EQ(parse(s.post("/update", update_body(Json::object())).body)["error_code"], 507);
  EXPECT_EQ(s.post("/v1/load_lora_adapter", load).status, 401);
  EXPECT_EQ(s.post("/v1/unload_lora_adapter", Json{{"lora_name", "a"}}).status, 401);
  EXPECT_TRUE(s.calls_after_setup().empty());
  const std::map<std::string, std::string> key = {{"Authorization", "Bearer k"}};
  EXPECT_EQ(s.post("/v1/load_lora_adapter", load, key).status, 200);
  EXPECT_EQ(s.get("/update", key).status, 405);
  // While the model loads: 503.
  TestServer loading(TestServer::default_options(), /*with_backend=*/false);
  EXPECT_EQ(loading.post("/v1/load_lora_adapter", load).status, 503);
  auto r = loading.post("/update", update_body(Json::object()));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(parse(r.body)["error_code"], 601);
}

}  // namespace
}  // namespace tachyon::server::testing
