#include "model/load_quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace tachyon {

std::optional<LoadQuantization> parse_load_quantization(const std::string& spec) {
  if (spec.empty() || spec == "none" || spec == "auto" || spec == "fp16" || spec == "f16" ||
      spec == "bf16")
    return std::nullopt;
  if (spec == "int8") return LoadQuantization::kInt8;
  if (spec == "int4") return LoadQuantization::kInt4;
  if (spec == "fp8" || spec == "fp8_e4m3") return LoadQuantization::kFp8;
  raise<InvalidArgument>("quantization '{}' is not one of none, int8, int4, fp8", spec);
}

const char* load_quantization_name(LoadQuantization q) {
  switch (q) {
    case LoadQuantization::kInt8:
      return "int8";
    case LoadQuantization::kInt4:
      return "int4";
    case LoadQuantization::kFp8:
      return "fp8";
  }
  return "?";
}

namespace {

// Groups of 128 columns, else of 64 or 32 where those divide k (704 = 11 x 64), else
// one group per row.
int64_t int4_group(int64_t k) {
  for (int64_t g : {128, 64, 32})
    if (k % g == 0) return g;
  return k;
}

std::shared_ptr<QuantizedMatrix> quantize_one(const Tensor& w, LoadQuantization q) {
  const int64_t k = w.dim(1);
  switch (q) {
    case LoadQuantization::kInt8:
      return quantize_int(w, 8, k, true);
    case LoadQuantization::kInt4:
      return quantize_int(w, 4, int4_group(k), true);
    case LoadQuantization::kFp8:
      return quantize_fp8(w, 1, k);
  }
  return nullptr;
}

}  // namespace

void quantize_at_load(ModelWeights& w, LoadQuantization q, ThreadPool& pool) {
  std::vector<Tensor*> mats;
  for (LayerWeights& L : w.layers) {
    for (LinearWeights* l :
         {&L.qkv, &L.q, &L.k, &L.v, &L.o, &L.gate_up, &L.gate, &L.up, &L.down, &L.shared_gate,
          &L.shared_up, &L.shared_down, &L.linear_attn, &L.linear_mlp})
      if (l->w) mats.push_back(&l->w);
    for (MoeExpertWeights& e : L.experts)
      for (Tensor* t : {&e.gate_up, &e.gate, &e.up, &e.down})
        if (*t) mats.push_back(t);
  }
  for (const Tensor* t : mats)
    if (const QuantizedMatrix* m = quantized(*t))
      raise<InvalidArgument>(
          "--quantization {}: the checkpoint is quantized already ({}); it applies to 16-bit "
          "checkpoints",
          load_quantization_name(q), m->str());
  // One matrix per task: a model has hundreds, so the threads stay busy.
  pool.run(static_cast<int64_t>(mats.size()), [&](int64_t i) {
    Tensor& t = *mats[static_cast<size_t>(i)];
    t = quantized_view(quantize_one(t, q));
  });
}

}  // namespace tachyon
