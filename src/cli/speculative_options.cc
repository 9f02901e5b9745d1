#include "cli/speculative_options.h"

#include "core/error.h"
#include "core/json.h"
#include "engine/ngram_proposer.h"

namespace tachyon::cli {
namespace {

constexpr int32_t kMaxSpeculativeTokens = 16;

// A method's name as --speculative, SP_TYPE or the JSON's "method" give it.
std::string canonical_method(const std::string& name, const std::string& where) {
  if (name == "ngram" || name == "deterministic") return "ngram";
  if (name == "draft_model" || name == "vanilla") return "draft_model";
  raise<InvalidArgument>("{}: unknown speculative method '{}' (ngram or draft_model)", where, name);
}

// Sets `*method` from one source; two sources naming different methods is an error.
void set_method(std::string* method, std::string* method_source, const std::string& m,
                const std::string& where) {
  if (!method->empty() && *method != m)
    raise<InvalidArgument>("two speculative methods at once: {} ({}) and {} ({})", *method,
                           *method_source, m, where);
  *method = m;
  *method_source = where;
}

int32_t json_int(const Json& v, const std::string& key, const std::string& where) {
  if (!v.is_number_integer())
    raise<InvalidArgument>("{}: \"{}\" must be an integer, not {}", where, key, json_type_name(v));
  const int64_t x = v.get<int64_t>();
  if (x < INT32_MIN || x > INT32_MAX)
    raise<InvalidArgument>("{}: \"{}\" {} is out of range", where, key, x);
  return static_cast<int32_t>(x);
}

}  // namespace

SpeculativeOptions speculative_options(const SettingValues& v) {
  SpeculativeOptions o;
  std::string source;  // where the method came from
  if (v.given("speculative"))
    set_method(&o.method, &source, canonical_method(v.str("speculative"), v.source("speculative")),
               v.source("speculative"));
  if (v.given("draft-model")) {
    set_method(&o.method, &source, "draft_model", v.source("draft-model"));
    o.draft_model = v.str("draft-model");
  }
  o.num_speculative_tokens = static_cast<int32_t>(v.integer("num-speculative-tokens"));
  o.prompt_lookup_min = static_cast<int32_t>(v.integer("prompt-lookup-min"));
  o.prompt_lookup_max = static_cast<int32_t>(v.integer("prompt-lookup-max"));
  std::string k_source = v.source("num-speculative-tokens");
  if (v.given("speculative-config")) {
    const std::string where = v.source("speculative-config");
    const Json j = parse_json(v.str("speculative-config"), where, 8);
    if (!j.is_object())
      raise<InvalidArgument>("{}: must be a JSON object, not {}", where, json_type_name(j));
    if (!j.contains("method") || !j["method"].is_string())
      raise<InvalidArgument>("{}: needs \"method\": \"ngram\" or \"draft_model\"", where);
    const std::string method = canonical_method(j["method"].get<std::string>(), where);
    set_method(&o.method, &source, method, where);
    for (const auto& [key, value] : j.items()) {
      if (key == "method") continue;
      if (key == "num_speculative_tokens") {
        const int32_t k = json_int(value, key, where);
        if (v.given("num-speculative-tokens") && k != o.num_speculative_tokens)
          raise<InvalidArgument>("{}: num_speculative_tokens {} differs from {} ({})", where, k,
                                 o.num_speculative_tokens, k_source);
        o.num_speculative_tokens = k;
        k_source = where;
      } else if (key == "prompt_lookup_min" && method == "ngram") {
        o.prompt_lookup_min = json_int(value, key, where);
      } else if (key == "prompt_lookup_max" && method == "ngram") {
        o.prompt_lookup_max = json_int(value, key, where);
      } else if (key == "model" && method == "draft_model") {
        if (!value.is_string() || value.get<std::string>().empty())
          raise<InvalidArgument>("{}: \"model\" must be the draft model's folder", where);
        if (!o.draft_model.empty() && o.draft_model != value.get<std::string>())
          raise<InvalidArgument>("{}: model '{}' differs from --draft-model '{}'", where,
                                 value.get<std::string>(), o.draft_model);
        o.draft_model = value.get<std::string>();
      } else {
        raise<InvalidArgument>("{}: unknown key \"{}\" for method {}", where, key, method);
      }
    }
  }
  if (o.method.empty()) return o;
  if (o.num_speculative_tokens < 1 || o.num_speculative_tokens > kMaxSpeculativeTokens)
    raise<InvalidArgument>("{}: num_speculative_tokens {} must be in [1, {}]", k_source,
                           o.num_speculative_tokens, kMaxSpeculativeTokens);
  if (o.method == "ngram" && (o.prompt_lookup_min < 1 || o.prompt_lookup_max < o.prompt_lookup_min))
    raise<InvalidArgument>(
        "n-gram lookup needs 1 <= prompt_lookup_min <= prompt_lookup_max (got "
        "{} and {})",
        o.prompt_lookup_min, o.prompt_lookup_max);
  if (o.method == "draft_model" && o.draft_model.empty())
    raise<InvalidArgument>(
        "{}: the draft_model method needs the draft model's folder "
        "(--draft-model DIR, or \"model\" in --speculative-config)",
        source);
  return o;
}

std::shared_ptr<Proposer> make_proposer(const SpeculativeOptions& o) {
  if (o.method == "ngram")
    return std::make_shared<NgramProposer>(o.prompt_lookup_min, o.prompt_lookup_max);
  return nullptr;
}

}  // namespace tachyon::cli
