#include "core/json.h"

#include "core/error.h"
#include "core/mmap.h"

namespace tachyon {

Json parse_json(std::string_view text, std::string_view what, int max_depth) {
  int depth = 0;
  bool too_deep = false;
  auto callback = [&](int d, Json::parse_event_t event, Json&) {
    if (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) {
      depth = d;
      if (d >= max_depth) too_deep = true;
    }
    return !too_deep;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                    /*ignore_comments=*/false);
  } catch (const Json::parse_error& e) {
    raise<InvalidArgument>("{}: invalid JSON: {}", what, e.what());
  } catch (const Json::exception& e) {
    // Valid syntax the parser still refuses: a number too large for a double (406).
    raise<InvalidArgument>("{}: invalid JSON: {}", what, e.what());
  }
  if (too_deep) raise<InvalidArgument>("{}: JSON nested deeper than {}", what, max_depth);
  return j;
}

Json load_json_file(const std::string& path) {
  return parse_json(read_file(path), path);
}

const char* json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

}  // namespace tachyon
