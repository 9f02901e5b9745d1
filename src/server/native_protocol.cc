#include "server/native_protocol.h"

#include "server/api_error.h"
#include "server/image_inputs.h"
#include "server/json_fields.h"

namespace tachyon::server {
namespace {

constexpr int64_t kMaxTokenId = (int64_t{1} << 31) - 1;

ApiError config_error(const ApiError& e) {
  // RTP-LLM reports generate_config problems with their own code.
  return ApiError(e.status(), e.type(), e.message(), e.param(), e.code(),
                  e.native_code() == NativeErrorCode::kInputFormat
                      ? NativeErrorCode::kGenerateConfigFormat
                      : e.native_code());
}

// Reads GenerateConfig fields from one object (generate_config, or the top level).
// Later calls override earlier ones, field by field.
struct ConfigFields {
  std::optional<int64_t> max_new_tokens, min_new_tokens, top_k, random_seed, num_return_sequences,
      num_beams, timeout_ms, no_repeat_ngram_size;
  std::optional<double> top_p, temperature, repetition_penalty, presence_penalty, frequency_penalty,
      min_p, length_penalty;
  std::optional<bool> ignore_eos, force_disable_sp_run, return_incremental, return_input_ids,
      return_output_ids, yield_generator, do_sample, skip_special_tokens, aux_info;
  std::optional<std::vector<std::string>> stop_words_str;
  std::optional<std::vector<std::vector<int32_t>>> stop_words_list, bad_words_list;
  std::optional<Json> chat_template_kwargs;
  std::optional<std::string> task_id;
  // Structured output: regex, ebnf, choice, json_schema or response_format (one at most
  // per object).
  std::optional<grammar::GrammarSpec> constraint;
  // A name or a list of names (each "" or null for the base model), as sent.
  std::optional<std::vector<std::string>> adapter_names;
  bool adapter_list = false;

  // `ordered`: r's object from ordered_body (or nullptr).
  void read(FieldReader& r, const RequestLimits& lim, const OrderedJson* ordered) {
    auto pick = [](auto& dst, auto v) {
      if (v) dst = v;
    };
    pick(max_new_tokens, r.opt_int("max_new_tokens", 1, INT32_MAX));
    pick(max_new_tokens, r.opt_int("gen_length", 1, INT32_MAX));
    pick(min_new_tokens, r.opt_int("min_new_tokens", 0, INT32_MAX));
    pick(top_k, r.opt_int("top_k", 0, 1 << 20));
    pick(top_p, r.opt_number("top_p", 0.0, 1.0));
    pick(temperature, r.opt_number("temperature", 0.0, 100.0));
    pick(repetition_penalty, r.opt_number("repetition_penalty", 1e-6, 100.0));
    pick(presence_penalty, r.opt_number("presence_penalty", -100.0, 100.0));
    pick(frequency_penalty, r.opt_number("frequency_penalty", -100.0, 100.0));
    pick(min_p, r.opt_number("min_p", 0.0, 1.0));
    pick(length_penalty, r.opt_number("length_penalty", -100.0, 100.0));
    pick(no_repeat_ngram_size, r.opt_int("no_repeat_ngram_size", 0, 1 << 20));
    pick(random_seed, r.opt_int("random_seed", INT64_MIN, INT64_MAX));
    pick(num_return_sequences, r.opt_int("num_return_sequences", 0, lim.max_n));
    pick(num_beams, r.opt_int("num_beams", 1, lim.max_n));
    pick(timeout_ms, r.opt_int("timeout_ms", INT64_MIN, INT64_MAX));
    pick(ignore_eos, r.opt_bool("ignore_eos"));
    pick(force_disable_sp_run, r.opt_bool("force_disable_sp_run"));
    pick(return_incremental, r.opt_bool("return_incremental"));
    pick(return_input_ids, r.opt_bool("return_input_ids"));
    pick(return_input_ids, r.opt_bool("output_input_ids"));
    pick(return_output_ids, r.opt_bool("return_output_ids"));
    pick(yield_generator, r.opt_bool("yield_generator"));
    pick(do_sample, r.opt_bool("do_sample"));
    pick(skip_special_tokens, r.opt_bool("skip_special_tokens"));
    pick(aux_info, r.opt_bool("aux_info"));
    pick(stop_words_str,
         r.opt_strings("stop_words_str", static_cast<size_t>(lim.max_stop), lim.max_stop_bytes));
    pick(stop_words_list,
         r.opt_int_lists("stop_words_list", 0, kMaxTokenId, static_cast<size_t>(lim.max_stop), 64));
    pick(bad_words_list, r.opt_int_lists("bad_words_list", 0, kMaxTokenId, 1024, 64));
    if (const Json* k = r.raw("chat_template_kwargs")) {
      if (!k->is_object())
        throw ApiError::bad_request(r.path("chat_template_kwargs") + " must be an object",
                                    r.path("chat_template_kwargs"));
      chat_template_kwargs = *k;
    }
    if (const Json* t = r.raw("task_id")) task_id = read_task_id(*t, r.path("task_id"));
    read_constraint(r, ordered);
    if (const Json* a = r.raw("adapter_name")) read_adapter_names(*a, r.path("adapter_name"));
    // Fields RTP-LLM has that this server cannot honour yet: refused, never ignored.
    r.refuse_unless("return_logits", {false}, "returning logits is not supported");
    r.refuse_unless("output_logits", {false}, "returning logits is not supported");
    r.refuse_unless("select_tokens_id", {Json::array()}, "returning logits is not supported");
    r.refuse_unless("select_tokens_str", {Json::array()}, "returning logits is not supported");
    r.refuse_unless("return_hidden_states", {false}, "returning hidden states is not supported");
    r.refuse_unless("output_hidden_states", {false}, "returning hidden states is not supported");
    r.refuse_unless("calculate_loss", {0}, "loss computation is not supported");
    r.refuse_unless("return_softmax_probs", {false}, "returning probabilities is not supported");
    r.refuse_unless("return_all_probs", {false}, "returning probabilities is not supported");
    r.refuse_unless("print_stop_words", {false}, "stop words are always removed from the output");
    r.refuse_unless("variable_num_beams", {Json::array()},
                    "variable beam widths are not supported");
    r.refuse_unless("top_p_decay", {}, "top_p decay is not supported");
    r.refuse_unless("top_p_min", {}, "top_p decay is not supported");
    r.refuse_unless("top_p_reset_ids", {}, "top_p decay is not supported");
    // Bookkeeping fields RTP-LLM clients send that change nothing here.
    for (const char* k : {"return_cum_log_probs", "is_streaming", "request_format", "trace_id",
                          "chat_id", "traffic_reject_priority", "md5_value", "timeline",
                          "gen_timeline", "reuse_cache", "can_use_pd_separation"})
      r.ignore(k);
  }

  void read_constraint(FieldReader& r, const OrderedJson* ordered) {
    using Kind = grammar::GrammarSpec::Kind;
    std::optional<grammar::GrammarSpec> c;
    if (auto v = r.opt_string("regex"))
      set_constraint(c, grammar::GrammarSpec{Kind::kRegex, *v, {}}, r.path("regex"));
    if (auto v = r.opt_string("ebnf"))
      set_constraint(c, grammar::GrammarSpec{Kind::kGrammar, *v, {}}, r.path("ebnf"));
    if (auto v = r.opt_strings("choice", 4096, 1u << 16)) {
      if (v->empty())
        throw ApiError::bad_request(r.path("choice") + " must not be empty", r.path("choice"));
      set_constraint(c, grammar::GrammarSpec{Kind::kChoice, {}, *v}, r.path("choice"));
    }
    if (const Json* rf = r.raw("response_format"))
      set_constraint(c,
                     read_response_format(*rf, r.path("response_format"),
                                          ordered_member(ordered, "response_format")),
                     r.path("response_format"));
    if (const Json* js = r.raw("json_schema"))
      set_constraint(c,
                     json_schema_spec(*js, ordered_member(ordered, "json_schema"), false,
                                      r.path("json_schema")),
                     r.path("json_schema"));
    if (c) constraint = std::move(c);
  }

  void read_adapter_names(const Json& v, const std::string& field) {
    auto one = [&](const Json& item, const std::string& where) -> std::string {
      if (item.is_null()) return {};
      if (!item.is_string())
        throw ApiError::bad_request(
            where + " must be an adapter's name (a string), not " + json_type_name(item), where);
      std::string name = item.get<std::string>();
      if (name.size() > 4096) throw ApiError::bad_request(where + " is too long", where);
      return name;
    };
    std::vector<std::string> names;
    adapter_list = v.is_array();
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i)
        names.push_back(one(v[i], field + "[" + std::to_string(i) + "]"));
    } else {
      names.push_back(one(v, field));
    }
    adapter_names = std::move(names);
  }

  void apply(NativeRequest& req, const RequestLimits& lim) const {
    auto& p = req.params;
    if (max_new_tokens) req.max_new_tokens = *max_new_tokens;
    if (min_new_tokens) p.min_new_tokens = static_cast<int32_t>(*min_new_tokens);
    if (top_k) p.top_k = static_cast<int32_t>(*top_k);
    if (top_p) {
      check_top_p(*top_p);
      p.top_p = static_cast<float>(*top_p);
    }
    if (temperature) p.temperature = static_cast<float>(*temperature);
    if (do_sample && !*do_sample) p.temperature = 0.0f;  // greedy
    if (repetition_penalty) p.repetition_penalty = static_cast<float>(*repetition_penalty);
    if (presence_penalty) p.presence_penalty = static_cast<float>(*presence_penalty);
    if (frequency_penalty) p.frequency_penalty = static_cast<float>(*frequency_penalty);
    if (min_p) p.min_p = static_cast<float>(*min_p);
    if (length_penalty) p.length_penalty = static_cast<float>(*length_penalty);
    if (no_repeat_ngram_size) p.no_repeat_ngram_size = static_cast<int32_t>(*no_repeat_ngram_size);
    if (random_seed) p.random_seed = static_cast<uint64_t>(*random_seed);
    if (ignore_eos) p.ignore_eos = *ignore_eos;
    if (force_disable_sp_run) p.force_disable_sp_run = *force_disable_sp_run;
    if (skip_special_tokens) p.skip_special_tokens = *skip_special_tokens;
    if (stop_words_str) {
      for (const auto& s : *stop_words_str)
        if (s.empty())
          throw ApiError::bad_request("stop_words_str must not hold empty strings",
                                      "stop_words_str");
      p.stop_words_str = *stop_words_str;
    }
    if (stop_words_list) p.stop_words_list = *stop_words_list;
    if (constraint) p.constraint = constraint;
    if (bad_words_list)
      throw ApiError::unsupported("bad_words_list is not supported yet", "bad_words_list");
    if (timeout_ms && *timeout_ms > 0) p.timeout_ms = *timeout_ms;
    if (p.timeout_ms == 0) p.timeout_ms = lim.default_timeout_ms;
    if (lim.max_timeout_ms > 0 && (p.timeout_ms == 0 || p.timeout_ms > lim.max_timeout_ms))
      p.timeout_ms = lim.max_timeout_ms;
    int64_t nrs = num_return_sequences.value_or(0);
    int64_t beams = num_beams.value_or(1);
    req.multi = nrs >= 1;
    p.num_beams = static_cast<int32_t>(beams);
    if (beams > 1) {
      if (nrs > beams)
        throw ApiError::bad_request("num_return_sequences must not exceed num_beams",
                                    "num_return_sequences");
      p.num_return_sequences = static_cast<int32_t>(nrs >= 1 ? nrs : beams);
      req.beam_responses = nrs == 0;
    } else {
      p.num_return_sequences = static_cast<int32_t>(std::max<int64_t>(nrs, 1));
    }
    req.incremental = return_incremental.value_or(false);
    req.return_input_ids = return_input_ids.value_or(false);
    req.return_output_ids = return_output_ids.value_or(false);
    req.aux_info = aux_info.value_or(true);
    if (chat_template_kwargs) req.chat_template_kwargs = *chat_template_kwargs;
    req.task_id = task_id;
  }
};

NativePrompt prompt_from(const Json& v, const std::string& where) {
  NativePrompt p;
  if (v.is_string()) {
    p.text = v.get<std::string>();
    if (p.text.empty())
      throw ApiError(400, "invalid_request_error", where + " is empty", where, {},
                     NativeErrorCode::kEmptyPrompt);
    return p;
  }
  if (v.is_array() && !v.empty() && v[0].is_object()) {
    p.is_chat = true;
    p.messages = parse_chat_messages(&v, where, &p.images);
    return p;
  }
  throw ApiError::bad_request(
      where + " must be a string or a list of chat messages, not " +
          (v.is_array() ? std::string("a list of ") + (v.empty() ? "nothing" : json_type_name(v[0]))
                        : std::string(json_type_name(v))),
      where);
}

}  // namespace

NativeRequest parse_native_request(const Json& body, const RequestLimits& limits,
                                   const OrderedJson* ordered) {
  NativeRequest req;
  FieldReader top(body);
  ConfigFields fields;
  try {
    const Json* gc = top.raw("generate_config");
    const Json* gc2 = top.raw("generation_config");
    if (gc && gc2)
      throw ApiError::bad_request("give generate_config or generation_config, not both",
                                  "generation_config");
    if (gc || gc2) {
      const char* name = gc ? "generate_config" : "generation_config";
      FieldReader cr(gc ? *gc : *gc2, name);
      fields.read(cr, limits, ordered_member(ordered, name));
      cr.finish();
    }
    fields.read(top, limits, ordered);  // top-level fields win, as in RTP-LLM
    fields.apply(req, limits);
  } catch (const ApiError& e) {
    throw config_error(e);
  }
  req.stream = fields.yield_generator.value_or(false) || top.opt_bool("stream").value_or(false);
  if (req.incremental && !req.stream)
    throw ApiError::bad_request("request is non_stream but use incremental decoder",
                                "return_incremental");

  const Json* prompt = top.raw("prompt");
  const Json* text = top.raw("text");
  const Json* messages = top.raw("messages");
  const Json* batch = top.raw("prompt_batch");
  int given = (prompt != nullptr) + (text != nullptr) + (messages != nullptr) + (batch != nullptr);
  if (given == 0)
    throw ApiError(400, "invalid_request_error",
                   "no prompt in request: give prompt, messages or prompt_batch", "prompt", {},
                   NativeErrorCode::kNoPrompt);
  if (given > 1)
    throw ApiError::bad_request("give only one of prompt, text, messages and prompt_batch",
                                "prompt");
  if (prompt || text) {
    const Json& v = prompt ? *prompt : *text;
    if (v.is_array() && !v.empty() && v[0].is_string())
      throw ApiError::bad_request("prompt holds several texts: send them as prompt_batch",
                                  "prompt");
    req.prompts.push_back(prompt_from(v, prompt ? "prompt" : "text"));
  } else if (messages) {
    NativePrompt p;
    p.is_chat = true;
    p.messages = parse_chat_messages(messages, "messages", &p.images);
    req.prompts.push_back(std::move(p));
  } else {
    if (!batch->is_array())
      throw ApiError::bad_request("prompt batch input should be list", "prompt_batch");
    if (batch->empty())
      throw ApiError::bad_request("prompt_batch must not be empty", "prompt_batch");
    if (batch->size() > static_cast<size_t>(limits.max_prompts))
      throw ApiError::bad_request("prompt_batch holds " + std::to_string(batch->size()) +
                                      " prompts; at most " + std::to_string(limits.max_prompts) +
                                      " are allowed",
                                  "prompt_batch");
    req.batch = true;
    for (size_t i = 0; i < batch->size(); ++i)
      req.prompts.push_back(prompt_from((*batch)[i], "prompt_batch[" + std::to_string(i) + "]"));
  }
  if (const Json* images = top.raw("images")) {
    auto lists = parse_native_images(*images, req.prompts.size(), req.batch);
    for (size_t i = 0; i < req.prompts.size(); ++i)
      for (RequestImage& in : lists[i]) req.prompts[i].images.push_back(std::move(in));
  }
  if (top.has("urls")) throw ApiError::unsupported("urls is not supported: give images", "urls");
  top.ignore("urls");
  if (fields.adapter_names) {
    const std::vector<std::string>& names = *fields.adapter_names;
    if (fields.adapter_list && names.size() != req.prompts.size())
      throw config_error(
          ApiError::bad_request("adapter_name holds " + std::to_string(names.size()) +
                                    " names for " + std::to_string(req.prompts.size()) +
                                    " prompts: give one name, or one per prompt of prompt_batch",
                                "adapter_name"));
    for (size_t i = 0; i < req.prompts.size(); ++i)
      req.prompts[i].adapter_name = fields.adapter_list ? names[i] : names[0];
  }
  if (auto s = top.opt_string("source", 256)) req.source = *s;
  top.opt_bool("private_request");
  top.finish();
  return req;
}

}  // namespace tachyon::server
