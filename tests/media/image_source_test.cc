#include "media/image_source.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "core/base64.h"
#include "core/error.h"
#include "media_fixtures.h"

namespace tachyon::media {
namespace {

namespace fs = std::filesystem;

std::string base64(const std::vector<uint8_t>& b) {
  return base64_encode(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

template <typename F>
void expect_refused(F&& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "not refused (expected: " << words << ")";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(MediaSource, DataUrls) {
  const std::vector<uint8_t> png = testing::read_fixture("images/rgb.png");
  MediaOptions o;
  EXPECT_EQ(read_data_url("data:image/png;base64," + base64(png), o), png);
  EXPECT_EQ(load_image("data:image/png;base64," + base64(png), o, false).width, 37);
  // No media type: the bytes decide.
  EXPECT_EQ(read_data_url("data:;base64," + base64(png), o), png);
  // image/jpg for image/jpeg.
  const std::vector<uint8_t> jpg = testing::read_fixture("images/baseline.jpg");
  EXPECT_EQ(read_data_url("data:image/jpg;base64," + base64(jpg), o), jpg);
  expect_refused([&] { read_data_url("data:image/jpeg;base64," + base64(png), o); },
                 "says image/jpeg but its bytes are PNG");
  expect_refused([&] { read_data_url("data:text/plain;base64," + base64(png), o); },
                 "not an image type");
  // Wrapped base64.
  std::string wrapped = base64(png);
  for (size_t i = 76; i < wrapped.size(); i += 78) wrapped.insert(i, "\r\n");
  EXPECT_EQ(read_data_url("data:image/png;base64," + wrapped, o), png);
  expect_refused([&] { read_data_url("data:image/png;base64,iVBO*w0K", o); }, "bad base64");
  expect_refused([&] { read_data_url("data:image/png;base64,iVBOR", o); }, "bad base64");
  expect_refused([&] { read_data_url("data:image/png,rawbytes", o); }, "must be base64");
  expect_refused([&] { read_data_url("data:image/png;base64", o); }, "without a comma");
  MediaOptions small;
  small.limits.max_bytes = int64_t(png.size()) - 1;
  expect_refused([&] { read_data_url("data:image/png;base64," + base64(png), small); },
                 "over the limit");
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("tachyon_media_src_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(MediaSource, LocalFilesOnlyUnderTheAllowedFolder) {
  TempDir tmp;
  const fs::path allowed = tmp.path() / "allowed", outside = tmp.path() / "outside";
  fs::create_directories(allowed / "sub");
  fs::create_directories(outside);
  const std::vector<uint8_t> png = testing::read_fixture("images/rgb.png");
  for (const fs::path& p : {allowed / "sub" / "a b.png", outside / "x.png"})
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(png.data()), png.size());
  fs::create_symlink(outside / "x.png", allowed / "link.png");
  fs::create_symlink(outside, allowed / "dirlink");
  fs::create_directories(tmp.path() / "allowed2");
  std::ofstream(tmp.path() / "allowed2" / "y.png", std::ios::binary)
      .write(reinterpret_cast<const char*>(png.data()), png.size());

  MediaOptions o;
  const std::string inside = (allowed / "sub" / "a b.png").string();
  expect_refused([&] { read_local_file(inside, o); }, "local files are not allowed");
  o.allowed_local_path = allowed.string();
  EXPECT_EQ(read_local_file(inside, o), png);
  EXPECT_EQ(load_image_bytes(inside, o, true), png);
  EXPECT_EQ(load_image_bytes("file://" + (allowed / "sub" / "a%20b.png").string(), o, false), png);
  expect_refused([&] { load_image_bytes(inside, o, false); }, "is not a URL");
  expect_refused([&] { read_local_file((outside / "x.png").string(), o); }, "outside the allowed");
  expect_refused([&] { read_local_file((allowed / "link.png").string(), o); },
                 "outside the allowed");
  expect_refused([&] { read_local_file((allowed / "dirlink" / "x.png").string(), o); },
                 "outside the allowed");
  expect_refused([&] { read_local_file((allowed / ".." / "outside" / "x.png").string(), o); },
                 "outside the allowed");
  // A sibling whose name starts with the allowed folder's.
  expect_refused([&] { read_local_file((tmp.path() / "allowed2" / "y.png").string(), o); },
                 "outside the allowed");
  expect_refused([&] { read_local_file((allowed / "none.png").string(), o); }, "does not exist");
  expect_refused([&] { read_local_file((allowed / "sub").string(), o); }, "not a file");
  expect_refused([&] { read_local_file("file://otherhost/etc/passwd", o); }, "local path");
  MediaOptions small = o;
  small.limits.max_bytes = 10;
  expect_refused([&] { read_local_file(inside, small); }, "over the limit");
  expect_refused([&] { load_image_bytes("ftp://example.com/x.png", o, true); }, "scheme ftp");
}

// A one-request-at-a-time HTTP server on 127.0.0.1 for the fetch tests.
class TestServer {
 public:
  struct Reply {
    std::string status = "200 OK";
    std::string body;
    std::string extra_headers;
    bool declare_length = true;
    int delay_ms = 0;
  };
  explicit TestServer(std::map<std::string, Reply> routes) : routes_(std::move(routes)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 8);
    thread_ = std::thread([this] { serve(); });
  }
  ~TestServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, size_t(n));
      }
      const size_t sp = req.find(' '), sp2 = req.find(' ', sp + 1);
      const std::string path = sp == std::string::npos ? "" : req.substr(sp + 1, sp2 - sp - 1);
      auto it = routes_.find(path);
      Reply r = it == routes_.end() ? Reply{"404 Not Found", "no", "", true, 0} : it->second;
      if (r.delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(r.delay_ms));
      std::string head = "HTTP/1.1 " + r.status + "\r\nConnection: close\r\n" + r.extra_headers;
      if (r.declare_length) head += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
      head += "\r\n";
      const std::string all = head + r.body;
      ::send(c, all.data(), all.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  std::map<std::string, Reply> routes_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(MediaSource, HttpFetch) {
  const std::vector<uint8_t> png = testing::read_fixture("images/rgb.png");
  const std::string body(png.begin(), png.end());
  TestServer::Reply ok{"200 OK", body, "", true, 0};
  TestServer::Reply unsized{"200 OK", body, "", false, 0};
  TestServer::Reply slow{"200 OK", body, "", true, 1500};
  TestServer::Reply moved{"302 Found", "", "", true, 0};
  TestServer server({{"/ok.png", ok}, {"/unsized.png", unsized}, {"/slow.png", slow}});
  TestServer::Reply to_ok = moved;
  to_ok.extra_headers = "Location: " + server.url("/ok.png") + "\r\n";
  TestServer::Reply to_elsewhere = moved;
  to_elsewhere.extra_headers = "Location: http://localhost:1/x.png\r\n";
  TestServer redirects({{"/to-ok", to_ok}, {"/elsewhere", to_elsewhere}});

  MediaOptions o;
  o.fetch_timeout_s = 0.5;
  EXPECT_EQ(fetch_url(server.url("/ok.png"), o), png);
  EXPECT_EQ(load_image(server.url("/ok.png"), o, false).width, 37);
  EXPECT_EQ(fetch_url(server.url("/unsized.png"), o), png);
  expect_refused([&] { fetch_url(server.url("/missing.png"), o); }, "HTTP 404");

  MediaOptions small = o;
  small.limits.max_bytes = int64_t(png.size()) - 1;
  expect_refused([&] { fetch_url(server.url("/ok.png"), small); }, "over the limit");
  expect_refused([&] { fetch_url(server.url("/unsized.png"), small); }, "over the limit");

  MediaOptions listed = o;
  listed.allowed_domains = {"example.com"};
  expect_refused([&] { fetch_url(server.url("/ok.png"), listed); },
                 "host 127.0.0.1 is not among the allowed");
  listed.allowed_domains = {"example.com", "127.0.0.1"};
  EXPECT_EQ(fetch_url(server.url("/ok.png"), listed), png);
  // Redirects: followed to an allowed host, refused to another one.
  EXPECT_EQ(fetch_url(redirects.url("/to-ok"), listed), png);
  expect_refused([&] { fetch_url(redirects.url("/elsewhere"), listed); },
                 "host localhost is not among the allowed");
  // Nothing listens on port 1.
  expect_refused([&] { fetch_url("http://127.0.0.1:1/x.png", o); }, "failed");
  // Last: the server answers nothing else while it stalls.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(fetch_url(server.url("/slow.png"), o), DeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1200));
}

}  // namespace
}  // namespace tachyon::media
