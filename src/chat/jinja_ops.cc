// Arithmetic, concatenation, repetition, membership and printf-style formatting
// with Python's semantics (integers are 64-bit here: overflow is an error).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace tachyon::jinja {

namespace {

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a),
                   type_name(b)));
}

[[noreturn]] void overflow() {
  fail("integer overflow (integers beyond 64 bits are not supported)");
}

bool is_intlike(const Value& v) {
  return v.is_int() || v.is_bool();
}

double py_fmod(double a, double b, double* div_out) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  if (div_out) {
    double floordiv;
    if (div != 0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, a / b);
    }
    *div_out = floordiv;
  }
  return mod;
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.is_tuple());
  if (seq.is_string()) {
    size_t len = seq.str().size();
    if (len != 0 && static_cast<uint64_t>(n) > in.limits().max_string_bytes / len)
      in.check_string(in.limits().max_string_bytes + 1);
    in.charge(len * static_cast<size_t>(n));
    std::string out;
    out.reserve(len * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value::string(std::move(out));
  }
  size_t len = seq.items().size();
  if (len != 0 && static_cast<uint64_t>(n) > in.limits().max_items / len)
    in.check_items(in.limits().max_items + 1);
  in.charge(len * static_cast<size_t>(n) * sizeof(Value));
  in.step(static_cast<int64_t>(len) * n);
  ValueList out;
  out.reserve(len * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.is_tuple());
}

// One %-conversion, as Python's str % formatting does it.
std::string format_one(char conv, const std::string& flags, int width, int precision,
                       const Value& v) {
  std::string body;
  bool numeric = false;
  auto need_number = [&]() {
    if (!v.is_number())
      fail(fmt::format("%{} format: a real number is required, not {}", conv, type_name(v)));
  };
  switch (conv) {
    case 's':
      body = to_str(v);
      if (precision >= 0) body = body.substr(0, utf8_offset(body, static_cast<size_t>(precision)));
      break;
    case 'r':
    case 'a':
      body = repr(v);
      if (precision >= 0) body = body.substr(0, utf8_offset(body, static_cast<size_t>(precision)));
      break;
    case 'd':
    case 'i':
    case 'u': {
      need_number();
      int64_t i = v.is_float() ? static_cast<int64_t>(std::trunc(v.as_float())) : v.as_int();
      body = std::to_string(i);
      numeric = true;
      break;
    }
    case 'x':
    case 'X':
    case 'o': {
      if (!is_intlike(v))
        fail(fmt::format("%{} format: an integer is required, not {}", conv, type_name(v)));
      int64_t i = v.as_int();
      uint64_t mag = i < 0 ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
      body = conv == 'o'   ? fmt::format("{:o}", mag)
             : conv == 'x' ? fmt::format("{:x}", mag)
                           : fmt::format("{:X}", mag);
      if (flags.find('#') != std::string::npos)
        body = (conv == 'o' ? "0o" : conv == 'x' ? "0x" : "0X") + body;
      if (i < 0) body = "-" + body;
      numeric = true;
      break;
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G': {
      need_number();
      char spec[16];
      std::snprintf(spec, sizeof spec, "%%.%d%c", precision < 0 ? 6 : precision, conv);
      int need = std::snprintf(nullptr, 0, spec, v.to_double());
      body.assign(static_cast<size_t>(std::max(need, 0)) + 1, '\0');
      std::snprintf(body.data(), body.size(), spec, v.to_double());
      body.pop_back();
      numeric = true;
      break;
    }
    case 'c':
      if (v.is_string() && utf8_length(v.str()) == 1) {
        body = v.str();
      } else if (is_intlike(v) && v.as_int() >= 0 && v.as_int() <= 0x10FFFF) {
        utf8_append(body, static_cast<char32_t>(v.as_int()));
      } else {
        fail("%c requires int or char");
      }
      break;
    default:
      fail(fmt::format("unsupported format character '{}'", conv));
  }
  if (numeric && body[0] != '-') {
    if (flags.find('+') != std::string::npos) {
      body = "+" + body;
    } else if (flags.find(' ') != std::string::npos) {
      body = " " + body;
    }
  }
  int len = static_cast<int>(utf8_length(body));
  if (width > len) {
    size_t pad = static_cast<size_t>(width - len);
    if (flags.find('-') != std::string::npos) {
      body.append(pad, ' ');
    } else if (numeric && flags.find('0') != std::string::npos) {
      size_t sign = (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
      body.insert(sign, pad, '0');
    } else {
      body.insert(0, pad, ' ');
    }
  }
  return body;
}

}  // namespace

std::string percent_format(Interpreter& in, const std::string& fmtstr, const Value& args) {
  ValueList positional;
  const Dict* mapping = nullptr;
  if (args.is_tuple()) {
    positional = args.items();
  } else if (args.is_dict()) {
    mapping = &args.dict();
    positional.push_back(args);
  } else {
    positional.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmtstr.size(); ++i) {
    char c = fmtstr[i];
    if (c != '%') {
      out.push_back(c);
      continue;
    }
    if (++i >= fmtstr.size()) fail("incomplete format");
    if (fmtstr[i] == '%') {
      out.push_back('%');
      continue;
    }
    const Value* named = nullptr;
    if (fmtstr[i] == '(') {
      size_t close = fmtstr.find(')', i);
      if (close == std::string::npos) fail("incomplete format key");
      if (!mapping) fail("format requires a mapping");
      std::string key = fmtstr.substr(i + 1, close - i - 1);
      named = mapping->find(std::string_view(key));
      if (!named) fail(fmt::format("'{}'", key));
      i = close + 1;
    }
    std::string flags;
    while (i < fmtstr.size() && std::string_view("-+ #0").find(fmtstr[i]) != std::string_view::npos)
      flags.push_back(fmtstr[i++]);
    auto number = [&](int& target) {
      if (i < fmtstr.size() && fmtstr[i] == '*') {
        if (next >= positional.size() || !is_intlike(positional[next])) fail("* wants int");
        target =
            static_cast<int>(std::clamp<int64_t>(positional[next++].as_int(), -100000, 100000));
        ++i;
        return;
      }
      while (i < fmtstr.size() && std::isdigit(static_cast<unsigned char>(fmtstr[i]))) {
        target = std::min(target * 10 + (fmtstr[i] - '0'), 100000);
        ++i;
      }
    };
    int width = 0, precision = -1;
    number(width);
    if (i < fmtstr.size() && fmtstr[i] == '.') {
      ++i;
      precision = 0;
      number(precision);
    }
    while (i < fmtstr.size() && (fmtstr[i] == 'l' || fmtstr[i] == 'h' || fmtstr[i] == 'L')) ++i;
    if (i >= fmtstr.size()) fail("incomplete format");
    const Value* v = named;
    if (!v) {
      if (next >= positional.size()) fail("not enough arguments for format string");
      v = &positional[next++];
    }
    out += format_one(fmtstr[i], flags, width, precision, *v);
    in.check_string(out.size());
  }
  in.charge(out.size());
  if (!mapping && next < positional.size())
    fail("not all arguments converted during string formatting");
  return out;
}

namespace {
Value plain_binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  bool nums = a.is_number() && b.is_number();
  bool ints = nums && is_intlike(a) && is_intlike(b);
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.to_double() + b.to_double());
    if (a.is_string() && b.is_string()) {
      in.charge(a.str().size() + b.str().size());
      return Value::string(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      in.check_items(a.items().size() + b.items().size());
      in.charge((a.items().size() + b.items().size()) * sizeof(Value));
      in.step(static_cast<int64_t>(a.items().size() + b.items().size()));
      ValueList out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.is_tuple());
    }
    if (a.is_string())
      fail(fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)));
    if (a.is_list() && !a.is_tuple())
      fail(fmt::format("can only concatenate list (not \"{}\") to list", type_name(b)));
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.to_double() - b.to_double());
    unsupported("-", a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.to_double() * b.to_double());
    if ((a.is_string() || a.is_list()) && is_intlike(b)) return repeat(in, a, b.as_int());
    if ((b.is_string() || b.is_list()) && is_intlike(a)) return repeat(in, b, a.as_int());
    if (a.is_string() || b.is_string())
      fail(fmt::format("can't multiply sequence by non-int of type '{}'",
                       type_name(a.is_string() ? b : a)));
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!nums) unsupported("/", a, b);
    if (b.to_double() == 0) fail(ints ? "division by zero" : "float division by zero");
    return Value::floating(a.to_double() / b.to_double());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) return Value::string(percent_format(in, a.str(), b));
    if (!nums) unsupported(op, a, b);
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) fail(op == "%" ? "integer modulo by zero" : "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) {
        if (op == "%") return Value::integer(0);
        overflow();
      }
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        q -= 1;
        r += y;
      }
      return Value::integer(op == "%" ? r : q);
    }
    double y = b.to_double();
    if (y == 0) fail(op == "%" ? "float modulo" : "float divmod()");
    double div;
    double mod = py_fmod(a.to_double(), y, &div);
    return Value::floating(op == "%" ? mod : div);
  }
  if (op == "**") {
    if (!nums) unsupported("** or pow()", a, b);
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(r, base, &r)) overflow();
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
      }
      return Value::integer(r);
    }
    double x = a.to_double(), y = b.to_double();
    if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
    if (x < 0 && y != std::floor(y)) fail("complex results are not supported");
    return Value::floating(std::pow(x, y));
  }
  fail(fmt::format("unknown operator {}", op));
}
}  // namespace

Value binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  if (op == "+" && a.is_string() && b.is_string()) {
    in.charge(a.str().size() + b.str().size());
    MarkedString out;
    out.append(a);
    out.append(b);
    in.charge(out.bytes() - out.size());  // the spans; the text is charged above
    return out.take();
  }
  return mark_derived(plain_binary_op(in, op, a, b), {&a, &b});
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::kUndefined:
      return false;
    case Value::Type::kString:
      if (!item.is_string())
        fail(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::kList:
      for (const auto& v : container.items())
        if (equals(v, item)) return true;
      return false;
    case Value::Type::kDict:
      return container.dict().find(item) != nullptr;
    case Value::Type::kObject:
      if (auto* it = dynamic_cast<IteratorObject*>(&container.obj())) {
        while (auto v = it->take_one())
          if (equals(*v, item)) return true;
        return false;
      }
      [[fallthrough]];
    default:
      fail(fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

}  // namespace tachyon::jinja
