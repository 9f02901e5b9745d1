// Reading Hugging Face config.json / generation_config.json: typed field access with
// errors that name the field, and the pieces every family mapping shares (rope in
// both spellings, special tokens, dtype, activation names, layer types).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "core/json.h"
#include "model/config.h"

namespace tachyon {

using FieldNames = std::initializer_list<std::string_view>;

class HfConfig {
 public:
  // `source` names the file in error messages.
  HfConfig(Json json, std::string source);
  static HfConfig load(const std::string& path);

  const Json& json() const { return json_; }
  const std::string& source() const { return source_; }

  // The first of `names` present with a non-null value (nullptr if none).
  const Json* find(FieldNames names) const;
  bool has(FieldNames names) const { return find(names) != nullptr; }

  // Typed getters: nullopt when absent; InvalidArgument naming the field on a wrong
  // type or value. Integers accept integral floats (2048.0).
  std::optional<int64_t> get_int(FieldNames names) const;
  std::optional<double> get_double(FieldNames names) const;
  std::optional<bool> get_bool(FieldNames names) const;
  std::optional<std::string> get_string(FieldNames names) const;

  int64_t int_or(FieldNames names, int64_t fallback) const {
    return get_int(names).value_or(fallback);
  }
  double double_or(FieldNames names, double fallback) const {
    return get_double(names).value_or(fallback);
  }
  bool bool_or(FieldNames names, bool fallback) const { return get_bool(names).value_or(fallback); }

  // A required size: present and > 0 (>= 0 with allow_zero); else InvalidArgument
  // naming the field.
  int64_t require_size(FieldNames names, bool allow_zero = false) const;
  // An optional size: absent -> fallback; present -> must be > 0 (>= 0 with allow_zero).
  int64_t size_or(FieldNames names, int64_t fallback, bool allow_zero = false) const;

  // A sub-object (e.g. MPT's attn_config) as its own reader; empty when absent.
  HfConfig sub(std::string_view name) const;

 private:
  std::string field_list(FieldNames names) const;
  Json json_;
  std::string source_;
};

// Parses an activation name (hidden_act / activation_function / hidden_activation).
Activation parse_activation(const std::string& name, const HfConfig& cfg, std::string_view field);

// Special tokens, dtype (torch_dtype / dtype), tie_word_embeddings.
void read_common(const HfConfig& cfg, ModelConfig& mc, bool tie_default);

// Rotary parameters from rope_parameters (new spelling) or rope_theta + rope_scaling
// (classic spelling), partial_rotary_factor, original_max_position_embeddings.
// `head_dim` and `max_position` are already mapped; `default_partial` is the family's
// partial_rotary_factor default.
void read_rope(const HfConfig& cfg, ModelConfig& mc, double theta_default, double default_partial,
               std::initializer_list<std::string_view> theta_names = {"rope_theta"});

// layer_types (per-layer "sliding_attention"/"full_attention") when present.
// Returns false when the config has none.
bool read_layer_types(const HfConfig& cfg, ModelConfig& mc);

// Head size from `head_dim` when given, else hidden / heads (which must divide).
int32_t head_dim_of(const HfConfig& cfg, int64_t hidden, int64_t heads,
                    std::string_view hidden_field, std::string_view heads_field,
                    FieldNames head_dim_names = {"head_dim"});

// A pruned model's per-layer shapes, RTP-LLM's lists: layer_head_num, layer_head_num_kv
// and layer_inter_size ([layer_num] non-negative integers each; 0 heads: no attention, 0
// intermediate: no MLP), read from `sparse_config_path` when not empty (a JSON file that
// replaces config.json's lists; it may carry layer_num, which must match), else from
// config.json. Without layer_head_num_kv a layer keeps ModelConfig::kv_heads's default:
// its heads as KV heads in a model without grouping, else head_num_kv. InvalidArgument
// naming the file and field on a list that is not one; NotFound for a missing file.
void read_layer_shapes(const HfConfig& cfg, const std::string& sparse_config_path, ModelConfig& mc);

// generation_config.json: eos (int or list) / bos / pad override the config's, and the
// default sampling parameters. Missing file: nothing changes.
void apply_generation_config(const std::string& path, ModelConfig& mc);

// A checked narrowing to int32 naming the field.
int32_t to_i32(int64_t v, std::string_view field);

}  // namespace tachyon
