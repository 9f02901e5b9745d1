#include "media/image_source.h"

#include "core/base64.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "core/base64.h"
#include "core/error.h"

namespace tachyon::media {
namespace {

namespace fs = std::filesystem;

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s, std::string_view what) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int hi = i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) raise<InvalidArgument>("{}: a bad percent escape", what);
    const char c = static_cast<char>(hi * 16 + lo);
    if (c == '\0') raise<InvalidArgument>("{}: a NUL byte in the path", what);
    out += c;
    i += 2;
  }
  return out;
}

void check_size(size_t n, const MediaOptions& o, std::string_view what) {
  if (static_cast<int64_t>(n) > o.limits.max_bytes)
    raise<InvalidArgument>("{}: {} bytes, over the limit of {} bytes", what, n, o.limits.max_bytes);
}

}  // namespace

std::vector<uint8_t> read_data_url(std::string_view url, const MediaOptions& o) {
  if (!starts_with_ci(url, "data:")) raise<InvalidArgument>("image: not a data URL");
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) raise<InvalidArgument>("image: a data URL without a comma");
  const std::string header = lower(url.substr(5, comma - 5));
  if (header.size() < 7 || header.substr(header.size() - 7) != ";base64")
    raise<InvalidArgument>("image: the data URL must be base64 (data:image/...;base64,...)");
  std::string media_type = header.substr(0, header.size() - 7);
  if (const size_t semi = media_type.find(';'); semi != std::string::npos)
    media_type.resize(semi);  // parameters (charset...) aside
  const std::string_view payload = url.substr(comma + 1);
  // The decoded size from the encoded one, before decoding anything.
  check_size(payload.size() / 4 * 3, o, "image data URL");
  const std::string decoded = base64_decode(payload, "image data URL");
  std::vector<uint8_t> bytes(decoded.begin(), decoded.end());
  check_size(bytes.size(), o, "image data URL");
  if (!media_type.empty()) {
    if (media_type == "image/jpg") media_type = "image/jpeg";
    if (!media_type.starts_with("image/"))
      raise<InvalidArgument>("image: the data URL's media type {} is not an image type",
                             media_type);
    const ImageFormat f = detect_image_format(bytes);
    if (f == ImageFormat::kUnknown)
      raise<InvalidArgument>("image: the data URL says {} but its bytes are no known image format",
                             media_type);
    if (image_media_type(f) != media_type)
      raise<InvalidArgument>("image: the data URL says {} but its bytes are {}", media_type,
                             image_format_name(f));
  }
  return bytes;
}

std::vector<uint8_t> read_local_file(const std::string& path_or_url, const MediaOptions& o) {
  std::string path = path_or_url;
  if (starts_with_ci(path, "file:")) {
    std::string_view rest = std::string_view(path).substr(5);
    if (!rest.starts_with("//")) raise<InvalidArgument>("image: a file URL must be file:///path");
    rest.remove_prefix(2);
    const size_t slash = rest.find('/');
    const std::string host = lower(rest.substr(0, slash));
    if (slash == std::string_view::npos || (!host.empty() && host != "localhost"))
      raise<InvalidArgument>("image: a file URL must name a local path (file:///path)");
    path = percent_decode(rest.substr(slash), "image file URL");
  }
  if (o.allowed_local_path.empty())
    raise<InvalidArgument>(
        "image: local files are not allowed (the server's --allowed-local-media-path is unset)");
  std::error_code ec;
  const fs::path root = fs::canonical(o.allowed_local_path, ec);
  if (ec)
    raise<InvalidArgument>("image: the allowed local media folder {} does not exist",
                           o.allowed_local_path);
  // Symlinks resolved first, so that a link inside the folder cannot lead out of it.
  const fs::path file = fs::canonical(path, ec);
  if (ec) raise<InvalidArgument>("image: the local file {} does not exist", path);
  const auto [root_end, file_it] =
      std::mismatch(root.begin(), root.end(), file.begin(), file.end());
  if (root_end != root.end() || file_it == file.end())
    raise<InvalidArgument>("image: the local file {} is outside the allowed folder", path);
  if (!fs::is_regular_file(file, ec)) raise<InvalidArgument>("image: {} is not a file", path);
  const auto size = fs::file_size(file, ec);
  if (ec) raise<InvalidArgument>("image: cannot read {}", path);
  check_size(size, o, "image file");
  std::ifstream in(file, std::ios::binary);
  std::vector<uint8_t> bytes(size);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size)))
    raise<InvalidArgument>("image: cannot read {}", path);
  return bytes;
}

std::vector<uint8_t> load_image_bytes(const std::string& ref, const MediaOptions& o,
                                      bool allow_path) {
  if (ref.empty()) raise<InvalidArgument>("image: an empty URL");
  if (starts_with_ci(ref, "data:")) return read_data_url(ref, o);
  if (starts_with_ci(ref, "http://") || starts_with_ci(ref, "https://")) return fetch_url(ref, o);
  if (starts_with_ci(ref, "file:")) return read_local_file(ref, o);
  const size_t colon = ref.find(':');
  const size_t slash = ref.find('/');
  if (colon != std::string::npos && (slash == std::string::npos || colon < slash)) {
    raise<InvalidArgument>(
        "image: the URL scheme {} is not supported (data, http, https and file are)",
        ref.substr(0, colon));
  }
  if (!allow_path)
    raise<InvalidArgument>("image: {} is not a URL (data:, http(s):// or file://)",
                           ref.substr(0, 64));
  return read_local_file(ref, o);
}

RgbImage load_image(const std::string& ref, const MediaOptions& o, bool allow_path) {
  return decode_image(load_image_bytes(ref, o, allow_path), o.limits);
}

}  // namespace tachyon::media
