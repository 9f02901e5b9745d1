// Where a request's images come from: a data: URL (base64, its media type checked
// against the bytes), an http(s) URL (fetched with libcurl: a timeout, a size cap, an
// optional allow-list of host names, certificates verified, redirects followed only to
// allowed hosts), or a local file (a path or a file:// URL) only under one allowed
// folder, symlinks resolved before the check. Every refusal is an InvalidArgument
// naming the problem (a timeout a DeadlineExceeded).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "media/decode.h"

namespace tachyon::media {

struct MediaOptions {
  // Host names http(s) URLs may name (exactly, case-insensitively); empty: any host.
  std::vector<std::string> allowed_domains;
  // The folder local files must be under; empty: local files are refused.
  std::string allowed_local_path;
  double fetch_timeout_s = 5;  // a whole fetch, redirects included
  DecodeLimits limits;         // the bytes' cap also bounds downloads and data URLs
};

// The bytes of a base64 data: URL. The media type, when given, must be an image type
// that agrees with the bytes' signature (image/jpg is taken for image/jpeg).
std::vector<uint8_t> read_data_url(std::string_view url, const MediaOptions& options);
// The body of an http(s) URL.
std::vector<uint8_t> fetch_url(const std::string& url, const MediaOptions& options);
// The bytes of a local file (an absolute or relative path, or a file:// URL).
std::vector<uint8_t> read_local_file(const std::string& path_or_url, const MediaOptions& options);

// Any of the above, told by the reference's scheme; a bare path only when allow_path
// (the native API's images; OpenAI's image_url takes URLs only).
std::vector<uint8_t> load_image_bytes(const std::string& ref, const MediaOptions& options,
                                      bool allow_path);
// load_image_bytes, then decode_image with options.limits.
RgbImage load_image(const std::string& ref, const MediaOptions& options, bool allow_path);

}  // namespace tachyon::media
