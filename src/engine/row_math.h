// Fast reductions over one row of logits (a vocabulary of 32000+ floats per sampled
// token), written with vector extensions (eight floats at a time; AVX2 when the CPU has
// it, with identical results either way). Each result depends on the row alone, never
// on other rows.
#pragma once

#include <cstdint>

namespace tachyon {

// The largest value; sets *has_nan when a value is NaN or +inf. -inf for an empty row.
float row_max(const float* x, int32_t n, bool* has_nan);
// The first index holding exactly `value`, or -1.
int32_t row_find(const float* x, int32_t n, float value);
// The first index >= from whose value exceeds threshold, or -1.
int32_t row_next_above(const float* x, int32_t n, int32_t from, float threshold);
// w[i] = exp((x[i] - m) * scale), 0 for x[i] = -inf; returns the sum in double.
// Relative error of each term within 2e-7.
double row_exp(const float* x, int32_t n, float m, float scale, float* w);
// sum(exp((x[i] - m) * scale)) without storing the terms.
double row_exp_sum(const float* x, int32_t n, float m, float scale = 1.0f);
// One term of row_exp.
float fast_exp(float x);

}  // namespace tachyon
