// Health, status, models and tokenizer endpoints.
#include "server/api_error.h"
#include "server/app.h"
#include "server/json_fields.h"
#include "server/text_util.h"

namespace tachyon::server {

void ServerApp::handle_health(const std::shared_ptr<ResponseWriter>& w) {
  auto b = backend();
  if (shutting_down())
    return respond_json(*w, 503, {{"status", "shutting_down"}}, {{"Retry-After", "1"}});
  if (!b) return respond_json(*w, 503, {{"status", "loading"}}, {{"Retry-After", "1"}});
  if (!b->healthy())
    return respond_json(*w, 503, {{"status", "dead"}, {"reason", b->dead_reason()}});
  respond_json(*w, 200, {{"status", "ok"}});
}

void ServerApp::handle_worker_status(const std::shared_ptr<ResponseWriter>& w) {
  auto b = backend();
  BackendStats s = b ? b->stats() : BackendStats{};
  int64_t running = admission_->running();
  int64_t available = std::max<int64_t>(0, admission_->max_running() - running);
  respond_json(*w, 200,
               {{"role", "PDFUSION"},
                {"alive", b != nullptr && b->healthy() && !shutting_down()},
                {"status", shutting_down() ? "shutting_down"
                                           : (b ? (b->healthy() ? "ok" : "dead") : "loading")},
                {"available_concurrency", available},
                {"frontend_available_concurrency", available},
                {"running_query_len", s.num_running},
                {"waiting_query_len", s.num_waiting + admission_->queued()},
                {"available_kv_cache", s.num_free_kv_blocks * s.block_size},
                {"total_kv_cache", s.num_kv_blocks * s.block_size},
                {"kv_cache_usage", s.kv_cache_usage},
                {"num_preemptions", s.num_preemptions}});
}

void ServerApp::handle_models(const std::shared_ptr<ResponseWriter>& w, const std::string& id) {
  auto b = backend();
  const int64_t max_len = b ? b->model_info().max_model_len : 0;
  // "root" is the served name too: never the model's filesystem path.
  Json base = {{"id", options_.model_name}, {"object", "model"},           {"created", created_},
               {"owned_by", "tachyon"},     {"root", options_.model_name}, {"parent", nullptr},
               {"max_model_len", max_len}};
  Json models = Json::array({std::move(base)});
  // Each LoRA adapter as vLLM lists it: its path as the root, the base model its parent.
  if (b)
    for (const AdapterInfo& a : b->adapters())
      models.push_back({{"id", a.name},
                        {"object", "model"},
                        {"created", created_},
                        {"owned_by", "tachyon"},
                        {"root", a.path},
                        {"parent", options_.model_name},
                        {"max_model_len", max_len}});
  if (id.empty()) return respond_json(*w, 200, {{"object", "list"}, {"data", std::move(models)}});
  for (const Json& m : models)
    if (m["id"] == id) return respond_json(*w, 200, m);
  throw ApiError::not_found("The model '" + id + "' does not exist", "model_not_found");
}

void ServerApp::handle_tokenize(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                                const RenderControl& control) {
  auto b = ready_backend();
  Json body = parse_request_object(req.body);
  FieldReader r(body);
  if (auto m = r.opt_string("model", 4096)) resolve_model(*m, *b);
  bool return_strs = r.opt_bool("return_token_strs").value_or(false);
  std::vector<int32_t> ids;
  if (r.has("messages")) {
    if (r.has("prompt")) throw ApiError::bad_request("give prompt or messages, not both", "prompt");
    Json messages = parse_chat_messages(r.raw("messages"), "messages");
    bool add_gen = r.opt_bool("add_generation_prompt").value_or(true);
    Json kwargs = Json::object();
    if (const Json* k = r.raw("chat_template_kwargs")) {
      if (!k->is_object())
        throw ApiError::bad_request("chat_template_kwargs must be an object",
                                    "chat_template_kwargs");
      kwargs = *k;
    }
    bool special = r.opt_bool("add_special_tokens").value_or(false);
    ChatPrompt chat = b->render_chat(messages, nullptr, add_gen, kwargs, control);
    if (options_.special_tokens_in_content) chat.untrusted.clear();
    ids = b->encode_chat(chat, special);
  } else {
    auto prompt = r.opt_string("prompt", SIZE_MAX);
    if (!prompt) throw ApiError::bad_request("prompt or messages is required", "prompt");
    ids = b->encode(*prompt, r.opt_bool("add_special_tokens").value_or(true));
  }
  r.finish();
  Json out = {{"count", ids.size()},
              {"max_model_len", b->model_info().max_model_len},
              {"tokens", ids},
              {"token_ids", ids}};
  if (return_strs) {
    Json strs = Json::array();
    for (int32_t id : ids) strs.push_back(repair_utf8(b->token_bytes(id)));
    out["token_strs"] = std::move(strs);
  }
  respond_json(*w, 200, out);
}

void ServerApp::handle_detokenize(const HttpRequest& req,
                                  const std::shared_ptr<ResponseWriter>& w) {
  auto b = ready_backend();
  Json body = parse_request_object(req.body);
  FieldReader r(body);
  if (auto m = r.opt_string("model", 4096)) resolve_model(*m, *b);
  auto ids = r.opt_int_list("tokens", 0, INT32_MAX, 1u << 24);
  if (!ids) throw ApiError::bad_request("tokens is required", "tokens");
  bool skip = r.opt_bool("skip_special_tokens").value_or(false);
  r.finish();
  int32_t vocab = b->model_info().vocab_size;
  for (int32_t id : *ids)
    if (id >= vocab)
      throw ApiError::bad_request("token id " + std::to_string(id) + " is outside the vocabulary",
                                  "tokens");
  respond_json(*w, 200, {{"prompt", b->decode(*ids, skip)}});
}

void ServerApp::handle_tokenizer_encode(const HttpRequest& req,
                                        const std::shared_ptr<ResponseWriter>& w) {
  auto b = ready_backend();
  Json body = parse_request_object(req.body);
  FieldReader r(body);
  auto prompt = r.opt_string("prompt", SIZE_MAX);
  if (!prompt)
    throw ApiError(400, "invalid_request_error", "prompt is required", "prompt", {},
                   NativeErrorCode::kNoPrompt);
  r.refuse_unless("return_offsets_mapping", {false}, "offset mappings are not supported");
  r.finish();
  std::vector<int32_t> ids = b->encode(*prompt, true);
  Json tokens = Json::array();
  for (int32_t id : ids) tokens.push_back(b->decode({id}, false));
  respond_json(*w, 200, {{"token_ids", ids}, {"tokens", std::move(tokens)}, {"error", ""}});
}

}  // namespace tachyon::server
