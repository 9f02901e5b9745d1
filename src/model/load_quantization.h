// Quantization of a 16-bit checkpoint's decoder weights at load (--quantization): every
// attention and MLP projection, MoE expert and shared expert becomes a quantized matrix
// (core/quant.h) by core's round-to-nearest quantizers; the embeddings, the lm_head,
// routers and norms stay as they are.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/quant.h"
#include "model/weights.h"

namespace tachyon {

class ThreadPool;

enum class LoadQuantization : uint8_t {
  kInt8,  // 8 bits, one symmetric scale per output channel
  kInt4,  // 4 bits, symmetric, groups of 128 (else 64 or 32; per channel when none divides k)
  kFp8,   // e4m3 with one scale per output channel (weights only on the CPU)
};

// "none" (or empty, "auto", and the 16-bit names fp16, f16, bf16: RTP-LLM's
// WEIGHT_TYPE) leaves it unset; "int8", "int4", "fp8" (fp8_e4m3). Throws
// InvalidArgument on anything else.
std::optional<LoadQuantization> parse_load_quantization(const std::string& spec);
const char* load_quantization_name(LoadQuantization q);

// Quantizes the decoder weights of w in place, the matrices spread over `pool`.
// Throws InvalidArgument when a weight is quantized already (a quantized checkpoint).
void quantize_at_load(ModelWeights& w, LoadQuantization q, ThreadPool& pool);

}  // namespace tachyon
