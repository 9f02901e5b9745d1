// One table of backend op cases, run on every backend compiled in (in the manner of
// llama.cpp's test-backend-ops). A case draws its inputs from a seed, rounds them to the
// dtype under test, runs one op of backend/ops.h on a Backend (inputs uploaded, outputs
// poisoned with NaN first and read back) and records its outputs. The runner holds a
// backend's outputs to the CPU backend's, computed in f32 from the same rounded inputs;
// the CPU's own outputs are held to a float64 formula where the case gives one.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace tachyon::op_harness {

// One output of a case, read back as doubles.
struct OpOutput {
  std::string name;
  std::vector<double> values;
  bool exact = false;  // ids and copies: equal element for element
};

// One run of a case: the backend, the dtype inputs are rounded to, the seeded draws,
// the host copies of the inputs a formula reads, and the outputs.
class OpRun {
 public:
  OpRun(Backend& be, DType dtype, uint32_t seed) : be_(be), dtype_(dtype), rng_(seed) {}

  Backend& be() { return be_; }
  DType dtype() const { return dtype_; }
  std::mt19937& rng() { return rng_; }

  // ---- host values (f32, rounded through dtype()) ------------------------------
  Tensor randn(const Shape& shape, float stddev = 1.f, float mean = 0.f);
  // normal(0, 1) rows, row r scaled by 10^u_r with u_r uniform in [-decades, decades].
  Tensor scaled_rows(const Shape& shape, float decades);
  // uniform integers in [lo, hi].
  std::vector<int32_t> ints(int64_t n, int32_t lo, int32_t hi);

  // ---- device tensors ---------------------------------------------------------
  Tensor act(const Tensor& host);  // in the backend's activation dtype
  Tensor f32(const Tensor& host);
  Tensor kv(const Tensor& host);  // in the backend's kv dtype
  Tensor weight(const Tensor& host) { return be_.prepare_weight(host); }
  Tensor linear_weight(const Tensor& host) { return be_.prepare_linear_weight(host); }
  LinearWeights linear(const Tensor& w, const Tensor& b) {
    return LinearWeights{linear_weight(w), b ? weight(b) : Tensor()};
  }
  Tensor i32(const std::vector<int32_t>& v);
  // An output filled with NaN (i32: -12345), so that an element left unwritten fails.
  Tensor out(const Shape& shape, DType dtype);
  Tensor out_act(const Shape& shape) { return out(shape, be_.activation_dtype()); }

  // ---- records -----------------------------------------------------------------
  // A host input kept for the case's formula.
  void keep(const std::string& name, const Tensor& host) { inputs_.push_back({name, host}); }
  const Tensor& input(const std::string& name) const;
  void output(const std::string& name, const Tensor& t, bool exact = false);
  const std::vector<OpOutput>& outputs() const { return outputs_; }

 private:
  Backend& be_;
  DType dtype_;
  std::mt19937 rng_;
  std::vector<std::pair<std::string, Tensor>> inputs_;
  std::vector<OpOutput> outputs_;
};

struct OpCase {
  std::string name;  // letters, digits and '_' (a test name)
  std::function<void(OpRun&)> run;
  // The outputs in float64 from the inputs run.keep() recorded (optional): checks the
  // CPU reference itself, and is the reference where the CPU cannot run the case.
  std::function<std::vector<std::vector<double>>(const OpRun&)> formula;
  bool needs_sampling = false;  // Backend::sample: only where supports_sampling()
  // Outputs in f32 (logits, router weights) from inputs in the dtype under test: only
  // the accumulation order differs, so the bound is f32's (10x that in 16 bits).
  bool f32_output = false;
  double tol_scale = 1.0;  // on top of the dtype's bound
  // A case of a CPU-only feature (a bf16 or int8 KV cache): other backends skip it.
  bool cpu_only = false;
};

// The table, built once.
const std::vector<OpCase>& op_cases();
void add_dense_cases(std::vector<OpCase>& cases);      // op_cases_dense.cc
void add_layer_cases(std::vector<OpCase>& cases);      // op_cases_layer.cc
void add_attention_cases(std::vector<OpCase>& cases);  // op_cases_attention.cc
void add_misc_cases(std::vector<OpCase>& cases);       // op_cases_misc.cc
void add_quant_cases(std::vector<OpCase>& cases);      // op_cases_quant.cc
void add_lora_cases(std::vector<OpCase>& cases);       // op_cases_lora.cc

// Rotary tables [m, rot] f32 of real angles: position pos0 + t, base 10000, rot / 2
// cosines then rot / 2 sines a row.
Tensor rotary_table(int64_t m, int rot, int64_t pos0 = 0);
// Host helpers of the formulae.
std::vector<double> values(const Tensor& host);
double activate(Activation act, double x);
const char* activation_name(Activation act);  // for case names

// Normalised error bound for outputs in `dtype` (f32 accumulation inside).
double bound_for(DType dtype);
// The bound of case c's outputs with inputs in `dtype`.
double bound_for(const OpCase& c, DType dtype);

// The checks (gtest assertions): the case on `be` with inputs rounded to `dtype` against
// the CPU backend's run on the same inputs (or the formula, for a case the CPU cannot
// run); and the CPU's run against the formula, the outputs all written, the same
// bits on a second run.
void check_against_cpu(Backend& be, DType dtype, const OpCase& c);
// `cpu`: the CPU backend to run (one of an instruction-set path); make_cpu_backend()'s
// when null.
void check_cpu_reference(const OpCase& c, Backend* cpu = nullptr);

}  // namespace tachyon::op_harness
