#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "frontend/task_prompts.h"
#include "grammar/json_schema.h"
#include "server/api_error.h"
#include "server/image_inputs.h"
#include "server/json_fields.h"

namespace tachyon::server {
namespace {

constexpr int64_t kMaxTokenId = (int64_t{1} << 31) - 1;

// Fields both endpoints read the same way.
void read_sampling(FieldReader& r, OpenAIRequest& req, const RequestLimits& limits) {
  auto& p = req.params;
  r.opt_string("model", 4096);
  if (r.has("model")) req.model = r.raw("model")->get<std::string>();
  r.opt_string("user", 4096);  // accepted, unused
  if (auto v = r.opt_number("temperature", 0.0, 2.0)) p.temperature = static_cast<float>(*v);
  if (auto v = r.opt_number("top_p", 0.0, 1.0)) {
    check_top_p(*v);
    p.top_p = static_cast<float>(*v);
  }
  if (auto v = r.opt_number("presence_penalty", -2.0, 2.0))
    p.presence_penalty = static_cast<float>(*v);
  if (auto v = r.opt_number("frequency_penalty", -2.0, 2.0))
    p.frequency_penalty = static_cast<float>(*v);
  if (auto v = r.opt_int("seed", INT64_MIN, INT64_MAX)) p.random_seed = static_cast<uint64_t>(*v);
  if (auto v = r.opt_int("n", 1, limits.max_n)) req.n = static_cast<int32_t>(*v);
  if (const Json* lb = r.raw("logit_bias"))
    p.logit_bias = parse_logit_bias(*lb, "logit_bias", limits.max_logit_bias);
  if (auto v = r.opt_strings("stop", static_cast<size_t>(limits.max_stop), limits.max_stop_bytes)) {
    for (const auto& s : *v)
      if (s.empty()) throw ApiError::bad_request("stop strings must not be empty", "stop");
    p.stop_words_str = *v;
  }
  req.stream = r.opt_bool("stream").value_or(false);
  if (const Json* so = r.raw("stream_options")) {
    if (!req.stream)
      throw ApiError::bad_request("stream_options is only allowed when stream is true",
                                  "stream_options");
    FieldReader sr(*so, "stream_options");
    req.include_usage = sr.opt_bool("include_usage").value_or(false);
    sr.finish();
  }
  // Extensions most OpenAI-compatible servers accept (vLLM's names).
  if (auto v = r.opt_int("top_k", -1, 1 << 20)) p.top_k = *v < 0 ? 0 : static_cast<int32_t>(*v);
  if (auto v = r.opt_number("min_p", 0.0, 1.0)) p.min_p = static_cast<float>(*v);
  if (auto v = r.opt_number("repetition_penalty", 1e-6, 100.0))
    p.repetition_penalty = static_cast<float>(*v);
  if (auto v = r.opt_int("min_tokens", 0, 1 << 30)) p.min_new_tokens = static_cast<int32_t>(*v);
  if (auto v = r.opt_bool("ignore_eos")) p.ignore_eos = *v;
  if (auto v = r.opt_bool("skip_special_tokens")) p.skip_special_tokens = *v;
  r.refuse_unless("include_stop_str_in_output", {false},
                  "returning the stop string is not supported");
  r.refuse_unless("service_tier", {"auto", "default"}, "only the default service tier exists");
  r.refuse_unless("store", {false}, "stored completions are not supported");
  if (auto v = r.opt_int("timeout_ms", 1, INT64_MAX)) p.timeout_ms = *v;
  if (const Json* t = r.raw("task_id")) req.task_id = read_task_id(*t, "task_id");
  p.num_return_sequences = req.n;
  if (p.timeout_ms == 0) p.timeout_ms = limits.default_timeout_ms;
  if (limits.max_timeout_ms > 0 && (p.timeout_ms == 0 || p.timeout_ms > limits.max_timeout_ms))
    p.timeout_ms = limits.max_timeout_ms;
}

std::optional<int64_t> read_max_tokens(FieldReader& r, const char* newer) {
  std::optional<int64_t> out = r.opt_int("max_tokens", 1, INT32_MAX);
  if (newer != nullptr)
    if (auto v = r.opt_int(newer, 1, INT32_MAX)) out = v;
  return out;
}

// Message content for the template: a string, or a list of text parts joined into one.
// With `images`, image_url parts are taken too (appended there, in order), and the
// content of a message holding any is the list of parts in Hugging Face's form
// ({"type": "text", "text": ...} and {"type": "image"}), which multimodal templates read.
Json message_content(const Json& content, const std::string& where,
                     std::vector<RequestImage>* images) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw ApiError::bad_request(
        where + " must be a string or an array of content parts, not " + json_type_name(content),
        where);
  std::string text;
  Json parts = Json::array();
  bool has_image = false;
  for (size_t j = 0; j < content.size(); ++j) {
    std::string pw = where + "[" + std::to_string(j) + "]";
    FieldReader part(content[j], pw);
    auto type = part.opt_string("type", 64);
    if (!type) throw ApiError::bad_request(pw + ".type is required", pw + ".type");
    if (*type == "image_url" && images != nullptr) {
      const Json* v = part.raw("image_url");
      if (v == nullptr)
        throw ApiError::bad_request(pw + ".image_url is required", pw + ".image_url");
      images->push_back(parse_image_url(*v, pw + ".image_url"));
      images->back().field = pw;
      part.finish();
      parts.push_back({{"type", "image"}});
      has_image = true;
      continue;
    }
    if (*type != "text")
      throw ApiError::unsupported(
          pw + ".type '" + *type + "' is not supported: this model reads text only", pw + ".type");
    auto t = part.opt_string("text", SIZE_MAX);
    if (!t) throw ApiError::bad_request(pw + ".text is required", pw + ".text");
    part.finish();
    text += *t;
    parts.push_back({{"type", "text"}, {"text", *t}});
  }
  if (has_image) return parts;
  return text;
}

}  // namespace

Json parse_chat_messages(const Json* v, const std::string& field,
                         std::vector<RequestImage>* images) {
  if (v == nullptr) throw ApiError::bad_request(field + " is required", field);
  if (!v->is_array()) throw ApiError::bad_request(field + " must be an array", field);
  if (v->empty()) throw ApiError::bad_request(field + " must not be empty", field);
  Json out = Json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    std::string where = field + "[" + std::to_string(i) + "]";
    FieldReader m((*v)[i], where);
    auto role = m.opt_string("role", 64);
    if (!role) throw ApiError::bad_request(where + ".role is required", where + ".role");
    static const std::vector<std::string> kRoles = {"system", "developer", "user", "assistant",
                                                    "tool"};
    if (std::find(kRoles.begin(), kRoles.end(), *role) == kRoles.end())
      throw ApiError::bad_request(
          where + ".role '" + *role + "' is not one of system, developer, user, assistant, tool",
          where + ".role");
    Json msg = Json::object();
    msg["role"] = *role == "developer" ? std::string("system") : *role;
    const Json* content = m.raw("content");
    if (content == nullptr && *role != "assistant")
      throw ApiError::bad_request(where + ".content is required", where + ".content");
    msg["content"] = content == nullptr ? Json(std::string())
                                        : message_content(*content, where + ".content", images);
    if (auto name = m.opt_string("name", 256)) msg["name"] = *name;
    if (const Json* tc = m.raw("tool_calls")) {
      if (!tc->is_array())
        throw ApiError::bad_request(where + ".tool_calls must be an array", where + ".tool_calls");
      msg["tool_calls"] = *tc;
    }
    if (auto id = m.opt_string("tool_call_id", 256)) msg["tool_call_id"] = *id;
    m.refuse_unless("refusal", {}, "refusals cannot be replayed");
    m.finish();
    out.push_back(std::move(msg));
  }
  tool_call_arguments_as_objects(out);
  return out;
}

namespace {

// Structured output: response_format and vLLM's guided_* fields (one at most).
void read_constraints(FieldReader& r, GenerationParams& p, const OrderedJson* ordered) {
  using Kind = grammar::GrammarSpec::Kind;
  if (const Json* rf = r.raw("response_format"))
    set_constraint(
        p.constraint,
        read_response_format(*rf, "response_format", ordered_member(ordered, "response_format")),
        "response_format");
  if (const Json* v = r.raw("guided_json"))
    set_constraint(
        p.constraint,
        json_schema_spec(*v, ordered_member(ordered, "guided_json"), false, "guided_json"),
        "guided_json");
  if (auto v = r.opt_string("guided_regex"))
    set_constraint(p.constraint, grammar::GrammarSpec{Kind::kRegex, *v, {}}, "guided_regex");
  if (auto v = r.opt_strings("guided_choice", 4096, 1u << 16)) {
    if (v->empty()) throw ApiError::bad_request("guided_choice must not be empty", "guided_choice");
    set_constraint(p.constraint, grammar::GrammarSpec{Kind::kChoice, {}, *v}, "guided_choice");
  }
  if (auto v = r.opt_string("guided_grammar"))
    set_constraint(p.constraint, grammar::GrammarSpec{Kind::kGrammar, *v, {}}, "guided_grammar");
  r.refuse_unless("guided_whitespace_pattern", {},
                  "guided_whitespace_pattern is not supported yet");
  r.ignore("guided_decoding_backend");  // which library does it: this server has its own
}

PromptSpec ids_prompt(const Json& arr, const std::string& where) {
  PromptSpec p;
  p.is_ids = true;
  if (arr.empty()) throw ApiError::bad_request(where + " must not be empty", "prompt");
  for (size_t i = 0; i < arr.size(); ++i)
    p.ids.push_back(static_cast<int32_t>(
        json_to_int(arr[i], where + "[" + std::to_string(i) + "]", 0, kMaxTokenId)));
  return p;
}

std::vector<PromptSpec> parse_prompt(const Json* v, const RequestLimits& limits) {
  if (v == nullptr) throw ApiError::bad_request("prompt is required", "prompt");
  std::vector<PromptSpec> out;
  if (v->is_string()) {
    out.push_back({v->get<std::string>(), {}, false});
    return out;
  }
  if (!v->is_array())
    throw ApiError::bad_request(
        std::string(
            "prompt must be a string, an array of strings, an array of token ids or an array of "
            "arrays of token ids, not ") +
            json_type_name(*v),
        "prompt");
  if (v->empty()) throw ApiError::bad_request("prompt must not be empty", "prompt");
  if ((*v)[0].is_number()) {
    out.push_back(ids_prompt(*v, "prompt"));
    return out;
  }
  if (v->size() > static_cast<size_t>(limits.max_prompts))
    throw ApiError::bad_request("prompt holds " + std::to_string(v->size()) + " prompts; at most " +
                                    std::to_string(limits.max_prompts) + " are allowed",
                                "prompt");
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& e = (*v)[i];
    std::string where = "prompt[" + std::to_string(i) + "]";
    if (e.is_string()) {
      out.push_back({e.get<std::string>(), {}, false});
    } else if (e.is_array()) {
      out.push_back(ids_prompt(e, where));
    } else {
      throw ApiError::bad_request(where + " must be a string or an array of token ids", "prompt");
    }
  }
  return out;
}

void read_logprobs_chat(FieldReader& r, OpenAIRequest& req, const RequestLimits& limits) {
  req.logprobs = r.opt_bool("logprobs").value_or(false);
  if (auto k = r.opt_int("top_logprobs", 0, limits.max_top_logprobs)) {
    if (!req.logprobs)
      throw ApiError::bad_request("top_logprobs requires logprobs to be true", "top_logprobs");
    req.top_logprobs = static_cast<int32_t>(*k);
  }
  req.params.return_logprobs = req.logprobs;
  req.params.top_logprobs = req.top_logprobs;
}

}  // namespace

std::optional<OrderedJson> ordered_body(const Json& body, const std::string& text) {
  auto wants = [](const Json& o) {
    if (!o.is_object()) return false;
    for (const char* k : {"tools", "guided_json", "json_schema"})
      if (o.contains(k)) return true;
    auto rf = o.find("response_format");
    return rf != o.end() && rf->is_object() && rf->value("type", Json()) == "json_schema";
  };
  bool any = wants(body);
  for (const char* k : {"generate_config", "generation_config"})
    if (auto it = body.find(k); it != body.end()) any = any || wants(*it);
  if (!any) return std::nullopt;
  try {
    return OrderedJson::parse(text);
  } catch (const OrderedJson::exception&) {
    return std::nullopt;  // parsed once already: cannot happen
  }
}

const OrderedJson* ordered_member(const OrderedJson* ordered, const std::string& key) {
  if (!ordered || !ordered->is_object()) return nullptr;
  auto it = ordered->find(key);
  return it == ordered->end() ? nullptr : &*it;
}

grammar::GrammarSpec json_schema_spec(const Json& schema, const OrderedJson* ordered, bool strict,
                                      const std::string& field) {
  grammar::GrammarSpec spec;
  spec.kind = grammar::GrammarSpec::Kind::kJsonSchema;
  spec.strict = strict;
  if (schema.is_string())
    spec.text = schema.get<std::string>();
  else if (schema.is_object() || schema.is_boolean())
    spec.text = ordered && (ordered->is_object() || ordered->is_boolean()) ? ordered->dump()
                                                                           : schema.dump();
  else
    throw ApiError::bad_request(
        field + " must be a JSON Schema (an object), not " + json_type_name(schema), field);
  try {
    grammar::json_schema_rules(spec.text, strict, grammar::GrammarLimits{});
  } catch (const InvalidArgument& e) {
    throw ApiError::bad_request(field + ": " + e.what(), field);
  }
  return spec;
}

std::optional<grammar::GrammarSpec> read_response_format(const Json& v, const std::string& field,
                                                         const OrderedJson* ordered) {
  if (!v.is_object())
    throw ApiError::bad_request(field + " must be an object, not " + json_type_name(v), field);
  FieldReader f(v, field);
  const std::optional<std::string> type = f.opt_string("type", 64);
  if (!type) throw ApiError::bad_request(field + ".type is required", field);
  std::optional<grammar::GrammarSpec> spec;
  if (*type == "json_schema") {
    const std::string where = field + ".json_schema";
    const Json* js = f.raw("json_schema");
    if (!js || !js->is_object())
      throw ApiError::bad_request(where + " must be an object with the schema", where);
    FieldReader j(*js, where);
    j.opt_string("name", 256);  // OpenAI requires one; it names the schema, nothing more
    j.opt_string("description", 1u << 16);
    const bool strict = j.opt_bool("strict").value_or(false);
    const Json* schema = j.raw("schema");
    static const Json kAny = Json::object();
    spec = json_schema_spec(schema ? *schema : kAny,
                            ordered_member(ordered_member(ordered, "json_schema"), "schema"),
                            strict, where + ".schema");
    j.finish();
  } else if (*type == "json_object") {
    spec = grammar::GrammarSpec{grammar::GrammarSpec::Kind::kJsonObject, {}, {}};
  } else if (*type != "text") {
    throw ApiError::bad_request(
        field + ".type must be one of text, json_object, json_schema; got '" + *type + "'", field);
  }
  f.finish();
  return spec;
}

void set_constraint(std::optional<grammar::GrammarSpec>& dst,
                    std::optional<grammar::GrammarSpec> spec, const std::string& field) {
  if (!spec) return;
  if (dst)
    throw ApiError::bad_request(
        field +
            ": only one structured-output constraint (response_format, a regex, a choice "
            "or a grammar) may be given",
        field);
  dst = std::move(spec);
}

std::vector<std::pair<int32_t, float>> parse_logit_bias(const Json& v, const std::string& field,
                                                        size_t max_entries) {
  if (!v.is_object())
    throw ApiError::bad_request(field + " must be an object mapping token ids to biases", field);
  if (v.size() > max_entries)
    throw ApiError::bad_request(
        field + " has more than " + std::to_string(max_entries) + " entries", field);
  std::vector<std::pair<int32_t, float>> out;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    int64_t id = -1;
    bool digits = !key.empty() && key.size() <= 10 &&
                  std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) id = std::stoll(key);
    if (!digits || id > kMaxTokenId)
      throw ApiError::bad_request(field + " keys must be token ids, got '" + key + "'", field);
    double bias = json_to_number(*it, field + "." + key, -100.0, 100.0);
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  std::sort(out.begin(), out.end());
  return out;
}

OpenAIRequest parse_chat_request(const Json& body, const RequestLimits& limits,
                                 const OrderedJson* ordered) {
  OpenAIRequest req;
  req.kind = OpenAIRequest::Kind::kChat;
  req.add_special_tokens = false;  // the template writes the special tokens
  FieldReader r(body);
  req.messages = parse_chat_messages(r.raw("messages"), "messages", &req.params.images);
  read_sampling(r, req, limits);
  read_logprobs_chat(r, req, limits);
  req.max_tokens = read_max_tokens(r, "max_completion_tokens");
  read_constraints(r, req.params, ordered);
  req.tools = read_tools(r, ordered, req.params.constraint);
  if (auto v = r.opt_bool("add_generation_prompt")) req.add_generation_prompt = *v;
  if (const Json* k = r.raw("chat_template_kwargs")) {
    if (!k->is_object())
      throw ApiError::bad_request("chat_template_kwargs must be an object", "chat_template_kwargs");
    req.chat_template_kwargs = *k;
  }
  r.finish();
  return req;
}

OpenAIRequest parse_completion_request(const Json& body, const RequestLimits& limits,
                                       const OrderedJson* ordered) {
  OpenAIRequest req;
  req.kind = OpenAIRequest::Kind::kCompletion;
  FieldReader r(body);
  req.prompts = parse_prompt(r.raw("prompt"), limits);
  read_sampling(r, req, limits);
  if (auto k = r.opt_int("logprobs", 0, limits.max_top_logprobs)) {
    req.logprobs = true;
    req.top_logprobs = static_cast<int32_t>(*k);
    req.params.return_logprobs = true;
    req.params.top_logprobs = req.top_logprobs;
  }
  req.max_tokens = read_max_tokens(r, nullptr);
  read_constraints(r, req.params, ordered);
  req.echo = r.opt_bool("echo").value_or(false);
  if (req.echo && req.logprobs)
    throw ApiError::unsupported(
        "echo with logprobs is not supported (prompt logprobs are not computed)", "echo");
  if (auto b = r.opt_int("best_of", 1, limits.max_n); b && *b != req.n)
    throw ApiError::unsupported("best_of other than n is not supported", "best_of");
  r.refuse_unless("suffix", {""}, "suffix (insertion) is not supported");
  if (auto v = r.opt_bool("add_special_tokens")) req.add_special_tokens = *v;
  r.finish();
  return req;
}

std::string read_task_id(const Json& v, const std::string& field) {
  std::optional<std::string> key = task_id_key(v);
  if (!key)
    throw ApiError::bad_request(field + " must be an integer or a string, not " + json_type_name(v),
                                field);
  return *key;
}

void check_top_p(double top_p) {
  if (!(top_p > 0.0))
    throw ApiError::bad_request(fmt::format("top_p must be greater than 0 (got {})", top_p),
                                "top_p");
  if (!(static_cast<float>(top_p) > 0.0f))
    throw ApiError::bad_request(
        fmt::format("top_p {} is 0 as a 32-bit float; it must be greater than 0", top_p), "top_p");
}

int32_t resolve_max_new_tokens(std::optional<int64_t> requested, int64_t prompt_len,
                               int64_t max_model_len, int64_t cap, const char* prompt_word) {
  if (prompt_len >= max_model_len)
    throw ApiError::context_length("This model's maximum context length is " +
                                       std::to_string(max_model_len) + " tokens. However, your " +
                                       prompt_word + " has " + std::to_string(prompt_len) +
                                       " tokens, leaving no room for the completion.",
                                   prompt_word);
  int64_t room = max_model_len - prompt_len;
  if (cap > 0 && requested && *requested > cap)
    throw ApiError::bad_request("max_tokens is " + std::to_string(*requested) + "; at most " +
                                    std::to_string(cap) + " is allowed",
                                "max_tokens");
  if (!requested) return static_cast<int32_t>(cap > 0 ? std::min(room, cap) : room);
  if (*requested > room)
    throw ApiError::context_length(
        "This model's maximum context length is " + std::to_string(max_model_len) +
            " tokens. However, you requested " + std::to_string(prompt_len + *requested) +
            " tokens (" + std::to_string(prompt_len) + " in the " + prompt_word + ", " +
            std::to_string(*requested) + " in the completion). Please reduce the length of the " +
            prompt_word + " or completion.",
        prompt_word);
  return static_cast<int32_t>(*requested);
}

}  // namespace tachyon::server
