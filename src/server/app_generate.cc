// The generation endpoints: OpenAI chat and completions, RTP-LLM's native API.
#include "core/logging.h"
#include "server/api_error.h"
#include "server/app.h"
#include "server/generation_call.h"
#include "server/image_inputs.h"
#include "server/json_fields.h"
#include "server/native_format.h"
#include "server/native_protocol.h"
#include "server/openai_format.h"

namespace tachyon::server {
namespace {

void check_ids(const std::vector<int32_t>& ids, int32_t vocab, const std::string& field) {
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      throw ApiError::bad_request(field + ": token id " + std::to_string(id) +
                                      " is outside the vocabulary (size " + std::to_string(vocab) +
                                      ")",
                                  field);
}

void check_params(const GenerationParams& p, int32_t vocab) {
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= vocab)
      throw ApiError::bad_request("logit_bias: token id " + std::to_string(id) +
                                      " is outside the vocabulary (size " + std::to_string(vocab) +
                                      ")",
                                  "logit_bias");
  for (const auto& seq : p.stop_words_list) check_ids(seq, vocab, "stop_words_list");
}

// The task prompt's ids followed by the request's own.
std::vector<int32_t> with_prefix(const std::vector<int32_t>& prefix, std::vector<int32_t> own) {
  if (prefix.empty()) return own;
  std::vector<int32_t> ids;
  ids.reserve(prefix.size() + own.size());
  ids.insert(ids.end(), prefix.begin(), prefix.end());
  ids.insert(ids.end(), own.begin(), own.end());
  return ids;
}

std::string clip_for_log(const std::string& s) {
  constexpr size_t kMax = 4096;
  return s.size() <= kMax ? s : s.substr(0, kMax) + "...";
}

}  // namespace

std::string ServerApp::resolve_model(const std::string& requested,
                                     const InferenceBackend& backend) const {
  if (requested.empty() || requested == options_.model_name ||
      requested == backend.model_info().path)
    return {};
  for (const AdapterInfo& a : backend.adapters())
    if (a.name == requested) return a.name;
  throw ApiError::not_found("The model '" + requested + "' does not exist; this server serves '" +
                                options_.model_name + "' and its LoRA adapters (GET /v1/models)",
                            "model_not_found");
}

std::vector<int32_t> ServerApp::task_prefix(const std::optional<std::string>& task_id) const {
  if (!task_id) return {};
  std::shared_ptr<const TaskPrefixes> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks = tasks_;
  }
  if (!tasks || tasks->empty())
    throw ApiError::bad_request("task_id " + *task_id +
                                    " is unknown: no task prompts are configured "
                                    "(--system-prompts, MULTI_TASK_PROMPT)",
                                "task_id");
  const TaskPrefixes::Entry* e = tasks->find(*task_id);
  if (e == nullptr)
    throw ApiError::bad_request(
        "task_id " + *task_id + " is unknown; the configured task ids are: " + tasks->ids_list(),
        "task_id");
  return e->ids;
}

void ServerApp::run_call(const std::shared_ptr<ResponseWriter>& w,
                         std::unique_ptr<CallFormatter> formatter, std::vector<CallPrompt> prompts,
                         bool native_errors) {
  auto backend = ready_backend();
  struct Work {
    std::unique_ptr<CallFormatter> formatter;
    std::vector<CallPrompt> prompts;
  };
  auto work = std::make_shared<Work>(Work{std::move(formatter), std::move(prompts)});
  active_.fetch_add(1);
  auto on_admit = [this, w, backend, work, native_errors](std::shared_ptr<Admission::Slot> slot) {
    if (shutting_down() || w->client_closed()) {
      if (!w->client_closed()) {
        ApiError e = ApiError::unavailable("the server is shutting down");
        respond_json(*w, e.status(), native_errors ? e.native_json() : e.openai_json());
      }
      active_.fetch_sub(1);
      return;
    }
    auto key = std::make_shared<GenerationCall*>(nullptr);
    auto on_end = [this, slot, key] {
      {
        std::lock_guard<std::mutex> lock(mu_);
        calls_.erase(*key);
      }
      active_.fetch_sub(1);
    };
    auto call = std::make_shared<GenerationCall>(
        w, std::move(work->formatter), std::move(work->prompts), metrics_.get(), std::move(on_end));
    *key = call.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_[call.get()] = call;
    }
    call->start(*backend);
  };
  uint64_t ticket = 0;
  switch (admission_->submit(std::move(on_admit), &ticket)) {
    case Admission::Result::kAdmitted:
      return;
    case Admission::Result::kQueued:
      w->on_client_close([this, adm = admission_, ticket] {
        if (adm->withdraw(ticket)) {
          active_.fetch_sub(1);
          metrics_->request_cancelled();
        }
      });
      return;
    case Admission::Result::kFull:
      active_.fetch_sub(1);
      metrics_->request_rejected("capacity");
      throw ApiError::too_many_requests(
          "The server is at capacity (" + std::to_string(admission_->running()) +
          " requests running, " + std::to_string(admission_->queued()) + " queued); retry later");
  }
}

void ServerApp::handle_chat(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                            const RenderControl& control) {
  auto backend = ready_backend();
  const Json body = parse_request_object(req.body);
  const std::optional<OrderedJson> ordered = ordered_body(body, req.body);
  OpenAIRequest r = parse_chat_request(body, options_.limits, ordered ? &*ordered : nullptr);
  r.params.adapter_name = resolve_model(r.model, *backend);
  const ModelInfo& info = backend->model_info();
  std::optional<ToolCallFormat> tool_format;
  if (r.tools.choice == ToolChoice::kAuto) {
    tool_format = options_.tool_call_parser ? options_.tool_call_parser : info.tool_call_format;
    if (!tool_format)
      throw ApiError::bad_request(
          "tool_choice \"auto\" needs a tool call parser, and this model's chat template does "
          "not tell its format: start the server with --enable-auto-tool-choice "
          "--tool-call-parser hermes|llama3_json|mistral, or set tool_choice to \"none\", "
          "\"required\" or a function",
          "tool_choice");
    // Mistral's [TOOL_CALLS] is a special token: keep it in the text to find the calls.
    if (*tool_format == ToolCallFormat::kMistral) r.params.skip_special_tokens = false;
  }
  if (!r.params.images.empty()) {
    require_image_support(info, r.params.images, r.params.images[0].field);
    load_images(r.params.images, options_.media, false, "messages");
  }
  ChatPrompt chat = backend->render_chat(r.messages, r.tools.tools, r.add_generation_prompt,
                                         r.chat_template_kwargs, control);
  if (options_.special_tokens_in_content) chat.untrusted.clear();
  const std::vector<int32_t> prefix = task_prefix(r.task_id);
  std::vector<int32_t> ids = backend->encode_chat(chat, false);
  const std::string& prompt = chat.text;
  if (ids.empty()) throw ApiError::bad_request("the rendered prompt is empty", "messages");
  ids = with_prefix(prefix, std::move(ids));
  check_params(r.params, info.vocab_size);
  r.params.max_new_tokens =
      resolve_max_new_tokens(r.max_tokens, static_cast<int64_t>(ids.size()), info.max_model_len,
                             options_.limits.max_tokens, "messages");
  if (options_.log_prompts)
    log_info("chat prompt ({} tokens): {}", ids.size(), clip_for_log(prompt));

  OpenAIFormatOptions fo;
  fo.chat = true;
  fo.model = r.params.adapter_name.empty() ? info.name : r.params.adapter_name;
  fo.n = r.n;
  fo.stream = r.stream;
  fo.include_usage = r.include_usage;
  fo.logprobs = r.logprobs;
  fo.top_logprobs = r.top_logprobs;
  fo.prompt_tokens = {static_cast<int64_t>(ids.size())};
  fo.token_bytes = [backend](int32_t id) { return backend->token_bytes(id); };
  fo.tool_choice = r.tools.choice;
  fo.tool_function = r.tools.function;
  if (tool_format) fo.tool_format = *tool_format;
  std::vector<CallPrompt> prompts;
  prompts.push_back({std::move(ids), r.params});
  run_call(w, make_openai_formatter(std::move(fo)), std::move(prompts), false);
}

void ServerApp::handle_completions(const HttpRequest& req,
                                   const std::shared_ptr<ResponseWriter>& w) {
  auto backend = ready_backend();
  const Json body = parse_request_object(req.body);
  const std::optional<OrderedJson> ordered = ordered_body(body, req.body);
  OpenAIRequest r = parse_completion_request(body, options_.limits, ordered ? &*ordered : nullptr);
  r.params.adapter_name = resolve_model(r.model, *backend);
  const ModelInfo& info = backend->model_info();
  check_params(r.params, info.vocab_size);

  OpenAIFormatOptions fo;
  fo.chat = false;
  fo.model = r.params.adapter_name.empty() ? info.name : r.params.adapter_name;
  fo.n = r.n;
  fo.stream = r.stream;
  fo.include_usage = r.include_usage;
  fo.logprobs = r.logprobs;
  fo.top_logprobs = r.top_logprobs;
  fo.token_bytes = [backend](int32_t id) { return backend->token_bytes(id); };
  // A task prompt begins the sequence: the special tokens a text prompt gets are its.
  const std::vector<int32_t> prefix = task_prefix(r.task_id);
  std::vector<CallPrompt> prompts;
  for (auto& spec : r.prompts) {
    std::vector<int32_t> ids;
    if (spec.is_ids) {
      check_ids(spec.ids, info.vocab_size, "prompt");
      ids = spec.ids;
    } else {
      ids = backend->encode(spec.text, r.add_special_tokens && prefix.empty());
      if (ids.empty()) throw ApiError::bad_request("the prompt encodes to no tokens", "prompt");
    }
    if (r.echo) fo.echo.push_back(spec.is_ids ? backend->decode(ids, true) : spec.text);
    ids = with_prefix(prefix, std::move(ids));
    GenerationParams p = r.params;
    p.max_new_tokens =
        resolve_max_new_tokens(r.max_tokens, static_cast<int64_t>(ids.size()), info.max_model_len,
                               options_.limits.max_tokens, "prompt");
    if (options_.log_prompts)
      log_info("completion prompt ({} tokens): {}", ids.size(),
               clip_for_log(spec.is_ids ? backend->decode(ids, false) : spec.text));
    fo.prompt_tokens.push_back(static_cast<int64_t>(ids.size()));
    prompts.push_back({std::move(ids), std::move(p)});
  }
  run_call(w, make_openai_formatter(std::move(fo)), std::move(prompts), false);
}

void ServerApp::handle_native(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                              const RenderControl& control) {
  auto backend = ready_backend();
  const Json body = parse_request_object(req.body);
  const std::optional<OrderedJson> ordered = ordered_body(body, req.body);
  NativeRequest r = parse_native_request(body, options_.limits, ordered ? &*ordered : nullptr);
  const ModelInfo& info = backend->model_info();
  check_params(r.params, info.vocab_size);

  NativeFormatOptions fo;
  fo.stream = r.stream;
  fo.incremental = r.incremental;
  fo.multi = r.multi;
  fo.batch = r.batch;
  fo.aux_info = r.aux_info;
  fo.return_input_ids = r.return_input_ids;
  fo.return_output_ids = r.return_output_ids;
  fo.beam_responses = r.beam_responses;
  fo.num_sequences = r.params.num_return_sequences;
  // A task prompt begins the sequence: the special tokens a raw prompt gets are its.
  const std::vector<int32_t> prefix = task_prefix(r.task_id);
  std::vector<CallPrompt> prompts;
  for (auto& np : r.prompts) {
    // A raw prompt's special tokens are matched (its sender wrote the template); a chat's
    // only in the template's own text.
    ChatPrompt chat;
    if (np.is_chat) {
      chat = backend->render_chat(np.messages, nullptr, true, r.chat_template_kwargs, control);
      if (options_.special_tokens_in_content) chat.untrusted.clear();
    } else {
      chat.text = np.text;
    }
    const std::string& text = chat.text;
    std::vector<int32_t> own = backend->encode_chat(chat, !np.is_chat && prefix.empty());
    if (own.empty())
      throw ApiError(400, "invalid_request_error", "the prompt encodes to no tokens", "prompt", {},
                     NativeErrorCode::kEmptyPrompt);
    fo.input_ids.push_back(own);  // aux_info.input_len: the request's own tokens
    fo.prefix_lens.push_back(static_cast<int32_t>(prefix.size()));
    std::vector<int32_t> ids = with_prefix(prefix, std::move(own));
    int64_t len = static_cast<int64_t>(ids.size());
    if (len >= info.max_model_len)
      throw ApiError(400, "invalid_request_error",
                     "prompt has " + std::to_string(len) +
                         " tokens; the model's maximum sequence length is " +
                         std::to_string(info.max_model_len),
                     "prompt", "context_length_exceeded", NativeErrorCode::kLongPrompt);
    GenerationParams p = r.params;
    p.adapter_name = np.adapter_name;
    if (!np.images.empty()) {
      require_image_support(info, np.images, np.images[0].field);
      load_images(np.images, options_.media, true, "images");
      p.images = np.images;
    }
    // As RTP-LLM does, an over-long max_new_tokens is cut to the room the window leaves.
    int64_t room = info.max_model_len - len;
    int64_t want = r.max_new_tokens.value_or(room);
    if (options_.limits.max_tokens > 0) want = std::min(want, options_.limits.max_tokens);
    p.max_new_tokens = static_cast<int32_t>(std::min(want, room));
    if (options_.log_prompts)
      log_info("native prompt ({} tokens): {}", ids.size(), clip_for_log(text));
    prompts.push_back({std::move(ids), std::move(p)});
  }
  run_call(w, make_native_formatter(std::move(fo)), std::move(prompts), true);
}

}  // namespace tachyon::server
