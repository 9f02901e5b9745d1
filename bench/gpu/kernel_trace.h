// A timeline of the kernels of a step as they run: CUPTI's activity API records each
// kernel's and each copy's start and end on the device clock (concurrent-kernel records:
// kernels are not serialised as under ncu, graph-launched kernels included), and each
// CUDA runtime call's on the host (the same clock domain). tachyon_gpu_bench --trace
// uses it for the steps it times. Records only where CUPTI's headers and library
// are found (TACHYON_HAVE_CUPTI); elsewhere KernelTrace is a stub (kAvailable false).
#pragma once

#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#ifdef TACHYON_HAVE_CUPTI
#include <cupti.h>
#endif

namespace tachyon::bench {

struct TracedKernel {
  std::string name;             // demangled, without namespaces and template arguments
  uint64_t start = 0, end = 0;  // ns, device clock (cuptiGetTimestamp's domain)
  uint32_t grid = 0;            // blocks in the grid (a copy: its bytes)
};

// A CUDA runtime call on the host thread (cudaMemcpyAsync, cudaGraphLaunch, ...).
struct TracedCall {
  std::string name;
  uint64_t start = 0, end = 0;  // ns, the host side of cuptiGetTimestamp's domain
};

#ifdef TACHYON_HAVE_CUPTI
class KernelTrace {
 public:
  static constexpr bool kAvailable = true;
  // Starts recording (call before the work is launched, and before graphs that should be
  // traced are recorded).
  static void start() {
    check(cuptiActivityRegisterCallbacks(&requested, &completed), "register callbacks");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel records");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable copy records");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enable runtime-call records");
  }
  static uint64_t now() {
    uint64_t t = 0;
    check(cuptiGetTimestamp(&t), "timestamp");
    return t;
  }
  // The kernels that started in [t0, t1), by start time (flushes what is buffered; the
  // caller synchronises the device first).
  static std::vector<TracedKernel> between(uint64_t t0, uint64_t t1) {
    check(cuptiActivityFlushAll(1), "flush");
    return window(records(), t0, t1);
  }
  // The runtime calls that started in [t0, t1), by start time (after between()).
  static std::vector<TracedCall> calls_between(uint64_t t0, uint64_t t1) {
    return window(calls(), t0, t1);
  }

 private:
  // The records of `all` that started in [t0, t1), by start time.
  template <typename Record>
  static std::vector<Record> window(const std::vector<Record>& all, uint64_t t0, uint64_t t1) {
    std::lock_guard<std::mutex> lock(mu());
    std::vector<Record> out;
    for (const Record& r : all)
      if (r.start >= t0 && r.start < t1) out.push_back(r);
    std::sort(out.begin(), out.end(),
              [](const Record& a, const Record& b) { return a.start < b.start; });
    return out;
  }
  static void check(CUptiResult r, const char* what) {
    if (r == CUPTI_SUCCESS) return;
    const char* msg = nullptr;
    cuptiGetResultString(r, &msg);
    std::fprintf(stderr, "kernel trace: %s: %s\n", what, msg != nullptr ? msg : "?");
    std::exit(2);
  }
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<TracedKernel>& records() {
    static std::vector<TracedKernel> r;
    return r;
  }
  static std::vector<TracedCall>& calls() {
    static std::vector<TracedCall> c;
    return c;
  }
  static std::string short_name(const char* mangled) {
    int status = 0;
    char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string s = status == 0 && d != nullptr ? d : mangled;
    std::free(d);
    for (size_t p; (p = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(p, 23);
    // "void ns::(anonymous namespace)::name<...>(args)" -> "name"
    const size_t paren = s.find('(');
    std::string head = s.substr(0, paren);
    int depth = 0;
    std::string flat;
    for (char c : head) {  // drop template arguments
      if (c == '<') ++depth;
      if (depth == 0) flat += c;
      if (c == '>') --depth;
    }
    const size_t colon = flat.rfind("::");
    if (colon != std::string::npos) flat = flat.substr(colon + 2);
    const size_t space = flat.rfind(' ');
    if (space != std::string::npos) flat = flat.substr(space + 1);
    return flat.empty() ? s : flat;
  }
  static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *size = size_t{8} << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
    *max_records = 0;
  }
  static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    std::lock_guard<std::mutex> lock(mu());
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        records().push_back({short_name(k->name), k->start, k->end,
                             static_cast<uint32_t>(k->gridX * k->gridY * k->gridZ)});
      } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        const char* dir = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "copy HtoD"
                          : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "copy DtoH"
                                                                           : "copy";
        records().push_back({dir, m->start, m->end, static_cast<uint32_t>(m->bytes)});
      } else if (rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
        const char* name = nullptr;
        if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS ||
            name == nullptr)
          name = "?";
        calls().push_back({name, a->start, a->end});
      }
    }
    std::free(buffer);
  }
};
#else
// Without CUPTI: nothing is recorded (tachyon_gpu_bench refuses --trace).
class KernelTrace {
 public:
  static constexpr bool kAvailable = false;
  static void start() {}
  static uint64_t now() { return 0; }
  static std::vector<TracedKernel> between(uint64_t, uint64_t) { return {}; }
  static std::vector<TracedCall> calls_between(uint64_t, uint64_t) { return {}; }
};
#endif

// Splits kernels and copies (by start time) into steps at the host timestamps `bounds`
// (each step's start, then the end of the last; every step synchronises, so its work
// starts inside it) and prints, for the middle step, its span against the sum of its
// kernels' durations, the host time before its first and after its last device record,
// and per kernel (name, grid) the count, the mean time and the mean gap before it
// (negative: it started before the previous kernel ended, as programmatic launch
// allows) and what it adds to the span; then the step's runtime calls from `calls` per
// function (count, host time). The step's records go to `path` (one line each) when it
// is not empty.
inline void print_step_timeline(const std::vector<TracedKernel>& ks,
                                const std::vector<uint64_t>& bounds, const std::string& label,
                                const std::string& path,
                                const std::vector<TracedCall>& calls = {}) {
  std::vector<std::vector<TracedKernel>> steps(bounds.size() > 1 ? bounds.size() - 1 : 0);
  for (const TracedKernel& k : ks) {
    const auto it = std::upper_bound(bounds.begin(), bounds.end(), k.start);
    if (it == bounds.begin() || it == bounds.end()) continue;  // outside the steps
    steps[static_cast<size_t>(it - bounds.begin() - 1)].push_back(k);
  }
  std::vector<size_t> used;  // the steps with records
  for (size_t i = 0; i < steps.size(); ++i)
    if (!steps[i].empty()) used.push_back(i);
  if (used.size() < 3) {
    std::printf("trace %s: %zu step(s) found, too few\n", label.c_str(), used.size());
    return;
  }
  const size_t mid = used[used.size() / 2];
  const std::vector<TracedKernel>& st = steps[mid];
  const uint64_t step_begin = bounds[mid], step_end = bounds[mid + 1];
  uint64_t span_end = 0, busy = 0;
  double gaps = 0, overlap = 0;
  struct Agg {
    int n = 0;
    double dur = 0, gap = 0, e2e = 0;  // e2e: from the previous kernels' end to this one's
  };
  std::map<std::string, Agg> agg;
  std::vector<std::string> order;
  FILE* f = path.empty() ? nullptr : std::fopen(path.c_str(), "w");
  if (f != nullptr) std::fprintf(f, "# %s: start_us dur_us gap_us grid name\n", label.c_str());
  for (size_t i = 0; i < st.size(); ++i) {
    const TracedKernel& k = st[i];
    const double dur = (k.end - k.start) * 1e-3;
    const double gap = i == 0 ? 0.0 : (double(k.start) - double(span_end)) * 1e-3;
    if (i > 0) (gap > 0 ? gaps : overlap) += gap;
    busy += k.end - k.start;
    const double e2e =
        (double(std::max(span_end, k.end)) - double(i == 0 ? k.start : span_end)) * 1e-3;
    span_end = std::max(span_end, k.end);
    const std::string key = k.name + " [" + std::to_string(k.grid) + "]";
    if (!agg.count(key)) order.push_back(key);
    Agg& a = agg[key];
    ++a.n;
    a.dur += dur;
    a.gap += gap;
    a.e2e += e2e;
    if (f != nullptr)
      std::fprintf(f, "%10.2f %8.2f %8.2f %7u %s\n", (k.start - st.front().start) * 1e-3, dur, gap,
                   k.grid, k.name.c_str());
  }
  if (f != nullptr) std::fclose(f);
  const double span = (span_end - st.front().start) * 1e-3;
  std::printf(
      "trace %s: %zu steps; step %zu: %zu records, span %.1f us, busy %.1f us, "
      "idle gaps %.1f us, overlaps %.1f us; host %.1f us: %.1f us before the first record, "
      "%.1f us after the last\n",
      label.c_str(), used.size(), mid, st.size(), span, busy * 1e-3, gaps, -overlap,
      (step_end - step_begin) * 1e-3, (double(st.front().start) - double(step_begin)) * 1e-3,
      (double(step_end) - double(span_end)) * 1e-3);
  // "end-to-end": what the kernel adds to the step's span (the columns before it count
  // the time its blocks spent waiting for their predecessor too).
  std::printf("  %-44s %5s %9s %9s %9s %13s\n", "kernel [blocks]", "count", "mean us", "total us",
              "gap us", "end-to-end us");
  for (const std::string& key : order) {
    const Agg& a = agg[key];
    std::printf("  %-44s %5d %9.2f %9.1f %9.2f %13.2f\n", key.substr(0, 44).c_str(), a.n,
                a.dur / a.n, a.dur, a.gap / a.n, a.e2e / a.n);
  }
  // The host's runtime calls of the step, per function.
  std::map<std::string, std::pair<int, double>> per_call;
  std::vector<std::string> call_order;
  double call_total = 0;
  for (const TracedCall& c : calls) {
    if (c.start < step_begin || c.start >= step_end) continue;
    if (!per_call.count(c.name)) call_order.push_back(c.name);
    auto& [n, us] = per_call[c.name];
    ++n;
    us += (c.end - c.start) * 1e-3;
    call_total += (c.end - c.start) * 1e-3;
  }
  if (call_order.empty()) return;
  std::printf("  runtime calls of the step: %.1f us on the host\n", call_total);
  for (const std::string& name : call_order)
    std::printf("    %-42s %5d %9.1f us\n", name.substr(0, 42).c_str(), per_call[name].first,
                per_call[name].second);
}

}  // namespace tachyon::bench
