// http(s) fetches through libcurl (media/image_source.h): only http and https, the
// certificate and host name verified, a total timeout, the body capped (by its declared
// length and while it arrives), redirects followed by hand so that each hop's host is
// checked against the allow-list.
#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "media/image_source.h"

namespace tachyon::media {
namespace {

constexpr int kMaxRedirects = 5;

struct Body {
  std::vector<uint8_t> bytes;
  int64_t cap = 0;
  bool over = false;
};

size_t on_data(char* data, size_t size, size_t n, void* user) {
  auto* body = static_cast<Body*>(user);
  const size_t len = size * n;
  if (static_cast<int64_t>(body->bytes.size() + len) > body->cap) {
    body->over = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  body->bytes.insert(body->bytes.end(), data, data + len);
  return len;
}

struct CurlUrlDeleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};
struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};

// The URL's lower-cased host; InvalidArgument for one that does not parse.
std::string host_of(const std::string& url) {
  std::unique_ptr<CURLU, CurlUrlDeleter> u(curl_url());
  if (!u || curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK)
    raise<InvalidArgument>("image: {} is not a valid URL", url.substr(0, 200));
  char* host = nullptr;
  if (curl_url_get(u.get(), CURLUPART_HOST, &host, 0) != CURLUE_OK || !host)
    raise<InvalidArgument>("image: the URL {} names no host", url.substr(0, 200));
  std::string h(host);
  curl_free(host);
  for (char& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  return h;
}

void check_domain(const std::string& url, const MediaOptions& o) {
  if (!(url.starts_with("http://") || url.starts_with("https://")))
    raise<InvalidArgument>("image: {} is not an http(s) URL", url.substr(0, 200));
  const std::string host = host_of(url);
  if (o.allowed_domains.empty()) return;
  for (const std::string& d : o.allowed_domains) {
    std::string dl = d;
    for (char& c : dl) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (dl == host) return;
  }
  raise<InvalidArgument>("image: the host {} is not among the allowed media domains", host);
}

}  // namespace

std::vector<uint8_t> fetch_url(const std::string& first_url, const MediaOptions& o) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(o.fetch_timeout_s * 1000));
  std::string url = first_url;
  for (int hop = 0;; ++hop) {
    // The scheme is lower-cased for the check (libcurl takes either case).
    std::string checked = url;
    for (size_t i = 0; i < checked.size() && checked[i] != ':'; ++i)
      checked[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(checked[i])));
    check_domain(checked, o);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      raise<DeadlineExceeded>("image: fetching {} took over {} s", first_url.substr(0, 200),
                              o.fetch_timeout_s);
    std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
    if (!curl) raise<Internal>("image: libcurl could not start");
    CURL* c = curl.get();
    Body body;
    body.cap = o.limits.max_bytes;
    char error[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(c, CURLOPT_URL, checked.c_str());
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(left.count()));
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(o.limits.max_bytes));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "tachyon");
    const CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OPERATION_TIMEDOUT)
      raise<DeadlineExceeded>("image: fetching {} took over {} s", first_url.substr(0, 200),
                              o.fetch_timeout_s);
    if (body.over || rc == CURLE_FILESIZE_EXCEEDED)
      raise<InvalidArgument>("image: {} is over the limit of {} bytes", url.substr(0, 200),
                             o.limits.max_bytes);
    if (rc != CURLE_OK)
      raise<InvalidArgument>("image: fetching {} failed: {}", url.substr(0, 200),
                             error[0] ? error : curl_easy_strerror(rc));
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300 && status < 400) {
      char* next = nullptr;
      curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &next);
      if (!next)
        raise<InvalidArgument>("image: {} redirects nowhere (HTTP {})", url.substr(0, 200), status);
      if (hop + 1 > kMaxRedirects)
        raise<InvalidArgument>("image: {} redirects more than {} times", first_url.substr(0, 200),
                               kMaxRedirects);
      url = next;
      continue;
    }
    if (status != 200)
      raise<InvalidArgument>("image: fetching {} gave HTTP {}", url.substr(0, 200), status);
    return std::move(body.bytes);
  }
}

}  // namespace tachyon::media
