#include "engine/generate_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string_view>

#include "core/error.h"

namespace tachyon {
namespace {

std::string_view type_name(const Json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

[[noreturn]] void wrong_type(std::string_view field, std::string_view want, const Json& v) {
  raise<InvalidArgument>("generate_config.{}: expected {}, got {}", field, want, type_name(v));
}

int64_t get_int(const Json& v, std::string_view field, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        raise<InvalidArgument>("generate_config.{}: {} is out of range [{}, {}]", field, u, lo, hi);
      x = static_cast<int64_t>(u);
    } else {
      x = v.get<int64_t>();
    }
  } else if (v.is_number_float()) {
    // 10.0 is accepted as 10; 10.5 is not an integer.
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15)
      raise<InvalidArgument>("generate_config.{}: expected an integer, got {}", field, d);
    x = static_cast<int64_t>(d);
  } else {
    wrong_type(field, "an integer", v);
  }
  if (x < lo || x > hi)
    raise<InvalidArgument>("generate_config.{}: {} is out of range [{}, {}]", field, x, lo, hi);
  return x;
}

float get_float(const Json& v, std::string_view field) {
  if (!v.is_number()) wrong_type(field, "a number", v);
  double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > 3.0e38)
    raise<InvalidArgument>("generate_config.{}: {} is not a finite number", field, d);
  return static_cast<float>(d);
}

bool get_bool(const Json& v, std::string_view field) {
  if (!v.is_boolean()) wrong_type(field, "a boolean", v);
  return v.get<bool>();
}

std::vector<int32_t> get_token_list(const Json& v, std::string_view field) {
  if (!v.is_array()) wrong_type(field, "an array of token ids", v);
  if (v.size() > kMaxTokenListEntries)
    raise<InvalidArgument>("generate_config.{}: more than {} entries", field, kMaxTokenListEntries);
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (const auto& t : v)
    out.push_back(static_cast<int32_t>(get_int(t, field, 0, std::numeric_limits<int32_t>::max())));
  return out;
}

// A list of token sequences: [[1, 2], [3]]. A flat list [1, 2] is read as one sequence
// per id, since RTP-LLM clients send both shapes.
std::vector<std::vector<int32_t>> get_token_lists(const Json& v, std::string_view field) {
  if (!v.is_array()) wrong_type(field, "an array of token id arrays", v);
  if (v.size() > kMaxTokenListEntries)
    raise<InvalidArgument>("generate_config.{}: more than {} entries", field, kMaxTokenListEntries);
  std::vector<std::vector<int32_t>> out;
  for (const auto& item : v) {
    if (item.is_array()) {
      auto seq = get_token_list(item, field);
      if (seq.empty()) raise<InvalidArgument>("generate_config.{}: empty token sequence", field);
      out.push_back(std::move(seq));
    } else {
      out.push_back(
          {static_cast<int32_t>(get_int(item, field, 0, std::numeric_limits<int32_t>::max()))});
    }
  }
  return out;
}

std::vector<std::string> get_string_list(const Json& v, std::string_view field) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const auto& s : v) {
      if (!s.is_string()) wrong_type(field, "an array of strings", s);
      out.push_back(s.get<std::string>());
    }
  } else {
    wrong_type(field, "an array of strings", v);
  }
  return out;
}

std::vector<std::pair<int32_t, float>> get_logit_bias(const Json& v, std::string_view field) {
  std::map<int32_t, float> bias;
  auto add = [&](int64_t token, float b) {
    if (!bias.emplace(static_cast<int32_t>(token), b).second)
      raise<InvalidArgument>("generate_config.{}: token {} given twice", field, token);
  };
  if (v.is_object()) {
    // OpenAI's shape: {"123": -100}.
    for (const auto& [key, value] : v.items()) {
      int64_t token = -1;
      bool ok = !key.empty() && key.size() <= 10 &&
                std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (ok) token = std::stoll(key);
      if (!ok || token > std::numeric_limits<int32_t>::max())
        raise<InvalidArgument>("generate_config.{}: key '{}' is not a token id", field, key);
      add(token, get_float(value, field));
    }
  } else if (v.is_array()) {
    // [[token, bias], ...]
    for (const auto& item : v) {
      if (!item.is_array() || item.size() != 2) wrong_type(field, "[token, bias] pairs", item);
      add(get_int(item[0], field, 0, std::numeric_limits<int32_t>::max()),
          get_float(item[1], field));
    }
  } else {
    wrong_type(field, "an object mapping token ids to biases", v);
  }
  if (bias.size() > kMaxTokenListEntries)
    raise<InvalidArgument>("generate_config.{}: more than {} entries", field, kMaxTokenListEntries);
  return {bias.begin(), bias.end()};
}

// A structured-output field (regex, ebnf, choice, response_format); nullopt for
// response_format {"type": "text"} (no constraint).
std::optional<grammar::GrammarSpec> parse_constraint(std::string_view k, const Json& v) {
  using Kind = grammar::GrammarSpec::Kind;
  grammar::GrammarSpec spec;
  if (k == "regex" || k == "ebnf") {
    if (!v.is_string()) wrong_type(k, "a string", v);
    spec.kind = k == "regex" ? Kind::kRegex : Kind::kGrammar;
    spec.text = v.get<std::string>();
    return spec;
  }
  if (k == "json_schema") {  // RTP-LLM's field: the schema, or its JSON as a string
    spec.kind = Kind::kJsonSchema;
    spec.text = v.is_string() ? v.get<std::string>() : v.dump();
    return spec;
  }
  if (k == "choice") {
    spec.kind = Kind::kChoice;
    spec.choices = get_string_list(v, k);
    if (spec.choices.empty()) raise<InvalidArgument>("generate_config.choice: the list is empty");
    return spec;
  }
  if (!v.is_object()) wrong_type(k, "an object", v);
  for (const auto& [key, x] : v.items())
    if (key != "type" && key != "json_schema")
      raise<InvalidArgument>("generate_config.response_format: unknown field '{}'", key);
  auto type = v.find("type");
  if (type == v.end() || !type->is_string())
    raise<InvalidArgument>("generate_config.response_format.type: a string is required");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    spec.kind = Kind::kJsonObject;
    return spec;
  }
  if (t == "json_schema") {
    auto js = v.find("json_schema");
    if (js == v.end() || !js->is_object())
      raise<InvalidArgument>("generate_config.response_format.json_schema: an object is required");
    for (const auto& [key, x] : js->items())
      if (key != "name" && key != "schema" && key != "strict" && key != "description")
        raise<InvalidArgument>("generate_config.response_format.json_schema: unknown field '{}'",
                               key);
    spec.kind = Kind::kJsonSchema;
    spec.text = js->contains("schema") ? (*js)["schema"].dump() : "{}";
    spec.strict = js->value("strict", false);
    return spec;
  }
  raise<InvalidArgument>(
      "generate_config.response_format.type: '{}' is not one of text, json_object, json_schema", t);
}

Json token_lists_json(const std::vector<std::vector<int32_t>>& lists) {
  Json out = Json::array();
  for (const auto& l : lists) out.push_back(l);
  return out;
}

}  // namespace

static std::string_view constraint_field(const grammar::GrammarSpec& spec) {
  using Kind = grammar::GrammarSpec::Kind;
  switch (spec.kind) {
    case Kind::kRegex:
      return "regex";
    case Kind::kGrammar:
      return "ebnf";
    case Kind::kChoice:
      return "choice";
    default:
      return "response_format";
  }
}

GenerateConfig GenerateConfig::from_json(const Json& json) {
  if (!json.is_object()) wrong_type("", "an object", json);
  constexpr int64_t kI32 = std::numeric_limits<int32_t>::max();
  GenerateConfig c;
  for (const auto& [key, v] : json.items()) {
    if (v.is_null()) continue;  // null means "the default"
    const std::string_view k = key;
    if (k == "max_new_tokens") {
      c.max_new_tokens = static_cast<int32_t>(get_int(v, k, 1, kI32));
    } else if (k == "min_new_tokens") {
      c.min_new_tokens = static_cast<int32_t>(get_int(v, k, 0, kI32));
    } else if (k == "temperature") {
      c.temperature = get_float(v, k);
    } else if (k == "top_k") {
      c.top_k = static_cast<int32_t>(get_int(v, k, 0, kI32));
    } else if (k == "top_p") {
      c.top_p = get_float(v, k);
    } else if (k == "min_p") {
      c.min_p = get_float(v, k);
    } else if (k == "repetition_penalty") {
      c.repetition_penalty = get_float(v, k);
    } else if (k == "presence_penalty") {
      c.presence_penalty = get_float(v, k);
    } else if (k == "frequency_penalty") {
      c.frequency_penalty = get_float(v, k);
    } else if (k == "no_repeat_ngram_size") {
      c.no_repeat_ngram_size = static_cast<int32_t>(get_int(v, k, 0, kI32));
    } else if (k == "random_seed") {
      if (v.is_number_unsigned()) {
        c.random_seed = v.get<uint64_t>();
      } else {
        c.random_seed =
            static_cast<uint64_t>(get_int(v, k, 0, std::numeric_limits<int64_t>::max()));
      }
    } else if (k == "stop_words_str") {
      c.stop_words_str = get_string_list(v, k);
    } else if (k == "stop_words_list") {
      c.stop_words_list = get_token_lists(v, k);
    } else if (k == "num_return_sequences") {
      c.num_return_sequences = static_cast<int32_t>(get_int(v, k, -kI32, kI32));
    } else if (k == "num_beams") {
      c.num_beams = static_cast<int32_t>(get_int(v, k, -kI32, kI32));
    } else if (k == "length_penalty") {
      c.length_penalty = get_float(v, k);
    } else if (k == "ignore_eos") {
      c.ignore_eos = get_bool(v, k);
    } else if (k == "force_disable_sp_run") {
      c.force_disable_sp_run = get_bool(v, k);
    } else if (k == "timeout_ms") {
      c.timeout_ms = get_int(v, k, 0, std::numeric_limits<int64_t>::max() / 1000000);
    } else if (k == "return_logprobs") {
      c.return_logprobs = get_bool(v, k);
    } else if (k == "top_logprobs") {
      c.top_logprobs = static_cast<int32_t>(get_int(v, k, -kI32, kI32));
    } else if (k == "logit_bias") {
      c.logit_bias = get_logit_bias(v, k);
    } else if (k == "bad_words_list") {
      c.bad_words_list = get_token_lists(v, k);
    } else if (k == "regex" || k == "ebnf" || k == "choice" || k == "response_format" ||
               k == "json_schema") {
      if (auto spec = parse_constraint(k, v)) {
        if (c.constraint)
          raise<InvalidArgument>(
              "generate_config.{}: only one of regex, ebnf, choice, json_schema and "
              "response_format may be given",
              key);
        c.constraint = std::move(spec);
      }
    } else {
      raise<InvalidArgument>("generate_config: unknown field '{}'", key);
    }
  }
  c.validate();
  return c;
}

void GenerateConfig::validate() const {
  auto bad = [](std::string_view field, auto value, std::string_view rule) {
    raise<InvalidArgument>("generate_config.{}: {} {}", field, value, rule);
  };
  if (max_new_tokens && *max_new_tokens < 1) bad("max_new_tokens", *max_new_tokens, "must be >= 1");
  if (min_new_tokens < 0) bad("min_new_tokens", min_new_tokens, "must be >= 0");
  if (max_new_tokens && min_new_tokens > *max_new_tokens)
    bad("min_new_tokens", min_new_tokens, "must not exceed max_new_tokens");
  if (!std::isfinite(temperature) || temperature < 0.0f)
    bad("temperature", temperature, "must be >= 0");
  if (top_k < 0) bad("top_k", top_k, "must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) bad("top_p", top_p, "must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) bad("min_p", min_p, "must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    bad("repetition_penalty", repetition_penalty, "must be > 0");
  if (!std::isfinite(presence_penalty)) bad("presence_penalty", presence_penalty, "must be finite");
  if (!std::isfinite(frequency_penalty))
    bad("frequency_penalty", frequency_penalty, "must be finite");
  if (no_repeat_ngram_size < 0) bad("no_repeat_ngram_size", no_repeat_ngram_size, "must be >= 0");
  if (num_return_sequences < 1 || num_return_sequences > kMaxNumReturnSequences)
    raise<InvalidArgument>("generate_config.num_return_sequences: {} must be in [1, {}]",
                           num_return_sequences, kMaxNumReturnSequences);
  if (num_beams < 1 || num_beams > kMaxNumBeams)
    raise<InvalidArgument>("generate_config.num_beams: {} must be in [1, {}]", num_beams,
                           kMaxNumBeams);
  if (num_beams > 1 && num_return_sequences > num_beams)
    raise<InvalidArgument>(
        "generate_config.num_return_sequences: {} must not exceed num_beams ({})",
        num_return_sequences, num_beams);
  if (!std::isfinite(length_penalty)) bad("length_penalty", length_penalty, "must be finite");
  if (timeout_ms < 0) bad("timeout_ms", timeout_ms, "must be >= 0");
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs)
    raise<InvalidArgument>("generate_config.top_logprobs: {} must be in [0, {}]", top_logprobs,
                           kMaxTopLogprobs);
  if (top_logprobs > 0 && !return_logprobs)
    raise<InvalidArgument>("generate_config.top_logprobs: needs return_logprobs true");
  if (stop_words_str.size() > kMaxStopWords)
    raise<InvalidArgument>("generate_config.stop_words_str: more than {} entries", kMaxStopWords);
  for (const auto& s : stop_words_str) {
    if (s.empty()) raise<InvalidArgument>("generate_config.stop_words_str: empty stop string");
    if (s.size() > kMaxStopStringBytes)
      raise<InvalidArgument>("generate_config.stop_words_str: a stop string is over {} bytes",
                             kMaxStopStringBytes);
  }
  if (stop_words_list.size() > kMaxStopWords)
    raise<InvalidArgument>("generate_config.stop_words_list: more than {} entries", kMaxStopWords);
  for (const auto& l : stop_words_list)
    if (l.empty()) raise<InvalidArgument>("generate_config.stop_words_list: empty sequence");
  for (const auto& l : bad_words_list)
    if (l.empty()) raise<InvalidArgument>("generate_config.bad_words_list: empty sequence");
  for (const auto& [token, b] : logit_bias)
    if (!std::isfinite(b))
      raise<InvalidArgument>("generate_config.logit_bias: bias of token {} is not finite", token);
}

void GenerateConfig::validate_for_model(int32_t vocab_size, int32_t max_seq_len,
                                        int32_t prompt_len) const {
  auto check_ids = [&](std::string_view field, const std::vector<int32_t>& ids) {
    for (int32_t t : ids)
      if (t < 0 || t >= vocab_size)
        raise<InvalidArgument>("generate_config.{}: token {} is outside the vocabulary (size {})",
                               field, t, vocab_size);
  };
  for (const auto& l : stop_words_list) check_ids("stop_words_list", l);
  for (const auto& l : bad_words_list) check_ids("bad_words_list", l);
  for (const auto& [token, b] : logit_bias)
    if (token >= vocab_size)
      raise<InvalidArgument>(
          "generate_config.logit_bias: token {} is outside the vocabulary (size {})", token,
          vocab_size);
  if (constraint && !grammar)
    raise<InvalidArgument>(
        "generate_config.{}: a constraint needs the tokenizer's vocabulary: submit through the "
        "frontend (TextEngine), which compiles it",
        constraint_field(*constraint));
  if (grammar && grammar->vocab_size() != vocab_size)
    raise<InvalidArgument>(
        "generate_config: the grammar was compiled for a vocabulary of {} tokens, the model has {}",
        grammar->vocab_size(), vocab_size);
  if (top_k > vocab_size)
    raise<InvalidArgument>("generate_config.top_k: {} exceeds the vocabulary size {}", top_k,
                           vocab_size);
  if (prompt_len >= max_seq_len)
    raise<InvalidArgument>(
        "prompt: {} tokens leave no room to generate within the model's maximum sequence "
        "length {}",
        prompt_len, max_seq_len);
  if (max_new_tokens && static_cast<int64_t>(prompt_len) + *max_new_tokens > max_seq_len)
    raise<InvalidArgument>(
        "generate_config.max_new_tokens: {} plus the prompt's {} tokens exceeds the model's "
        "maximum sequence length {}",
        *max_new_tokens, prompt_len, max_seq_len);
  if (min_new_tokens > max_seq_len - prompt_len)
    raise<InvalidArgument>(
        "generate_config.min_new_tokens: {} plus the prompt's {} tokens exceeds the model's "
        "maximum sequence length {}",
        min_new_tokens, prompt_len, max_seq_len);
}

Json GenerateConfig::to_json() const {
  Json j = Json::object();
  if (max_new_tokens) j["max_new_tokens"] = *max_new_tokens;
  j["min_new_tokens"] = min_new_tokens;
  j["temperature"] = temperature;
  j["top_k"] = top_k;
  j["top_p"] = top_p;
  j["min_p"] = min_p;
  j["repetition_penalty"] = repetition_penalty;
  j["presence_penalty"] = presence_penalty;
  j["frequency_penalty"] = frequency_penalty;
  j["no_repeat_ngram_size"] = no_repeat_ngram_size;
  if (random_seed) j["random_seed"] = *random_seed;
  j["stop_words_str"] = stop_words_str;
  j["stop_words_list"] = token_lists_json(stop_words_list);
  j["num_return_sequences"] = num_return_sequences;
  j["num_beams"] = num_beams;
  j["length_penalty"] = length_penalty;
  j["ignore_eos"] = ignore_eos;
  j["timeout_ms"] = timeout_ms;
  j["force_disable_sp_run"] = force_disable_sp_run;
  j["return_logprobs"] = return_logprobs;
  j["top_logprobs"] = top_logprobs;
  Json bias = Json::object();
  for (const auto& [t, b] : logit_bias) bias[std::to_string(t)] = b;
  j["logit_bias"] = bias;
  j["bad_words_list"] = token_lists_json(bad_words_list);
  if (constraint) {
    using Kind = grammar::GrammarSpec::Kind;
    switch (constraint->kind) {
      case Kind::kRegex:
        j["regex"] = constraint->text;
        break;
      case Kind::kGrammar:
        j["ebnf"] = constraint->text;
        break;
      case Kind::kChoice:
        j["choice"] = constraint->choices;
        break;
      case Kind::kJsonObject:
        j["response_format"] = {{"type", "json_object"}};
        break;
      case Kind::kJsonSchema:
        if (Json schema = Json::parse(constraint->text, nullptr, false);
            constraint->strict && !schema.is_discarded())
          j["response_format"] = {{"type", "json_schema"},
                                  {"json_schema", {{"schema", schema}, {"strict", true}}}};
        else
          j["json_schema"] = constraint->text;
        break;
      case Kind::kJson:
        break;  // any JSON value: no field asks for it
    }
  }
  return j;
}

}  // namespace tachyon
