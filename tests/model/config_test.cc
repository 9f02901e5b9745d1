// Config mapping: both config.json spellings, generation_config.json, rope scaling
// formulas (transcribed from transformers' modeling_rope_utils), ALiBi slopes, and
// refusal of bad configs with the field named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "core/error.h"
#include "model/hf_config.h"
#include "model/loader.h"
#include "model/model_test_util.h"
#include "model/registry.h"
#include "model/rope.h"

namespace tachyon {
namespace {

using testing_util::expect_invalid;
using testing_util::map;

Json llama_json() {
  return Json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "eos_token_id": 2, "bos_token_id": 1})");
}

TEST(ConfigMapping, LlamaFieldsAndDefaults) {
  ModelConfig mc = map(llama_json());
  EXPECT_EQ(mc.family, "llama");
  EXPECT_EQ(mc.head_num, 4);
  EXPECT_EQ(mc.head_num_kv, 2);
  EXPECT_EQ(mc.size_per_head, 16);
  EXPECT_EQ(mc.inter_size, 176);
  EXPECT_EQ(mc.rope.dim, 16);
  EXPECT_EQ(mc.rope.theta, 10000.0);
  EXPECT_EQ(mc.activation, Activation::kSilu);
  EXPECT_EQ(mc.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(mc.bos_token_id, 1);
}

TEST(ConfigMapping, BothRopeSpellingsAgree) {
  Json classic = llama_json();
  classic["rope_theta"] = 500000.0;
  classic["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  classic["torch_dtype"] = "bfloat16";
  Json modern = llama_json();
  modern["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 500000.0}};
  modern["dtype"] = "bfloat16";
  ModelConfig a = map(classic), b = map(modern);
  for (const ModelConfig* m : {&a, &b}) {
    EXPECT_EQ(m->rope.type, RopeType::kLinear);
    EXPECT_EQ(m->rope.factor, 2.0);
    EXPECT_EQ(m->rope.theta, 500000.0);
    EXPECT_EQ(m->dtype, DType::kBF16);
  }
}

TEST(ConfigMapping, PartialRotaryAndOriginalMaxPositions) {
  Json j = llama_json();
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"partial_rotary_factor", 0.5}};
  ModelConfig mc = map(j);
  EXPECT_EQ(mc.rope.dim, 8);
  EXPECT_EQ(mc.rope.original_max_position, 256);  // falls back to max_position_embeddings
  j["original_max_position_embeddings"] = 64;     // top level wins (Phi-3 style)
  j["rope_parameters"]["original_max_position_embeddings"] = 128;
  EXPECT_EQ(map(j).rope.original_max_position, 64);
}

TEST(ConfigMapping, GenerationConfigOverridesEos) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "tachyon_gen_cfg_test";
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "generation_config.json");
    f << R"({"eos_token_id": [2, 7], "bos_token_id": 1, "temperature": 0.6, "top_p": 0.9, "do_sample": true})";
  }
  ModelConfig mc = map_model_config(HfConfig(llama_json(), "config.json"), "",
                                    (dir / "generation_config.json").string());
  EXPECT_EQ(mc.eos_token_ids, (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(mc.generation.temperature, 0.6);
  EXPECT_EQ(mc.generation.top_p, 0.9);
  EXPECT_EQ(mc.generation.do_sample, true);
  {
    std::ofstream f(dir / "generation_config.json");
    f << R"({"eos_token_id": 5})";
  }
  mc = map_model_config(HfConfig(llama_json(), "config.json"), "",
                        (dir / "generation_config.json").string());
  EXPECT_EQ(mc.eos_token_ids, std::vector<int64_t>{5});
  fs::remove_all(dir);
}

TEST(ConfigMapping, BadConfigsNameTheField) {
  Json j = llama_json();
  j["num_attention_heads"] = 0;
  expect_invalid([&] { map(j); }, {"num_attention_heads"});
  j = llama_json();
  j["num_attention_heads"] = 5;  // 64 % 5 != 0 and no head_dim
  j["num_key_value_heads"] = 5;
  expect_invalid([&] { map(j); }, {"hidden_size", "num_attention_heads", "head_dim"});
  j["head_dim"] = 16;  // explicit head_dim makes it valid
  EXPECT_EQ(map(j).size_per_head, 16);
  j = llama_json();
  j["intermediate_size"] = -4;
  expect_invalid([&] { map(j); }, {"intermediate_size"});
  j = llama_json();
  j.erase("vocab_size");
  expect_invalid([&] { map(j); }, {"vocab_size"});
  j = llama_json();
  j["hidden_size"] = "big";
  expect_invalid([&] { map(j); }, {"hidden_size"});
  j = llama_json();
  j["num_key_value_heads"] = 3;
  expect_invalid([&] { map(j); }, {"head_num_kv"});
  j = llama_json();
  j["rope_scaling"] = {{"type", "linear"}};
  expect_invalid([&] { map(j); }, {"factor"});
  j = llama_json();
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", {1.0, 1.0}}, {"long_factor", {1.0}}};
  expect_invalid([&] { map(j); }, {"short_factor"});
  j = llama_json();
  j["hidden_act"] = "swoosh";
  expect_invalid([&] { map(j); }, {"hidden_act", "swoosh"});
  // Sizes past 32 bits are refused, not truncated (4294967301 once became a context of 5).
  for (int64_t big : {int64_t{4294967301}, int64_t{1} << 62, int64_t{2147483648}}) {
    j = llama_json();
    j["max_position_embeddings"] = big;
    expect_invalid([&] { map(j); }, {"max_position_embeddings", "2147483647"});
  }
  j = llama_json();
  j["vocab_size"] = int64_t{1} << 40;
  expect_invalid([&] { map(j); }, {"vocab_size"});
  j = llama_json();
  j["max_position_embeddings"] = 2147483647;  // the largest that fits is taken
  EXPECT_EQ(map(j).max_seq_len, 2147483647);
  Json bloom =
      Json::parse(R"({"architectures": ["BloomForCausalLM"], "hidden_size": 64, "n_head": 0,
                               "n_layer": 2, "vocab_size": 512})");
  expect_invalid([&] { map(bloom); }, {"n_head"});
}

TEST(ConfigMapping, UnknownArchitectureListsSupported) {
  Json j = llama_json();
  j["architectures"] = {"WeirdForCausalLM"};
  j["model_type"] = "weird";
  expect_invalid([&] { map(j); },
                 {"WeirdForCausalLM", "LlamaForCausalLM", "GPT2LMHeadModel", "GlmForCausalLM"});
  // The override picks the family regardless of the config's names.
  EXPECT_EQ(map(j, "llama").family, "llama");
  EXPECT_EQ(map(j, "LlamaForCausalLM").family, "llama");
  expect_invalid([&] { map(j, "nonsense"); }, {"nonsense", "MistralForCausalLM"});
  // Falls back to model_type when the architecture is unknown.
  j["model_type"] = "llama";
  EXPECT_EQ(map(j).family, "llama");
}

TEST(ConfigMapping, AquilaIsLlama) {
  for (const char* a : {"AquilaForCausalLM", "AquilaModel", "Aquila2ForCausalLM"}) {
    Json j = llama_json();
    j["architectures"] = {a};
    j["model_type"] = "aquila";
    EXPECT_EQ(map(j).family, "llama") << a;
  }
}

TEST(ConfigMapping, EverySupportedNameResolves) {
  for (const ArchSpec& s : arch_registry()) {
    for (const auto& a : s.architectures) {
      Json j = Json::object();
      j["architectures"] = {a};
      EXPECT_EQ(&find_arch(HfConfig(j, "c"), ""), &s) << a;
    }
  }
}

// ---- rope formulas ------------------------------------------------------------------

RopeConfig base_rope(int32_t dim = 16, double theta = 10000.0) {
  RopeConfig r;
  r.dim = dim;
  r.theta = theta;
  r.max_position_embeddings = 256;
  return r;
}

std::vector<double> default_inv_freq(int32_t dim, double theta) {
  std::vector<double> f;
  for (int32_t i = 0; i < dim; i += 2)
    f.push_back(1.0 / std::pow(theta, static_cast<double>(i) / dim));
  return f;
}

void expect_near_vec(const std::vector<double>& a, const std::vector<double>& b,
                     double rel = 1e-12) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], rel * std::abs(b[i])) << "index " << i;
}

TEST(Rope, DefaultAndLinear) {
  RopeConfig r = base_rope();
  expect_near_vec(rope_frequencies(r, 10).inv_freq, default_inv_freq(16, 10000.0));
  r.type = RopeType::kLinear;
  r.factor = 4.0;
  auto want = default_inv_freq(16, 10000.0);
  for (double& f : want) f /= 4.0;
  auto got = rope_frequencies(r, 10);
  expect_near_vec(got.inv_freq, want);
  EXPECT_EQ(got.attention_factor, 1.0);
  EXPECT_FALSE(rope_length_dependent(r));
}

TEST(Rope, DynamicNtkDependsOnLengthPastMax) {
  RopeConfig r = base_rope();
  r.type = RopeType::kDynamic;
  r.factor = 2.0;
  EXPECT_TRUE(rope_length_dependent(r));
  // Within max_position_embeddings: the default frequencies.
  expect_near_vec(rope_frequencies(r, 100).inv_freq, default_inv_freq(16, 10000.0));
  // Past it: base * ((factor * len / max) - (factor - 1)) ^ (dim / (dim - 2)).
  const double len = 400;
  const double base = 10000.0 * std::pow(2.0 * len / 256 - 1.0, 16.0 / 14.0);
  expect_near_vec(rope_frequencies(r, 400).inv_freq, default_inv_freq(16, base));
}

TEST(Rope, Llama3) {
  RopeConfig r = base_rope(128, 500000.0);
  r.type = RopeType::kLlama3;
  r.factor = 8;
  r.low_freq_factor = 1;
  r.high_freq_factor = 4;
  r.original_max_position = 8192;
  auto got = rope_frequencies(r, 1).inv_freq;
  auto base = default_inv_freq(128, 500000.0);
  const double low_wl = 8192.0 / 1, high_wl = 8192.0 / 4;
  int low = 0, mid = 0, high = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double wl = 2 * std::numbers::pi / base[i];
    double want;
    if (wl < high_wl) {
      want = base[i];
      ++high;
    } else if (wl > low_wl) {
      want = base[i] / 8;
      ++low;
    } else {
      const double smooth = (8192.0 / wl - 1) / (4 - 1);
      want = (1 - smooth) * base[i] / 8 + smooth * base[i];
      ++mid;
    }
    EXPECT_NEAR(got[i], want, 1e-12 * want) << i;
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_GT(high, 0);
}

TEST(Rope, YarnRampAndAttentionFactor) {
  RopeConfig r = base_rope(64, 10000.0);
  r.type = RopeType::kYarn;
  r.factor = 4.0;
  r.original_max_position = 2048;
  auto got = rope_frequencies(r, 1);
  EXPECT_NEAR(got.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-12);
  // Correction range from beta_fast = 32, beta_slow = 1, truncated to integers.
  auto cdim = [](double rot) {
    return 64 * std::log(2048 / (rot * 2 * std::numbers::pi)) / (2 * std::log(10000.0));
  };
  const double low = std::max(std::floor(cdim(32)), 0.0), high = std::min(std::ceil(cdim(1)), 63.0);
  auto base = default_inv_freq(64, 10000.0);
  for (int i = 0; i < 32; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double want = base[i] / 4 * ramp + base[i] * (1 - ramp);
    EXPECT_NEAR(got.inv_freq[i], want, 1e-12 * want) << i;
  }
  // High frequencies are kept, low ones interpolated.
  EXPECT_NEAR(got.inv_freq[0], base[0], 1e-15);
  EXPECT_NEAR(got.inv_freq[31], base[31] / 4, 1e-12 * base[31]);
  // mscale / mscale_all_dim (DeepSeek style) and an explicit attention_factor.
  r.mscale = 1.0;
  r.mscale_all_dim = 0.5;
  EXPECT_NEAR(rope_frequencies(r, 1).attention_factor,
              (0.1 * std::log(4.0) + 1) / (0.05 * std::log(4.0) + 1), 1e-12);
  r.attention_factor = 1.25;
  EXPECT_EQ(rope_frequencies(r, 1).attention_factor, 1.25);
}

TEST(Rope, LongropePicksFactorsByLength) {
  RopeConfig r = base_rope(8, 10000.0);
  r.type = RopeType::kLongrope;
  r.max_position_embeddings = 1024;
  r.original_max_position = 64;
  r.factor = 1024.0 / 64;
  r.short_factor = {1.0, 1.5, 2.0, 3.0};
  r.long_factor = {2.0, 4.0, 8.0, 16.0};
  auto base = default_inv_freq(8, 10000.0);
  auto s = rope_frequencies(r, 64), l = rope_frequencies(r, 65);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(s.inv_freq[i], base[i] / r.short_factor[i], 1e-15);
    EXPECT_NEAR(l.inv_freq[i], base[i] / r.long_factor[i], 1e-15);
  }
  const double want = std::sqrt(1 + std::log(16.0) / std::log(64.0));
  EXPECT_NEAR(s.attention_factor, want, 1e-12);
  EXPECT_NEAR(l.attention_factor, want, 1e-12);
  EXPECT_TRUE(rope_length_dependent(r));
}

TEST(Rope, TableFoldsAttentionFactorIntoCosSin) {
  RopeConfig r = base_rope(8, 10000.0);
  r.type = RopeType::kYarn;
  r.factor = 2.0;
  r.original_max_position = 64;
  RopeTable table(r);
  int32_t pos[2] = {0, 37}, len[2] = {1, 38};
  float out[16];
  table.fill(pos, len, 2, out);
  auto f = rope_frequencies(r, 38);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(out[i], f.attention_factor, 1e-6);
    EXPECT_NEAR(out[4 + i], 0.0, 1e-7);
    EXPECT_NEAR(out[8 + i], std::cos(37 * f.inv_freq[i]) * f.attention_factor, 1e-6);
    EXPECT_NEAR(out[12 + i], std::sin(37 * f.inv_freq[i]) * f.attention_factor, 1e-6);
  }
}

TEST(Alibi, SlopesForNonPowerOfTwoHeads) {
  // Bloom / Falcon, 12 heads: 2^-1 .. 2^-8, then the odd powers of 2^-0.5.
  std::vector<float> want;
  for (int i = 1; i <= 8; ++i) want.push_back(static_cast<float>(std::pow(2.0, -i)));
  for (int i : {1, 3, 5, 7}) want.push_back(static_cast<float>(std::pow(2.0, -0.5 * i)));
  auto got = alibi_slopes(12, AlibiStyle::kBloom, 8);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
  // MPT, 12 heads, alibi_bias_max 16: slopes 2^-i for i = 1..16, odd positions first.
  want.clear();
  for (int i : {2, 4, 6, 8, 10, 12, 14, 16, 1, 3, 5, 7})
    want.push_back(static_cast<float>(std::pow(2.0, -i)));
  got = alibi_slopes(12, AlibiStyle::kMpt, 16);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
  // Powers of two: plain geometric sequences.
  got = alibi_slopes(4, AlibiStyle::kBloom, 8);
  EXPECT_EQ(got, (std::vector<float>{0.25f, 0.0625f, 0.015625f, 0.00390625f}));
}

}  // namespace
}  // namespace tachyon

namespace tachyon {
namespace {

// The GPU's compute dtype when none is asked for follows a float16 checkpoint; "auto"
// leaves it to that rule; anything but bf16/f16/f32 is refused.
TEST(LoadOptions, ComputeDtypeFollowsFloat16Checkpoints) {
  EXPECT_EQ(default_gpu_dtype(DType::kF16), DType::kF16);
  EXPECT_EQ(default_gpu_dtype(DType::kBF16), DType::kBF16);
  EXPECT_EQ(default_gpu_dtype(DType::kF32), DType::kBF16);
  EXPECT_FALSE(parse_compute_dtype("auto").has_value());
  EXPECT_FALSE(parse_compute_dtype("").has_value());
  EXPECT_EQ(parse_compute_dtype("f16"), DType::kF16);
  EXPECT_THROW(parse_compute_dtype("i32"), InvalidArgument);
}

// --kv-cache-dtype: auto (unset), bf16, int8 or fp8; anything else is refused.
TEST(LoadOptions, KvCacheDtype) {
  EXPECT_FALSE(parse_kv_cache_dtype("auto").has_value());
  EXPECT_FALSE(parse_kv_cache_dtype("").has_value());
  EXPECT_EQ(parse_kv_cache_dtype("fp8"), DType::kF8E4M3);
  EXPECT_EQ(parse_kv_cache_dtype("fp8_e4m3"), DType::kF8E4M3);
  EXPECT_EQ(parse_kv_cache_dtype("int8"), DType::kI8);
  EXPECT_EQ(parse_kv_cache_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(parse_kv_cache_dtype("bfloat16"), DType::kBF16);
  for (const char* bad : {"int4", "f16", "float16", "BF16 ", "fp8_e5m2", "1"})
    EXPECT_THROW(parse_kv_cache_dtype(bad), InvalidArgument) << bad;
}

}  // namespace
}  // namespace tachyon
