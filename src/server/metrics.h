// A small Prometheus registry: counters, gauges and histograms with labels, rendered
// in the text exposition format (version 0.0.4). Debian packages no Prometheus client
// library for C++, so this is the project's own. Updates are lock-free atomics; only
// creating a metric (first use of a name + label set) takes a lock.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tachyon::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(double v = 1.0);  // v >= 0; negative increments are ignored
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1.0);
  void dec(double v = 1.0) { inc(-v); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // upper_bounds: strictly increasing, finite; +Inf is implicit.
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Cumulative counts per bound, then the +Inf bucket (== count()).
  std::vector<uint64_t> cumulative_counts() const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket, not cumulative; last is +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

class MetricsRegistry {
 public:
  // A family is registered on first use; later uses must agree on type and help and
  // (for histograms) buckets. `names` lets one family be exposed under several names
  // (e.g. "tachyon:x" and the "vllm:x" operators already scrape). Throws
  // InvalidArgument on an invalid name or label, or a conflicting re-registration.
  Counter& counter(const std::vector<std::string>& names, const std::string& help,
                   const Labels& labels = {});
  Gauge& gauge(const std::vector<std::string>& names, const std::string& help,
               const Labels& labels = {});
  Histogram& histogram(const std::vector<std::string>& names, const std::string& help,
                       const std::vector<double>& buckets, const Labels& labels = {});
  // A gauge whose value is read at scrape time.
  void gauge_fn(const std::vector<std::string>& names, const std::string& help,
                const Labels& labels, std::function<double()> fn);
  // A counter read at scrape time (the function must never go down).
  void counter_fn(const std::vector<std::string>& names, const std::string& help,
                  const Labels& labels, std::function<double()> fn);

  // The whole registry in the text exposition format.
  std::string render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::function<double()> fn;
  };
  struct Family {
    std::vector<std::string> names;
    std::string help;
    Type type;
    std::vector<double> buckets;
    std::vector<std::unique_ptr<Series>> series;
  };
  Series& series(const std::vector<std::string>& names, const std::string& help, Type type,
                 const std::vector<double>* buckets, const Labels& labels);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;  // in registration order
  std::map<std::string, Family*> by_name_;
};

// Default latency buckets (seconds) for TTFT, inter-token and end-to-end latencies.
std::vector<double> ttft_buckets();
std::vector<double> itl_buckets();
std::vector<double> e2e_buckets();
std::vector<double> token_count_buckets();

// Formatting helpers (exposed for tests).
std::string escape_label_value(const std::string& v);
std::string escape_help(const std::string& v);
std::string format_metric_value(double v);

}  // namespace tachyon::server
