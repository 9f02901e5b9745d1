#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace tachyon::server {
namespace {

void atomic_add(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

bool valid_metric_name(const std::string& n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool valid_label_name(const std::string& n) {
  if (n.empty() || n.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string render_labels(const Labels& labels,
                          const std::pair<std::string, std::string>* extra = nullptr) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  bool first = true;
  auto add = [&](const std::string& k, const std::string& v) {
    if (!first) out += ",";
    first = false;
    out += k + "=\"" + escape_label_value(v) + "\"";
  };
  for (const auto& [k, v] : labels) add(k, v);
  if (extra != nullptr) add(extra->first, extra->second);
  out += "}";
  return out;
}

const char* type_name(int t) {
  switch (t) {
    case 0:
      return "counter";
    case 1:
      return "gauge";
    default:
      return "histogram";
  }
}

}  // namespace

void Counter::inc(double v) {
  if (v > 0) atomic_add(value_, v);
}

void Gauge::inc(double v) {
  atomic_add(value_, v);
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]))
      raise<InvalidArgument>("histogram bucket bound {} is not finite", bounds_[i]);
    if (i > 0 && !(bounds_[i] > bounds_[i - 1]))
      raise<InvalidArgument>("histogram bucket bounds must increase: {} after {}", bounds_[i],
                             bounds_[i - 1]);
  }
  buckets_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double v) {
  if (std::isnan(v)) return;
  size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  atomic_add(sum_, v);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t acc = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    acc += buckets_[i].load(std::memory_order_relaxed);
    out[i] = acc;
  }
  return out;
}

MetricsRegistry::Series& MetricsRegistry::series(const std::vector<std::string>& names,
                                                 const std::string& help, Type type,
                                                 const std::vector<double>* buckets,
                                                 const Labels& labels) {
  if (names.empty()) raise<InvalidArgument>("a metric needs a name");
  for (const auto& n : names)
    if (!valid_metric_name(n)) raise<InvalidArgument>("invalid metric name '{}'", n);
  for (const auto& [k, v] : labels)
    if (!valid_label_name(k) || (type == Type::kHistogram && k == "le"))
      raise<InvalidArgument>("invalid label name '{}' on metric '{}'", k, names[0]);
  std::lock_guard<std::mutex> lock(mu_);
  Family* fam = nullptr;
  if (auto it = by_name_.find(names[0]); it != by_name_.end()) {
    fam = it->second;
    if (fam->type != type || fam->names != names)
      raise<InvalidArgument>("metric '{}' registered again with a different type or names",
                             names[0]);
    if (buckets != nullptr && fam->buckets != *buckets)
      raise<InvalidArgument>("histogram '{}' registered again with different buckets", names[0]);
  } else {
    for (const auto& n : names)
      if (by_name_.count(n)) raise<InvalidArgument>("metric name '{}' is already used", n);
    auto f = std::make_unique<Family>();
    f->names = names;
    f->help = help;
    f->type = type;
    if (buckets != nullptr) f->buckets = *buckets;
    fam = f.get();
    families_.push_back(std::move(f));
    for (const auto& n : names) by_name_[n] = fam;
  }
  for (auto& s : fam->series)
    if (s->labels == labels) return *s;
  auto s = std::make_unique<Series>();
  s->labels = labels;
  switch (type) {
    case Type::kCounter:
      s->counter = std::make_unique<Counter>();
      break;
    case Type::kGauge:
      s->gauge = std::make_unique<Gauge>();
      break;
    case Type::kHistogram:
      s->histogram = std::make_unique<Histogram>(fam->buckets);
      break;
  }
  fam->series.push_back(std::move(s));
  return *fam->series.back();
}

Counter& MetricsRegistry::counter(const std::vector<std::string>& names, const std::string& help,
                                  const Labels& labels) {
  return *series(names, help, Type::kCounter, nullptr, labels).counter;
}

Gauge& MetricsRegistry::gauge(const std::vector<std::string>& names, const std::string& help,
                              const Labels& labels) {
  auto& s = series(names, help, Type::kGauge, nullptr, labels);
  if (!s.gauge) raise<InvalidArgument>("metric '{}' is a computed gauge", names[0]);
  return *s.gauge;
}

Histogram& MetricsRegistry::histogram(const std::vector<std::string>& names,
                                      const std::string& help, const std::vector<double>& buckets,
                                      const Labels& labels) {
  return *series(names, help, Type::kHistogram, &buckets, labels).histogram;
}

void MetricsRegistry::gauge_fn(const std::vector<std::string>& names, const std::string& help,
                               const Labels& labels, std::function<double()> fn) {
  auto& s = series(names, help, Type::kGauge, nullptr, labels);
  std::lock_guard<std::mutex> lock(mu_);
  s.fn = std::move(fn);
}

void MetricsRegistry::counter_fn(const std::vector<std::string>& names, const std::string& help,
                                 const Labels& labels, std::function<double()> fn) {
  auto& s = series(names, help, Type::kCounter, nullptr, labels);
  std::lock_guard<std::mutex> lock(mu_);
  s.fn = std::move(fn);
}

std::string MetricsRegistry::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& fam : families_) {
    for (const auto& name : fam->names) {
      out += "# HELP " + name + " " + escape_help(fam->help) + "\n";
      out += "# TYPE " + name + " " + type_name(static_cast<int>(fam->type)) + "\n";
      for (const auto& s : fam->series) {
        if (fam->type == Type::kHistogram) {
          const auto& h = *s->histogram;
          auto cum = h.cumulative_counts();
          for (size_t i = 0; i <= h.upper_bounds().size(); ++i) {
            std::pair<std::string, std::string> le{
                "le",
                i < h.upper_bounds().size() ? format_metric_value(h.upper_bounds()[i]) : "+Inf"};
            out += name + "_bucket" + render_labels(s->labels, &le) + " " + std::to_string(cum[i]) +
                   "\n";
          }
          out +=
              name + "_sum" + render_labels(s->labels) + " " + format_metric_value(h.sum()) + "\n";
          out +=
              name + "_count" + render_labels(s->labels) + " " + std::to_string(cum.back()) + "\n";
        } else {
          double v = 0;
          if (s->fn) {
            try {
              v = s->fn();
            } catch (...) {
              v = std::nan("");
            }
          } else if (s->counter) {
            v = s->counter->value();
          } else if (s->gauge) {
            v = s->gauge->value();
          }
          out += name + render_labels(s->labels) + " " + format_metric_value(v) + "\n";
        }
      }
    }
  }
  return out;
}

std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
std::vector<double> token_count_buckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escape_help(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  char buf[40];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);  // shortest text that reads back exactly
  return std::string(buf, res.ptr);
}

}  // namespace tachyon::server
