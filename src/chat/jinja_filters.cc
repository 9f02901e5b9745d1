// The filters of jinja2 that chat templates use, with jinja2's argument names,
// defaults and results (including its one-shot iterators). tojson is the
// variant transformers installs: json.dumps with ensure_ascii=False by default.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace tachyon::jinja {

namespace {

using P = Param;
Value str_v(std::string s) {
  return Value::string(std::move(s));
}
Value none_v() {
  return Value::none();
}
Value int_v(int64_t i) {
  return Value::integer(i);
}
Value bool_v(bool b) {
  return Value::boolean(b);
}

// "a.b.0" -> ["a", "b", 0] applied with getitem, as jinja2's attribute getters do.
std::vector<Value> attribute_parts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_none() || attribute.is_undefined()) return parts;
  if (!attribute.is_string()) return {attribute};
  for (auto& p : py_split(attribute.str(), std::string("."), -1, false)) {
    bool digits =
        !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
    parts.push_back(digits && p.size() < 18 ? int_v(std::stoll(p)) : str_v(p));
  }
  return parts;
}

Value lower_if_str(const Value& v) {
  return v.is_string() ? str_v(py_lower(v.str())) : v;
}

Value get_attribute(Interpreter& in, Value item, const std::vector<Value>& parts,
                    const Value* dflt) {
  for (const auto& p : parts) {
    item = in.getitem(item, p);
    if (dflt && item.is_undefined()) item = *dflt;
  }
  return item;
}

int64_t len_of(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return 0;
    case Value::Type::kString:
      return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Type::kList:
      return static_cast<int64_t>(v.items().size());
    case Value::Type::kDict:
      return static_cast<int64_t>(v.dict().size());
    case Value::Type::kObject:
      if (auto* ns = dynamic_cast<Namespace*>(&v.obj())) (void)ns;
      [[fallthrough]];
    default:
      fail(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

Value f_length(Interpreter&, const Value& v, CallArgs& a) {
  bind("length", a, {});
  return int_v(len_of(v));
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind("default", a, {{"default_value", str_v("")}, {"boolean", bool_v(false)}});
  if (v.is_undefined() || (truthy(p[1]) && !truthy(v))) return p[0];
  return v;
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("join", a, {{"d", str_v("")}, {"attribute", none_v()}});
  auto parts = attribute_parts(p[1]);
  MarkedString out;
  bool first = true;
  for (const auto& item : in.iterate(v)) {
    if (!first) out.append(p[0]);
    first = false;
    out.append(parts.empty() ? item : get_attribute(in, item, parts, nullptr));
    in.check_string(out.size());
  }
  in.charge(out.bytes());
  return out.take();
}

Value f_first(Interpreter& in, const Value& v, CallArgs& a) {
  bind("first", a, {});
  if (v.is_object())
    if (auto* it = dynamic_cast<IteratorObject*>(&v.obj())) {
      if (auto x = it->take_one()) return *x;
      return Value::undefined("No first item, sequence was empty.");
    }
  if (v.is_list())
    return v.items().empty() ? Value::undefined("No first item, sequence was empty.")
                             : v.items()[0];
  ValueList items = in.iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items[0];
}

Value f_last(Interpreter& in, const Value& v, CallArgs& a) {
  bind("last", a, {});
  if (v.is_object() && dynamic_cast<IteratorObject*>(&v.obj()))
    fail("'generator' object is not reversible");
  if (v.is_list())
    return v.items().empty() ? Value::undefined("No last item, sequence was empty.")
                             : v.items().back();
  ValueList items = in.iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_list(Interpreter& in, const Value& v, CallArgs& a) {
  bind("list", a, {});
  if (v.is_list() && !v.is_tuple()) return v;
  return Value::list(in.iterate(v));
}

Value f_items(Interpreter&, const Value& v, CallArgs& a) {
  bind("items", a, {});
  if (v.is_undefined()) return make_iterator({});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, val] : v.dict().entries()) out.push_back(Value::list({k, val}, true));
  return make_iterator(std::move(out), "dict_itemiterator");
}

Value f_reverse(Interpreter& in, const Value& v, CallArgs& a) {
  bind("reverse", a, {});
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.str());
    std::reverse(u.begin(), u.end());
    return str_v(utf8_encode(u));
  }
  bool iter = v.is_object() && dynamic_cast<IteratorObject*>(&v.obj());
  ValueList items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  if (iter) return Value::list(std::move(items));
  return make_iterator(std::move(items),
                       v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
}

// Python's sorted(): stable, comparing keys with Python's ordering.
void sort_by_keys(ValueList& items, std::vector<Value> keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? compare(keys[y], keys[x]) < 0 : compare(keys[x], keys[y]) < 0;
  });
  ValueList sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind(
      "sort", a,
      {{"reverse", bool_v(false)}, {"case_sensitive", bool_v(false)}, {"attribute", none_v()}});
  ValueList items = in.iterate(v);
  std::vector<std::vector<Value>> attrs;
  if (p[2].is_string()) {
    for (auto& part : py_split(p[2].str(), std::string(","), -1, false))
      attrs.push_back(attribute_parts(str_v(part)));
  } else {
    attrs.push_back(attribute_parts(p[2]));
  }
  std::vector<Value> keys;
  for (const auto& item : items) {
    ValueList k;
    for (const auto& parts : attrs) {
      Value x = get_attribute(in, item, parts, nullptr);
      k.push_back(truthy(p[1]) ? x : lower_if_str(x));
    }
    keys.push_back(Value::list(std::move(k)));
  }
  in.step(static_cast<int64_t>(items.size() * 16));
  sort_by_keys(items, std::move(keys), truthy(p[0]));
  return Value::list(std::move(items));
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& a) {
  auto p =
      bind("dictsort", a,
           {{"case_sensitive", bool_v(false)}, {"by", str_v("key")}, {"reverse", bool_v(false)}});
  std::string by = to_str(p[1]);
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict()) fail(fmt::format("'{}' object has no attribute 'items'", type_name(v)));
  ValueList items;
  std::vector<Value> keys;
  for (const auto& [k, val] : v.dict().entries()) {
    items.push_back(Value::list({k, val}, true));
    const Value& key = by == "key" ? k : val;
    keys.push_back(truthy(p[0]) ? key : lower_if_str(key));
  }
  in.step(static_cast<int64_t>(items.size() * 16));
  sort_by_keys(items, std::move(keys), truthy(p[2]));
  return Value::list(std::move(items));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("unique", a, {{"case_sensitive", bool_v(false)}, {"attribute", none_v()}});
  auto parts = attribute_parts(p[1]);
  ValueList out, seen;
  for (const auto& item : in.iterate(v)) {
    Value key = get_attribute(in, item, parts, nullptr);
    if (!truthy(p[0])) key = lower_if_str(key);
    if (!is_hashable(key)) fail(fmt::format("unhashable type: '{}'", type_name(key)));
    in.step(static_cast<int64_t>(seen.size()));
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return make_iterator(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  auto p = bind(want_max ? "max" : "min", a,
                {{"case_sensitive", bool_v(false)}, {"attribute", none_v()}});
  auto parts = attribute_parts(p[1]);
  ValueList items = in.iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key = get_attribute(in, items[i], parts, nullptr);
    if (!truthy(p[0])) key = lower_if_str(key);
    if (i == 0 || (want_max ? compare(key, best_key) > 0 : compare(key, best_key) < 0)) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}
Value f_min(Interpreter& in, const Value& v, CallArgs& a) {
  return min_max(in, v, a, false);
}
Value f_max(Interpreter& in, const Value& v, CallArgs& a) {
  return min_max(in, v, a, true);
}

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("sum", a, {{"attribute", none_v()}, {"start", int_v(0)}});
  auto parts = attribute_parts(p[0]);
  if (p[1].is_string()) fail("sum() can't sum strings [use ''.join(seq) instead]");
  Value total = p[1];
  for (const auto& item : in.iterate(v))
    total = binary_op(in, "+", total, get_attribute(in, item, parts, nullptr));
  return total;
}

// Python's float() of a string: whitespace, underscores between digits, inf/nan.
// Python's int(s, base) for base 10 (and other bases with their prefixes).
Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("attr", a, {{"name", std::nullopt}});
  std::string name = str_arg(p[0], "attr");
  // Python getattr only: a dict's keys are not attributes here.
  if (v.is_dict() && !has_method(v, name))
    return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(v), name));
  return in.getattr(v, name);
}

Value f_batch(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind("batch", a, {{"linecount", std::nullopt}, {"fill_with", none_v()}});
  int64_t n = to_int_arg(p[0], "batch");
  if (n <= 0) fail("batch size must be positive");
  ValueList out, cur;
  for (auto& item : in.iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
    cur.push_back(item);
  }
  if (!cur.empty()) {
    if (!p[1].is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(p[1]);
    out.push_back(Value::list(std::move(cur)));
  }
  return make_iterator(std::move(out));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  ValueList out;
  const Value* attr = a.kwarg("attribute");
  if (a.args.empty() && attr) {
    const Value* dflt = a.kwarg("default");
    for (auto& [k, x] : a.kwargs)
      if (k != "attribute" && k != "default")
        fail(fmt::format("Unexpected keyword argument '{}'", k));
    auto parts = attribute_parts(*attr);
    Value d = dflt ? *dflt : none_v();
    for (auto& item : in.iterate(v))
      out.push_back(get_attribute(in, item, parts, d.is_none() ? nullptr : &d));
    return make_iterator(std::move(out));
  }
  if (a.args.empty()) fail("map requires a filter argument");
  std::string name = str_arg(a.args[0], "map");
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (auto& item : in.iterate(v)) {
    CallArgs copy = rest;
    out.push_back(in.filter(name, item, copy));
  }
  return make_iterator(std::move(out));
}

Value select_reject(Interpreter& in, const Value& v, CallArgs& a, bool select, bool by_attr) {
  ValueList out;
  if (!truthy(v)) return make_iterator({});
  std::vector<Value> parts;
  size_t off = 0;
  if (by_attr) {
    if (a.args.empty()) fail("Missing parameter for attribute name");
    parts = attribute_parts(a.args[0]);
    off = 1;
  }
  std::optional<std::string> test;
  CallArgs rest;
  if (a.args.size() > off) {
    test = str_arg(a.args[off], "select");
    rest.args.assign(a.args.begin() + static_cast<std::ptrdiff_t>(off + 1), a.args.end());
    rest.kwargs = a.kwargs;
  }
  for (auto& item : in.iterate(v)) {
    Value x = by_attr ? get_attribute(in, item, parts, nullptr) : item;
    bool r;
    if (test) {
      CallArgs copy = rest;
      r = in.test(*test, x, copy);
    } else {
      r = truthy(x);
    }
    if (r == select) out.push_back(item);
  }
  return make_iterator(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) {
  return select_reject(in, v, a, true, false);
}
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) {
  return select_reject(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_reject(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_reject(in, v, a, false, true);
}

struct Entry {
  const char* name;
  FilterFn fn;
};

const Entry kFilters[] = {
    {"attr", f_attr},
    {"batch", f_batch},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"first", f_first},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"reverse", f_reverse},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"sum", f_sum},
    {"unique", f_unique},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& e : kFilters)
    if (name == e.name) return e.fn;
  return find_text_filter(name);
}

}  // namespace tachyon::jinja
