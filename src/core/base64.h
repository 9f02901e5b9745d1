// Base64 (RFC 4648, the standard alphabet) decoding.
#pragma once

#include <string>
#include <string_view>

namespace tachyon {

// Decodes `text`; padding ('=') and line breaks are skipped. Throws InvalidArgument
// naming `what` on any other character outside the alphabet.
std::string base64_decode(std::string_view text, const std::string& what);

}  // namespace tachyon
