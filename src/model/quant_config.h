// A checkpoint's quantization: config.json's `quantization_config` (or a
// quantize_config.json beside it) parsed into one struct. Which modules are quantized
// and how; the readers in model/quant_formats.h turn their tensors into QuantizedMatrix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"

namespace tachyon {

enum class QuantMethod : uint8_t { kNone, kGptq, kAwq, kFp8, kCompressedTensors };

// The compressed-tensors serialisations of quantized weights.
enum class CtFormat : uint8_t {
  kFloatQuantized,  // `weight` f8_e4m3 + `weight_scale`
  kPackQuantized,   // `weight_packed` i32 (signed values offset, packed along k)
  kNaiveQuantized,  // `weight` i8 (signed) + `weight_scale` (also "int-quantized")
};

enum class CtStrategy : uint8_t { kTensor, kChannel, kGroup, kBlock };

// One compressed-tensors scheme (a config group's `weights`).
struct CtScheme {
  std::vector<std::string> targets;  // "Linear", a module name, or "re:<regex>"
  bool is_float = false;             // type "float" (fp8) or "int"
  int32_t bits = 8;
  CtStrategy strategy = CtStrategy::kChannel;
  int64_t group_size = 0;  // kGroup
  int64_t block_n = 0;     // kBlock: block_structure [bn, bk]
  int64_t block_k = 0;
  bool symmetric = true;
};

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  // GPTQ and AWQ.
  int32_t bits = 0;
  int64_t group_size = -1;  // -1: per channel
  // GPTQ.
  bool desc_act = false;
  bool sym = true;
  bool gptq_v1 = true;   // checkpoint_format "gptq": the stored zeros are zero - 1
  bool lm_head = false;  // the lm_head is quantized too
  // AWQ.
  bool zero_point = true;
  bool awq_gemv = false;                            // version "gemv" (else "gemm")
  std::vector<std::string> modules_to_not_convert;  // substrings of module names
  // FP8 (quant_method fp8): block [block_n, block_k]; 0 x 0: one scale per tensor.
  int64_t block_n = 0;
  int64_t block_k = 0;
  bool dynamic_activations = true;  // activation_scheme "dynamic" (else "static")
  // compressed-tensors.
  CtFormat ct_format = CtFormat::kFloatQuantized;
  std::vector<CtScheme> ct_schemes;
  std::vector<std::string> ignore;  // module names, or "re:<regex>"

  bool enabled() const { return method != QuantMethod::kNone; }
  // The compressed-tensors scheme of a module (its name without ".weight"), or null
  // when no group targets it or it is ignored. `module` is a linear layer's name.
  const CtScheme* ct_scheme(const std::string& module) const;
  // Whether the config quantizes `module` (ignore lists, modules_to_not_convert and
  // GPTQ's lm_head flag applied; `is_lm_head` marks the output head).
  bool quantizes(const std::string& module, bool is_lm_head) const;
  // "gptq int4 g128 sym act-order v1", for logs and `tachyon inspect`.
  std::string str() const;
  Json to_json() const;
};

std::string_view quant_method_name(QuantMethod method);

// Parses a `quantization_config` object (`source` names it in errors: every field is
// type-checked and a wrong one is named). Throws InvalidArgument.
QuantConfig parse_quant_config(const Json& json, const std::string& source);

// The quantization of a model: config.json's `quantization_config`, else the file at
// quantize_config_path when given and present (older GPTQ checkpoints keep it in
// quantize_config.json beside config.json), else none.
QuantConfig read_quant_config(const Json& config, const std::string& config_source,
                              const std::string& quantize_config_path = "");

}  // namespace tachyon
