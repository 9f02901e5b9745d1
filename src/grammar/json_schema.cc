#include "grammar/json_schema.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/compile.h"
#include "grammar/parsers.h"
#include "grammar/schema_document.h"
#include "grammar/schema_values.h"

namespace tachyon::grammar {
namespace {

using namespace schema;

class SchemaLowering {
 public:
  SchemaLowering(const OJson& doc, bool strict, const GrammarLimits& limits,
                 const JsonSchemaLimits& schema_limits)
      : doc_(doc, schema_limits), strict_(strict), limits_(limits) {}

  std::vector<RuleDefinition> run() {
    for (RuleDefinition& r : parse_gbnf(json_gbnf(false), limits_))
      if (r.name != "root") rules_.push_back(std::move(r));
    rules_.push_back({"integer", integer_range(std::nullopt, std::nullopt)});
    GrammarNode root = lower(doc_.root(), "", 0);
    rules_.push_back({"root", std::move(root)});
    return std::move(rules_);
  }

 private:
  std::string new_rule_name(std::string_view what) {
    return fmt::format("{}-{}", what, rule_counter_++);
  }

  GrammarNode lower(const OJson& s, const std::string& ptr, int depth) {
    doc_.count(ptr, depth);
    if (s.is_boolean()) {
      if (s.get<bool>()) return rule_ref("value");
      fail_at(ptr, "the schema false matches nothing");
    }
    if (!s.is_object()) fail_at(ptr, "a schema must be an object or a boolean");
    bool constraining = false;
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (is_annotation(it.key())) continue;
      if (!is_supported(it.key()))
        fail_at(ptr, fmt::format("the keyword '{}' cannot be enforced", it.key()));
      constraining = true;
    }
    if (!constraining) return rule_ref("value");
    if (s.contains("$ref")) return reference(s, ptr, depth);
    if (s.contains("allOf")) {
      OJson merged = without(s, "allOf");
      const OJson& all = s["allOf"];
      if (!all.is_array() || all.empty()) fail_at(ptr, "allOf must be a non-empty array");
      for (size_t i = 0; i < all.size(); ++i)
        merged = doc_.merge(std::move(merged), all[i], fmt::format("{}/allOf/{}", ptr, i), depth);
      return lower(merged, ptr, depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const OJson& branches = s[key];
      if (!branches.is_array() || branches.empty())
        fail_at(ptr, fmt::format("{} must be a non-empty array", key));
      const OJson rest = without(s, key);
      const bool plain = only_annotations(rest);
      std::vector<GrammarNode> alts;
      for (size_t i = 0; i < branches.size(); ++i) {
        const std::string p = fmt::format("{}/{}/{}", ptr, key, i);
        alts.push_back(plain ? lower(branches[i], p, depth + 1)
                             : lower(doc_.merge(rest, branches[i], p, depth), p, depth + 1));
      }
      return alternation(std::move(alts));
    }
    GrammarNode node =
        s.contains("enum") || s.contains("const") ? enumeration(s, ptr) : typed(s, ptr, depth);
    if (const auto n = s.find("nullable"); n != s.end()) {
      if (!n->is_boolean()) fail_at(ptr, "nullable must be a boolean");
      if (n->get<bool>()) node = alternation({std::move(node), literal("null")});
    }
    return node;
  }

  GrammarNode reference(const OJson& s, const std::string& ptr, int depth) {
    const OJson& target = doc_.resolve(s["$ref"], ptr);
    const OJson rest = without(s, "$ref");
    if (!only_annotations(rest))
      return lower(doc_.merge(rest, OJson{{"$ref", s["$ref"]}}, ptr, depth), ptr, depth + 1);
    const std::string key = s["$ref"].get<std::string>();
    if (auto it = ref_rules_.find(key); it != ref_rules_.end()) return rule_ref(it->second);
    const std::string name = new_rule_name("ref");
    ref_rules_.emplace(key, name);
    GrammarNode body = lower(target, key.substr(1), depth + 1);
    rules_.push_back({name, std::move(body)});
    return rule_ref(name);
  }

  static GrammarNode value_literal(const OJson& v) {
    if (!v.is_object() && !v.is_array()) return literal(v.dump());
    const bool object = v.is_object();
    std::vector<GrammarNode> seq{literal(object ? "{" : "["), rule_ref("ws")};
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) seq.insert(seq.end(), {literal(","), rule_ref("ws")});
      first = false;
      if (object)
        seq.insert(seq.end(),
                   {literal(OJson(it.key()).dump()), rule_ref("ws"), literal(":"), rule_ref("ws")});
      seq.insert(seq.end(), {value_literal(it.value()), rule_ref("ws")});
    }
    seq.push_back(literal(object ? "}" : "]"));
    return sequence(std::move(seq));
  }

  GrammarNode enumeration(const OJson& s, const std::string& ptr) {
    std::vector<OJson> values;
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty())
        fail_at(ptr, "enum must be a non-empty array");
      for (const OJson& v : s["enum"]) values.push_back(v);
    }
    if (s.contains("const")) {
      if (s.contains("enum") && std::find(values.begin(), values.end(), s["const"]) == values.end())
        fail_at(ptr, "const is not one of enum");
      values.assign(1, s["const"]);
    }
    std::vector<std::string> types;
    if (s.contains("type")) types = type_list(s["type"], ptr);
    std::vector<GrammarNode> alts;
    for (const OJson& v : values) {
      if (!types.empty() && std::none_of(types.begin(), types.end(),
                                         [&](const std::string& t) { return has_type(v, t); }))
        continue;
      alts.push_back(value_literal(v));
    }
    if (alts.empty()) fail_at(ptr, "no value of enum / const has the schema's type");
    return alternation(std::move(alts));
  }

  GrammarNode typed(const OJson& s, const std::string& ptr, int depth) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      types = type_list(s["type"], ptr);
    } else {  // implied by the keywords present
      auto any = [&](std::initializer_list<const char*> keys) {
        return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
      };
      if (any({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (any({"items", "prefixItems", "additionalItems", "minItems", "maxItems"}))
        types.push_back("array");
      if (any({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
      if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
        types.push_back("number");
      if (types.empty()) return rule_ref("value");
    }
    std::vector<GrammarNode> alts;
    for (const std::string& t : types) {
      if (t == "null") {
        alts.push_back(literal("null"));
      } else if (t == "boolean") {
        alts.push_back(alternation({literal("true"), literal("false")}));
      } else if (t == "string") {
        alts.push_back(string(s, ptr));
      } else if (t == "integer" || t == "number") {
        if (t == "integer" && std::find(types.begin(), types.end(), "number") != types.end())
          continue;  // integers are numbers
        alts.push_back(numeric(s, ptr, t == "integer"));
      } else if (t == "object") {
        alts.push_back(object(s, ptr, depth));
      } else {
        alts.push_back(array(s, ptr, depth));
      }
    }
    return alternation(std::move(alts));
  }

  std::optional<int64_t> count_field(const OJson& s, const char* key, const std::string& ptr) {
    if (!s.contains(key)) return std::nullopt;
    const OJson& v = s[key];
    if (!has_type(v, "integer") || v.get<double>() < 0)
      fail_at(ptr, fmt::format("{} must be a non-negative integer", key));
    if (v.get<double>() > limits_.max_repeat)
      fail_at(ptr, fmt::format("{} above {} cannot be enforced", key, limits_.max_repeat));
    return v.get<int64_t>();
  }

  GrammarNode string(const OJson& s, const std::string& ptr) {
    const auto lo = count_field(s, "minLength", ptr), hi = count_field(s, "maxLength", ptr);
    if (lo && hi && *lo > *hi) fail_at(ptr, "minLength is above maxLength");
    const bool pattern = s.contains("pattern"), format = s.contains("format");
    if (pattern && format) fail_at(ptr, "pattern and format together cannot be enforced");
    if ((pattern || format) && (lo || hi))
      fail_at(ptr, fmt::format("{} with minLength / maxLength cannot be enforced",
                               pattern ? "pattern" : "format"));
    const char* key = pattern ? "pattern" : "format";
    if (pattern || format) {
      if (!s[key].is_string()) fail_at(ptr, fmt::format("{} must be a string", key));
      try {
        return pattern ? string_pattern(s[key].get<std::string>(), limits_)
                       : string_format(s[key].get<std::string>(), limits_);
      } catch (const InvalidArgument& e) {
        fail_at(ptr, fmt::format("{}: {}", key, e.what()));
      }
    }
    return sequence({literal("\""),
                     repeat(rule_ref("char"), int32_t(lo.value_or(0)), hi ? int32_t(*hi) : -1),
                     literal("\"")});
  }

  // A bound of `integer` (draft 4's boolean exclusive* flags included): the smallest
  // (lower) or largest (upper) integer it allows, read exactly from integer values.
  struct Bound {
    const OJson* value = nullptr;
    bool exclusive = false;
  };
  static Bound bound(const OJson& s, const char* inclusive, const char* exclusive, bool lower,
                     const std::string& ptr) {
    Bound b;
    for (const char* k : {inclusive, exclusive}) {
      if (!s.contains(k) || s[k].is_boolean()) continue;
      if (!s[k].is_number()) fail_at(ptr, fmt::format("{} must be a number", k));
      const bool ex = k == exclusive;
      if (!b.value || (lower ? s[k].get<double>() >= b.value->get<double>()
                             : s[k].get<double>() <= b.value->get<double>()))
        b = {&s[k], ex};
    }
    if (b.value && !b.exclusive && s.contains(exclusive) && s[exclusive].is_boolean())
      b.exclusive = s[exclusive].get<bool>();
    return b;
  }
  static int64_t integer_bound(const Bound& b, bool lower) {
    const OJson& v = *b.value;
    int64_t r = 0;
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > uint64_t(INT64_MAX)) raise<InvalidArgument>("a bound beyond int64");
      r = int64_t(v.get<uint64_t>());
    } else if (v.is_number_integer()) {
      r = v.get<int64_t>();
    } else {
      const double d = v.get<double>();
      if (!(std::fabs(d) <= 9e18)) raise<InvalidArgument>("a bound beyond +-9e18");
      r = int64_t(lower ? std::ceil(d) : std::floor(d));
      if (double(r) != d) return r;  // a fractional bound: the rounding excluded it
    }
    if (b.exclusive) {
      if (r == (lower ? INT64_MAX : INT64_MIN))
        raise<InvalidArgument>("no integer lies beyond the bound");
      r += lower ? 1 : -1;
    }
    return r;
  }

  GrammarNode numeric(const OJson& s, const std::string& ptr, bool integer) {
    const Bound lo = bound(s, "minimum", "exclusiveMinimum", true, ptr);
    const Bound hi = bound(s, "maximum", "exclusiveMaximum", false, ptr);
    try {
      if (!lo.value && !hi.value) return rule_ref(integer ? "integer" : "number");
      if (!integer) {
        std::optional<double> l, h;
        if (lo.value) l = lo.value->get<double>();
        if (hi.value) h = hi.value->get<double>();
        if (l && h && (*l > *h || (*l == *h && (lo.exclusive || hi.exclusive))))
          raise<InvalidArgument>("no number lies between the bounds");
        return number_range(l, lo.exclusive, h, hi.exclusive);
      }
      std::optional<int64_t> l, h;
      if (lo.value) l = integer_bound(lo, true);
      if (hi.value) h = integer_bound(hi, false);
      if (l && h && *l > *h) raise<InvalidArgument>("no integer lies between the bounds");
      return integer_range(l, h);
    } catch (const InvalidArgument& e) {
      fail_at(ptr, e.what());
    }
  }

  GrammarNode object(const OJson& s, const std::string& ptr, int depth) {
    static const OJson kEmpty = OJson::object();
    const OJson& props = s.contains("properties") ? s["properties"] : kEmpty;
    if (!props.is_object()) fail_at(ptr, "properties must be an object");
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail_at(ptr, "required must be an array of strings");
      for (const OJson& r : s["required"]) {
        if (!r.is_string()) fail_at(ptr, "required must be an array of strings");
        required.push_back(r.get<std::string>());
      }
    }
    const OJson additional =
        s.contains("additionalProperties") ? s["additionalProperties"] : OJson(!strict_);
    if (!additional.is_boolean() && !additional.is_object())
      fail_at(ptr, "additionalProperties must be a boolean or a schema");
    const bool extra = !(additional.is_boolean() && !additional.get<bool>());

    struct Item {
      std::string rule;
      bool required;
    };
    std::vector<Item> items;
    auto add_item = [&](const std::string& name, const OJson& sub, const std::string& p) {
      const bool req = std::find(required.begin(), required.end(), name) != required.end();
      Item item{new_rule_name("kv"), req};
      GrammarNode kv = sequence({literal(OJson(name).dump()), rule_ref("ws"), literal(":"),
                                 rule_ref("ws"), lower(sub, p, depth + 1)});
      rules_.push_back({item.rule, std::move(kv)});
      items.push_back(std::move(item));
    };
    for (auto it = props.begin(); it != props.end(); ++it)
      add_item(it.key(), it.value(), ptr + "/properties/" + pointer_token(it.key()));
    for (const std::string& r : required) {
      if (props.contains(r)) continue;
      if (!extra) fail_at(ptr, fmt::format("the required property '{}' is not allowed", r));
      add_item(r, additional, ptr + "/additionalProperties");
    }
    std::string extra_rule;
    if (extra) {
      extra_rule = new_rule_name("kv");
      std::vector<std::string> names;
      for (auto it = props.begin(); it != props.end(); ++it) {
        const std::string e = OJson(it.key()).dump();
        names.push_back(e.substr(1, e.size() - 2));
      }
      for (const std::string& r : required) {
        const std::string e = OJson(r).dump();
        names.push_back(e.substr(1, e.size() - 2));
      }
      GrammarNode kv = sequence({string_except(names), rule_ref("ws"), literal(":"), rule_ref("ws"),
                                 lower(additional, ptr + "/additionalProperties", depth + 1)});
      rules_.push_back({extra_rule, std::move(kv)});
    }
    const size_t n = items.size();
    // Optional properties in a row cost quadratically (each may be the next one written).
    size_t alternatives = 0;
    for (size_t k = n, required = n; k-- > 0;) {  // required: the first required from k on
      if (items[k].required) required = k;
      alternatives += required == n ? n - k : required - k + 1;
    }
    if (alternatives * 6 > limits_.max_elements)
      fail_at(ptr, fmt::format("{} properties, {} of them optional, are more than a grammar of {} "
                               "elements can order",
                               n,
                               std::count_if(items.begin(), items.end(),
                                             [](const Item& i) { return !i.required; }),
                               limits_.max_elements));
    // rest[k]: what follows once an item before k was written: items from k on (the
    // required ones among them), each after a comma, then the additional ones.
    std::vector<std::string> rest(n + 1);
    for (size_t k = 0; k <= n; ++k) rest[k] = new_rule_name("rest");
    auto tail_extras = [&]() {
      return extra ? repeat(sequence({literal(","), rule_ref("ws"), rule_ref(extra_rule),
                                      rule_ref("ws")}),
                            0, -1)
                   : sequence({});
    };
    auto choices = [&](size_t k, bool first) {
      std::vector<GrammarNode> alts;
      for (size_t j = k; j < n; ++j) {
        std::vector<GrammarNode> seq;
        if (!first) seq.push_back(literal(","));
        if (!first) seq.push_back(rule_ref("ws"));
        seq.push_back(rule_ref(items[j].rule));
        seq.push_back(rule_ref("ws"));
        seq.push_back(rule_ref(rest[j + 1]));
        alts.push_back(sequence(std::move(seq)));
        if (items[j].required) return alts;
      }
      if (!first) {
        alts.push_back(tail_extras());
      } else if (extra) {
        alts.push_back(
            repeat(sequence({rule_ref(extra_rule), rule_ref("ws"), tail_extras()}), 0, 1));
      } else {
        alts.push_back(sequence({}));
      }
      return alts;
    };
    for (size_t k = 0; k <= n; ++k) rules_.push_back({rest[k], alternation(choices(k, false))});
    return sequence({literal("{"), rule_ref("ws"), alternation(choices(0, true)), literal("}")});
  }

  GrammarNode array(const OJson& s, const std::string& ptr, int depth) {
    static const OJson kAny = true;
    std::vector<GrammarNode> prefix;
    const OJson* tail = s.contains("items") ? &s["items"] : &kAny;
    std::string tail_ptr = ptr + "/items";
    const char* tuple_key = s.contains("prefixItems")                        ? "prefixItems"
                            : (s.contains("items") && s["items"].is_array()) ? "items"
                                                                             : nullptr;
    if (tuple_key) {
      const OJson& t = s[tuple_key];
      if (!t.is_array()) fail_at(ptr, fmt::format("{} must be an array of schemas", tuple_key));
      for (size_t i = 0; i < t.size(); ++i)
        prefix.push_back(lower(t[i], fmt::format("{}/{}/{}", ptr, tuple_key, i), depth + 1));
      if (std::string_view(tuple_key) == "items") {
        tail = s.contains("additionalItems") ? &s["additionalItems"] : &kAny;
        tail_ptr = ptr + "/additionalItems";
      }
    } else if (s.contains("additionalItems")) {
      fail_at(ptr, "additionalItems without an items array cannot be enforced");
    }
    if (!tail->is_boolean() && !tail->is_object())
      fail_at(ptr, "items must be a schema or an array of schemas");
    const auto lo = count_field(s, "minItems", ptr);
    auto hi = count_field(s, "maxItems", ptr);
    const int64_t k = static_cast<int64_t>(prefix.size());
    const int64_t m = lo.value_or(0);
    const bool open = !(tail->is_boolean() && !tail->get<bool>());
    if (!open) hi = std::min<int64_t>(hi.value_or(k), k);
    if (hi && m > *hi) fail_at(ptr, "minItems is above the items allowed");
    std::optional<GrammarNode> item;
    if (open && (!hi || *hi > k)) item = lower(*tail, tail_ptr, depth + 1);
    auto next = [&](GrammarNode n) {
      return sequence({literal(","), rule_ref("ws"), std::move(n), rule_ref("ws")});
    };
    // after(i): the items from index i on, once i were written.
    std::function<GrammarNode(int64_t)> after = [&](int64_t i) -> GrammarNode {
      if (hi && i >= *hi) return sequence({});
      if (i == k) {
        if (!item) return sequence({});
        const int32_t rmin = int32_t(std::max<int64_t>(0, m - k));
        return repeat(next(*item), rmin, hi ? int32_t(*hi - k) : -1);
      }
      GrammarNode n =
          sequence({literal(","), rule_ref("ws"), prefix[size_t(i)], rule_ref("ws"), after(i + 1)});
      return i < m ? std::move(n) : repeat(std::move(n), 0, 1);
    };
    GrammarNode body = sequence({});
    if (k > 0 && (!hi || *hi > 0)) {
      body = sequence({prefix[0], rule_ref("ws"), after(1)});
    } else if (k == 0 && item && (!hi || *hi > 0)) {
      body = sequence(
          {*item, rule_ref("ws"),
           repeat(next(*item), int32_t(std::max<int64_t>(0, m - 1)), hi ? int32_t(*hi - 1) : -1)});
    }
    if (m == 0) body = repeat(std::move(body), 0, 1);
    return sequence({literal("["), rule_ref("ws"), std::move(body), literal("]")});
  }

  SchemaDocument doc_;
  bool strict_;
  const GrammarLimits& limits_;
  std::vector<RuleDefinition> rules_;
  std::map<std::string, std::string> ref_rules_;  // $ref -> its rule
  size_t rule_counter_ = 0;
};

}  // namespace

std::vector<RuleDefinition> json_schema_rules(std::string_view schema, bool strict,
                                              const GrammarLimits& limits,
                                              const JsonSchemaLimits& schema_limits) {
  if (schema.size() > limits.max_text_bytes)
    raise<InvalidArgument>("the schema is longer than {} bytes", limits.max_text_bytes);
  OJson doc;
  try {
    const int max_depth = limits.max_nesting;
    doc = OJson::parse(schema, [max_depth](int depth, OJson::parse_event_t, OJson&) {
      if (depth > max_depth)
        raise<InvalidArgument>("the schema is nested deeper than {}", max_depth);
      return true;
    });
  } catch (const OJson::exception& e) {
    raise<InvalidArgument>("the schema is not valid JSON: {}", e.what());
  }
  return SchemaLowering(doc, strict, limits, schema_limits).run();
}

}  // namespace tachyon::grammar
