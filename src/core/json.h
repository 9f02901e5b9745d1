// JSON values (nlohmann::json) and parsing with clear errors for untrusted text.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace tachyon {

using Json = nlohmann::json;

// Parses `text`; throws InvalidArgument naming `what` (a file path, "request body")
// with the position of a syntax error, or when nesting is deeper than max_depth.
Json parse_json(std::string_view text, std::string_view what, int max_depth = 256);

// Reads and parses a JSON file; throws NotFound / InvalidArgument naming the path.
Json load_json_file(const std::string& path);

// What a value is, for error messages: "a string", "an integer", "null", ...
const char* json_type_name(const Json& v);

}  // namespace tachyon
