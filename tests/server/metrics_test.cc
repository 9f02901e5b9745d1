#include "server/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace tachyon::server {
namespace {

// Parses exposition text into "name{labels}" -> value, checking every sample line is
// preceded by HELP and TYPE lines for its family.
std::map<std::string, std::string> parse_samples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  std::set<std::string> typed;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("#", 0) == 0) continue;
    auto sp = line.rfind(' ');
    std::string key = line.substr(0, sp);
    std::string name = key.substr(0, key.find('{'));
    bool known = typed.count(name) > 0;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string s = suffix;
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
        known = known || typed.count(name.substr(0, name.size() - s.size())) > 0;
    }
    EXPECT_TRUE(known) << "sample without TYPE: " << line;
    out[key] = line.substr(sp + 1);
  }
  return out;
}

TEST(Metrics, CountersAndGaugesRender) {
  MetricsRegistry r;
  auto& c = r.counter({"tachyon:prompt_tokens_total", "vllm:prompt_tokens_total"}, "Prompt tokens.",
                      {{"model_name", "m"}});
  c.inc(3);
  c.inc(4.5);
  c.inc(-10);  // ignored: counters only go up
  auto& g = r.gauge({"tachyon:num_requests_running"}, "Running.", {});
  g.set(7);
  g.dec(2);
  r.gauge_fn({"tachyon:kv_cache_usage_perc"}, "KV usage.", {}, [] { return 0.25; });
  std::string text = r.render();
  auto s = parse_samples(text);
  EXPECT_EQ(s["tachyon:prompt_tokens_total{model_name=\"m\"}"], "7.5");
  EXPECT_EQ(s["vllm:prompt_tokens_total{model_name=\"m\"}"], "7.5");
  EXPECT_EQ(s["tachyon:num_requests_running"], "5");
  EXPECT_EQ(s["tachyon:kv_cache_usage_perc"], "0.25");
  EXPECT_NE(text.find("# TYPE tachyon:prompt_tokens_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("# HELP vllm:prompt_tokens_total Prompt tokens.\n"), std::string::npos);
  // The same name and labels give the same series.
  EXPECT_EQ(&c, &r.counter({"tachyon:prompt_tokens_total", "vllm:prompt_tokens_total"},
                           "Prompt tokens.", {{"model_name", "m"}}));
}

TEST(Metrics, HistogramBucketsAreCumulativeAndMatchAReference) {
  MetricsRegistry r;
  std::vector<double> bounds = {0.01, 0.1, 0.5, 1, 5};
  auto& h =
      r.histogram({"tachyon:e2e_request_latency_seconds"}, "E2E.", bounds, {{"model_name", "x"}});
  std::mt19937 rng(7);
  std::lognormal_distribution<double> dist(-1.0, 1.5);
  std::vector<double> values;
  for (int i = 0; i < 5000; ++i) values.push_back(dist(rng));
  values.push_back(0.1);  // exactly on a bound: counted in that bucket (le is inclusive)
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < values.size(); i += 4) h.observe(values[i]);
    });
  for (auto& t : threads) t.join();

  auto s = parse_samples(r.render());
  double ref_sum = 0;
  for (double v : values) ref_sum += v;
  for (double b : bounds) {
    long ref = std::count_if(values.begin(), values.end(), [&](double v) { return v <= b; });
    std::string key = "tachyon:e2e_request_latency_seconds_bucket{model_name=\"x\",le=\"" +
                      format_metric_value(b) + "\"}";
    ASSERT_TRUE(s.count(key)) << key;
    EXPECT_EQ(std::stol(s[key]), ref) << key;
  }
  EXPECT_EQ(s["tachyon:e2e_request_latency_seconds_bucket{model_name=\"x\",le=\"+Inf\"}"],
            std::to_string(values.size()));
  EXPECT_EQ(s["tachyon:e2e_request_latency_seconds_count{model_name=\"x\"}"],
            std::to_string(values.size()));
  EXPECT_NEAR(std::stod(s["tachyon:e2e_request_latency_seconds_sum{model_name=\"x\"}"]), ref_sum,
              1e-9 * ref_sum);
}

TEST(Metrics, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escape_help("line1\nback\\slash \"q\""), "line1\\nback\\\\slash \"q\"");
  MetricsRegistry r;
  r.counter({"x_total"}, "h", {{"path", "/v1/\"odd\"\n"}}).inc();
  EXPECT_NE(r.render().find("x_total{path=\"/v1/\\\"odd\\\"\\n\"} 1\n"), std::string::npos);
}

TEST(Metrics, FormatsSpecialValues) {
  EXPECT_EQ(format_metric_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(format_metric_value(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(format_metric_value(std::nan("")), "NaN");
  EXPECT_EQ(format_metric_value(42), "42");
  EXPECT_EQ(format_metric_value(0.1), "0.1");
  EXPECT_EQ(std::stod(format_metric_value(1.0 / 3.0)), 1.0 / 3.0);
}

TEST(Metrics, RefusesBadNamesAndConflicts) {
  MetricsRegistry r;
  EXPECT_THROW(r.counter({"bad name"}, "h"), InvalidArgument);
  EXPECT_THROW(r.counter({"9starts_with_digit"}, "h"), InvalidArgument);
  EXPECT_THROW(r.counter({"ok_total"}, "h", {{"bad-label", "v"}}), InvalidArgument);
  EXPECT_THROW(r.histogram({"h_seconds"}, "h", {0.1}, {{"le", "v"}}), InvalidArgument);
  EXPECT_THROW(r.histogram({"h2_seconds"}, "h", {0.5, 0.1}), InvalidArgument);
  r.counter({"dup"}, "h");
  EXPECT_THROW(r.gauge({"dup"}, "h"), InvalidArgument);
  r.histogram({"hist"}, "h", {1, 2});
  EXPECT_THROW(r.histogram({"hist"}, "h", {1, 3}), InvalidArgument);
}

}  // namespace
}  // namespace tachyon::server
