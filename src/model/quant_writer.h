// Writing quantized checkpoints: a QuantizedMatrix as a format's tensors (GPTQ, AWQ
// gemm, FP8 blocks), and a whole 16-bit checkpoint quantized into one of them
// (`tachyon quantize`, `tachyon make-random --quant-format`). The readers in
// model/quant_formats.h read every file written here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/json.h"
#include "core/quant.h"
#include "io/safetensors.h"

namespace tachyon {

enum class QuantFormat : uint8_t { kGptq, kAwq, kFp8 };

// What a checkpoint is quantized to: the format, and for integers the bits, the group
// size (-1: per channel; a module whose k it does not divide is per channel) and the
// symmetry.
struct QuantizeSpec {
  QuantFormat format = QuantFormat::kGptq;
  int32_t bits = 4;
  int64_t group_size = 128;
  bool symmetric = true;
  int64_t block = 128;  // fp8: block x block scales
};

// `tachyon quantize --method`: int8 (GPTQ 8-bit per channel, symmetric), int4 (GPTQ
// 4-bit, groups of 128, symmetric) or fp8 (128 x 128 blocks). nullopt otherwise.
std::optional<QuantizeSpec> quantize_method_spec(std::string_view method);
// `make-random --quant-format`: gptq (int4 g128 sym), awq (int4 g128 with zeros, gemm)
// or fp8 (128 x 128 blocks). nullopt otherwise.
std::optional<QuantizeSpec> quant_format_spec(std::string_view format);

// The group size spec gives a module of k columns.
int64_t group_size_for(const QuantizeSpec& spec, int64_t k);
// Round-to-nearest quantization of a dense host matrix under spec.
std::shared_ptr<QuantizedMatrix> quantize_for(const QuantizeSpec& spec, const Tensor& w);

// The tensors of one module (`module` without ".weight"), named as the format names
// them. GPTQ: checkpoint_format "gptq" (stored zeros minus one), f16 scales, and g_idx
// (so each module keeps its own group size). AWQ: gemm layout, f16 scales, 4 bits,
// group size fixed by the config. FP8: `weight` + f32 `weight_scale_inv`. Throws
// InvalidArgument for a matrix the format cannot hold (a perm, other bits).
NamedTensors gptq_tensors(const std::string& module, const QuantizedMatrix& m);
NamedTensors awq_tensors(const std::string& module, const QuantizedMatrix& m);
NamedTensors fp8_tensors(const std::string& module, const QuantizedMatrix& m);

// config.json's quantization_config for spec.
Json quantization_config_json(const QuantizeSpec& spec);

struct QuantizeSummary {
  uint64_t matrices = 0;   // modules quantized
  uint64_t bytes_in = 0;   // their dense bytes
  uint64_t bytes_out = 0;  // their quantized bytes
};

// Reads the 16-bit checkpoint in in_dir, quantizes every decoder linear (not the
// embeddings, norms, the MoE router or the lm_head) under spec, and writes out_dir:
// model.safetensors, config.json with its quantization_config, and the other files of
// in_dir (tokenizer, generation config) copied. out_dir must differ from in_dir.
QuantizeSummary quantize_model(const std::string& in_dir, const std::string& out_dir,
                               const QuantizeSpec& spec, const std::string& model_type = "");

}  // namespace tachyon
