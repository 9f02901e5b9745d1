// The op harness's runs and checks (op_harness.h).
#include "backend/op_harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace tachyon::op_harness {

Tensor OpRun::randn(const Shape& shape, float stddev, float mean) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::normal_distribution<float> d(mean, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng_);
  return dtype_ == DType::kF32 ? t : t.to(dtype_).to(DType::kF32);
}

Tensor OpRun::scaled_rows(const Shape& shape, float decades) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  const int64_t cols = shape.back(), rows = t.numel() / cols;
  std::normal_distribution<float> d(0.f, 1.f);
  std::uniform_real_distribution<float> u(-decades, decades);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::pow(10.f, u(rng_));
    for (int64_t c = 0; c < cols; ++c) t.data<float>()[r * cols + c] = s * d(rng_);
  }
  return dtype_ == DType::kF32 ? t : t.to(dtype_).to(DType::kF32);
}

std::vector<int32_t> OpRun::ints(int64_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> d(lo, hi);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng_);
  return v;
}

Tensor OpRun::act(const Tensor& host) {
  const DType t = be_.activation_dtype();
  const Tensor h = t == DType::kF32 ? host : host.to(t);
  return be_.upload(h.raw(), h.shape(), t, {});
}

Tensor OpRun::f32(const Tensor& host) {
  return be_.upload(host.raw(), host.shape(), DType::kF32, {});
}

Tensor OpRun::kv(const Tensor& host) {
  const DType t = be_.kv_dtype();
  const Tensor h = t == DType::kF32 ? host : host.to(t);
  return be_.upload(h.raw(), h.shape(), t, {});
}

Tensor OpRun::i32(const std::vector<int32_t>& v) {
  return be_.upload(v.data(), {static_cast<int64_t>(v.size())}, DType::kI32, {});
}

Tensor OpRun::out(const Shape& shape, DType dtype) {
  Tensor h = Tensor::empty(shape, DType::kF32);
  if (dtype == DType::kI32) {
    Tensor ids = Tensor::empty(shape, DType::kI32);
    for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int32_t>()[i] = -12345;
    return be_.upload(ids.raw(), shape, DType::kI32, {});
  }
  for (int64_t i = 0; i < h.numel(); ++i)
    h.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  const Tensor c = dtype == DType::kF32 ? h : h.to(dtype);
  return be_.upload(c.raw(), shape, dtype, {});
}

const Tensor& OpRun::input(const std::string& name) const {
  for (const auto& [n, t] : inputs_)
    if (n == name) return t;
  TACHYON_CHECK(false, "op case input {} was not kept", name);
  return inputs_.front().second;  // not reached
}

void OpRun::output(const std::string& name, const Tensor& t, bool exact) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  be_.download(t, h.raw());
  OpOutput o{name, {}, exact};
  o.values.resize(static_cast<size_t>(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i)
    o.values[static_cast<size_t>(i)] =
        h.dtype() == DType::kI32 ? h.data<int32_t>()[i]
                                 : load_as_f32(h.raw(), h.dtype(), static_cast<size_t>(i));
  outputs_.push_back(std::move(o));
}

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> c;
    add_dense_cases(c);
    add_layer_cases(c);
    add_attention_cases(c);
    add_misc_cases(c);
    add_quant_cases(c);
    add_lora_cases(c);
    return c;
  }();
  return cases;
}

Tensor rotary_table(int64_t m, int rot, int64_t pos0) {
  Tensor cs = Tensor::empty({m, rot}, DType::kF32);
  for (int64_t t = 0; t < m; ++t)
    for (int p = 0; p < rot / 2; ++p) {
      const double ang = static_cast<double>(pos0 + t) * std::pow(10000.0, -2.0 * p / rot);
      cs.data<float>()[t * rot + p] = static_cast<float>(std::cos(ang));
      cs.data<float>()[t * rot + rot / 2 + p] = static_cast<float>(std::sin(ang));
    }
  return cs;
}

std::vector<double> values(const Tensor& host) {
  std::vector<double> v(static_cast<size_t>(host.numel()));
  for (int64_t i = 0; i < host.numel(); ++i)
    v[static_cast<size_t>(i)] = host.dtype() == DType::kI32
                                    ? host.data<int32_t>()[i]
                                    : load_as_f32(host.raw(), host.dtype(), static_cast<size_t>(i));
  return v;
}

double activate(Activation act, double x) {
  switch (act) {
    case Activation::kIdentity:
      return x;
    case Activation::kSilu:
      return x / (1 + std::exp(-x));
    case Activation::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::kRelu:
      return x > 0 ? x : 0;
    case Activation::kQuickGelu:
      return x / (1 + std::exp(-1.702 * x));
  }
  return x;
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kIdentity:
      return "identity";
    case Activation::kSilu:
      return "silu";
    case Activation::kGelu:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kRelu:
      return "relu";
    case Activation::kQuickGelu:
      return "quick_gelu";
  }
  return "?";
}

double bound_for(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return 1e-2;
    case DType::kF16:
      return 2e-3;
    default:
      return 1e-5;
  }
}

double bound_for(const OpCase& c, DType dtype) {
  const double f32 = bound_for(DType::kF32);
  return c.tol_scale * (c.f32_output ? (dtype == DType::kF32 ? f32 : 10 * f32) : bound_for(dtype));
}

namespace {

uint32_t seed_of(const std::string& name) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 16777619u;
  return h;
}

// got within bound of want: ||got - want|| / ||want|| <= bound and every element within
// 4 * bound * (|want| + rms(want)); integers equal; no NaN or inf.
void expect_matches(const OpOutput& got, const std::vector<double>& want, double bound,
                    const std::string& what) {
  ASSERT_EQ(got.values.size(), want.size()) << what << " " << got.name;
  if (got.exact) {
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got.values[i], want[i]) << what << " " << got.name << " element " << i;
    return;
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got.values[i]))
        << what << " " << got.name << " element " << i << " is " << got.values[i];
    num += (got.values[i] - want[i]) * (got.values[i] - want[i]);
    den += want[i] * want[i];
  }
  const double rms = want.empty() ? 0 : std::sqrt(den / static_cast<double>(want.size()));
  const double normalised = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double s = std::abs(got.values[i] - want[i]) / (std::abs(want[i]) + rms + 1e-30);
    if (s > worst) {
      worst = s;
      at = i;
    }
  }
  std::printf("  %-12s normalised %.2e  worst %.2e  (bound %.0e)\n", got.name.c_str(), normalised,
              worst, bound);
  EXPECT_LE(normalised, bound) << what << " " << got.name;
  EXPECT_LE(worst, 4 * bound) << what << " " << got.name << ": element " << at << " got "
                              << got.values[at] << " want " << want[at];
}

}  // namespace

void check_against_cpu(Backend& be, DType dtype, const OpCase& c) {
  if (c.needs_sampling && !be.supports_sampling())
    GTEST_SKIP() << "the " << be.name() << " backend does not sample";
  if (c.cpu_only && !be.device().is_cpu()) GTEST_SKIP() << c.name << " is a CPU feature";
  const uint32_t seed = seed_of(c.name);
  OpRun got(be, dtype, seed);
  c.run(got);
  be.synchronize();
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  OpRun ref(*cpu, dtype, seed);
  std::vector<std::vector<double>> want;
  if (c.needs_sampling && !cpu->supports_sampling()) {
    ASSERT_TRUE(c.formula) << c.name << ": a sampling case needs a formula";
    c.run(ref);  // records the inputs only where the CPU cannot sample
    want = c.formula(ref);
  } else {
    c.run(ref);
    for (const OpOutput& o : ref.outputs()) want.push_back(o.values);
  }
  ASSERT_EQ(got.outputs().size(), want.size()) << c.name;
  for (size_t i = 0; i < want.size(); ++i)
    expect_matches(got.outputs()[i], want[i], bound_for(c, dtype),
                   std::string(be.name()) + " " + std::string(dtype_name(dtype)) + " " + c.name);
}

void check_cpu_reference(const OpCase& c, Backend* given) {
  std::unique_ptr<Backend> own = given != nullptr ? nullptr : make_cpu_backend();
  Backend* cpu = given != nullptr ? given : own.get();
  if (c.needs_sampling && !cpu->supports_sampling()) {
    // Only the formula can be checked: against itself it proves nothing, so the run
    // must at least hold the inputs the formula reads.
    ASSERT_TRUE(c.formula) << c.name;
    GTEST_SKIP() << "the cpu backend does not sample";
  }
  const uint32_t seed = seed_of(c.name);
  OpRun a(*cpu, DType::kF32, seed), b(*cpu, DType::kF32, seed);
  c.run(a);
  c.run(b);
  ASSERT_FALSE(a.outputs().empty()) << c.name;
  ASSERT_EQ(a.outputs().size(), b.outputs().size());
  for (size_t i = 0; i < a.outputs().size(); ++i) {
    const OpOutput& o = a.outputs()[i];
    for (size_t j = 0; j < o.values.size(); ++j)
      ASSERT_TRUE(std::isfinite(o.values[j])) << o.name << " element " << j << " unwritten";
    EXPECT_EQ(std::memcmp(o.values.data(), b.outputs()[i].values.data(),
                          o.values.size() * sizeof(double)),
              0)
        << o.name << ": a second run differs";
  }
  if (!c.formula) return;
  const std::vector<std::vector<double>> want = c.formula(a);
  ASSERT_EQ(want.size(), a.outputs().size()) << c.name;
  for (size_t i = 0; i < want.size(); ++i)
    expect_matches(a.outputs()[i], want[i], bound_for(c, DType::kF32), "cpu formula " + c.name);
}

}  // namespace tachyon::op_harness
