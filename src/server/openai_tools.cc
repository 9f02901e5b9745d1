#include "server/openai_tools.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/openai_protocol.h"

namespace tachyon::server {
namespace {

constexpr size_t kMaxTools = 128;

bool valid_name(const std::string& n) {
  return !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

// A function's parameters as a schema of the arguments object: an object unless the
// schema says otherwise.
OrderedJson arguments_schema(const OrderedJson* params) {
  OrderedJson s = params ? *params : OrderedJson::object();
  if (s.is_object() && !s.contains("type")) s["type"] = "object";
  return s;
}

// The schema moved under #/$defs/<name> of another document: its references into itself
// rebased there.
void rebase_refs(OrderedJson& s, const std::string& base) {
  if (s.is_object()) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() == "$ref" && it->is_string() && it->get<std::string>().rfind('#', 0) == 0)
        *it = base + it->get<std::string>().substr(1);
      else
        rebase_refs(*it, base);
    }
  } else if (s.is_array()) {
    for (OrderedJson& x : s) rebase_refs(x, base);
  }
}

}  // namespace

ToolRequest read_tools(FieldReader& r, const OrderedJson* ordered,
                       std::optional<grammar::GrammarSpec>& constraint) {
  ToolRequest t;
  std::vector<const OrderedJson*> params;  // per tool; nullptr: none
  std::vector<bool> strict;
  if (const Json* tools = r.raw("tools")) {
    if (!tools->is_array()) throw ApiError::bad_request("tools must be an array", "tools");
    if (tools->size() > kMaxTools)
      throw ApiError::bad_request("tools has more than " + std::to_string(kMaxTools) + " entries",
                                  "tools");
    const OrderedJson* otools = ordered_member(ordered, "tools");
    if (!otools || !otools->is_array() || otools->size() != tools->size())
      otools = nullptr;  // (no ordered twin: the sorted form)
    t.tools = otools ? *otools : OrderedJson::parse(tools->dump());
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string where = "tools[" + std::to_string(i) + "]";
      FieldReader tr((*tools)[i], where);
      if (tr.opt_string("type", 64).value_or("") != "function")
        throw ApiError::bad_request(where + ".type must be \"function\"", where + ".type");
      const Json* fn = tr.raw("function");
      if (!fn || !fn->is_object())
        throw ApiError::bad_request(where + ".function must be an object", where + ".function");
      tr.finish();
      FieldReader fr(*fn, where + ".function");
      const std::string name = fr.opt_string("name", 256).value_or("");
      if (!valid_name(name))
        throw ApiError::bad_request(
            where + ".function.name must be 1 to 64 letters, digits, '_', '-' or '.'",
            where + ".function.name");
      if (std::find(t.names.begin(), t.names.end(), name) != t.names.end())
        throw ApiError::bad_request("two tools are named '" + name + "'", where + ".function.name");
      fr.opt_string("description", 1u << 20);
      const Json* p = fr.raw("parameters");
      if (p && !p->is_object())
        throw ApiError::bad_request(where + ".function.parameters must be a JSON Schema object",
                                    where + ".function.parameters");
      strict.push_back(fr.opt_bool("strict").value_or(false));
      fr.finish();
      t.names.push_back(name);
      const OrderedJson& ot = t.tools[i];
      params.push_back(p ? &ot["function"]["parameters"] : nullptr);
    }
    if (tools->empty()) t.tools = OrderedJson();
  }
  t.choice = t.names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (const Json* c = r.raw("tool_choice")) {
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s == "none")
        t.choice = ToolChoice::kNone;
      else if (s == "auto")
        t.choice = t.names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
      else if (s == "required")
        t.choice = ToolChoice::kRequired;
      else
        throw ApiError::bad_request(
            "tool_choice must be none, auto, required or {\"type\": \"function\", ...}",
            "tool_choice");
    } else if (c->is_object()) {
      FieldReader cr(*c, "tool_choice");
      if (cr.opt_string("type", 64).value_or("") != "function")
        throw ApiError::bad_request("tool_choice.type must be \"function\"", "tool_choice.type");
      const Json* fn = cr.raw("function");
      if (!fn || !fn->is_object())
        throw ApiError::bad_request("tool_choice.function must be an object",
                                    "tool_choice.function");
      FieldReader fr(*fn, "tool_choice.function");
      t.function = fr.opt_string("name", 256).value_or("");
      fr.finish();
      cr.finish();
      t.choice = ToolChoice::kFunction;
    } else {
      throw ApiError::bad_request("tool_choice must be a string or an object", "tool_choice");
    }
  }
  if (auto p = r.opt_bool("parallel_tool_calls")) t.parallel = *p;
  r.refuse_unless("functions", {Json::array()},
                  "the legacy functions field is not supported; use tools");
  r.refuse_unless("function_call", {"none", "auto"},
                  "the legacy function_call field is not supported; use tool_choice");

  if ((t.choice == ToolChoice::kRequired || t.choice == ToolChoice::kFunction) && t.names.empty())
    throw ApiError::bad_request("tool_choice requires tools", "tool_choice");
  if (t.choice == ToolChoice::kFunction) {
    const auto it = std::find(t.names.begin(), t.names.end(), t.function);
    if (it == t.names.end())
      throw ApiError::bad_request(
          "tool_choice names the function '" + t.function + "', which is not among the tools",
          "tool_choice.function.name");
    const size_t i = static_cast<size_t>(it - t.names.begin());
    const OrderedJson schema = arguments_schema(params[i]);
    set_constraint(constraint,
                   json_schema_spec(Json::parse(schema.dump()), &schema, strict[i],
                                    "tools[" + std::to_string(i) + "].function.parameters"),
                   "tool_choice");
  } else if (t.choice == ToolChoice::kRequired) {
    OrderedJson defs = OrderedJson::object(), branches = OrderedJson::array();
    for (size_t i = 0; i < t.names.size(); ++i) {
      const std::string def = "tool_" + std::to_string(i);
      OrderedJson s = arguments_schema(params[i]);
      rebase_refs(s, "#/$defs/" + def);
      defs[def] = std::move(s);
      branches.push_back(
          {{"type", "object"},
           {"properties",
            {{"name", {{"const", t.names[i]}}}, {"arguments", {{"$ref", "#/$defs/" + def}}}}},
           {"required", {"name", "arguments"}},
           {"additionalProperties", false}});
    }
    OrderedJson schema = {{"type", "array"}, {"minItems", 1}};
    if (!t.parallel) schema["maxItems"] = 1;
    schema["items"] = {{"anyOf", std::move(branches)}};
    schema["$defs"] = std::move(defs);
    const bool all_strict = std::all_of(strict.begin(), strict.end(), [](bool b) { return b; });
    set_constraint(constraint,
                   json_schema_spec(Json::parse(schema.dump()), &schema, all_strict, "tools"),
                   "tool_choice");
  }
  return t;
}

void tool_call_arguments_as_objects(Json& messages) {
  for (Json& m : messages) {
    auto tc = m.find("tool_calls");
    if (tc == m.end() || !tc->is_array()) continue;
    for (Json& call : *tc) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      Json& fn = call["function"];
      auto args = fn.find("arguments");
      if (args == fn.end() || !args->is_string()) continue;
      Json parsed = Json::parse(args->get<std::string>(), nullptr, false);
      if (parsed.is_object()) *args = std::move(parsed);
    }
  }
}

}  // namespace tachyon::server
