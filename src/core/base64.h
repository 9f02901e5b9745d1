// Base64 (RFC 4648, the standard alphabet).
#pragma once

#include <string>
#include <string_view>

namespace tachyon {

// Decodes `text`. Spaces, tabs and line breaks are skipped (text wrapped at 76 columns);
// padding is optional but, when present, must complete the last group of four. Throws
// InvalidArgument naming `what` on a character outside the alphabet or a length no
// encoding has.
std::string base64_decode(std::string_view text, std::string_view what);

// The padded encoding of `bytes`.
std::string base64_encode(std::string_view bytes);

}  // namespace tachyon
