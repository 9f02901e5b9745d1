// Quantized checkpoints written and read back: a random 16-bit model quantized to each
// format, loaded through load_weights, every decoder linear compared with the
// quantization of its dense weight, and the packed tensors checked against the format's
// packing rule written out here.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/quant_writer.h"
#include "model/random_model.h"
#include "model/registry.h"
#include "model/weights.h"

namespace tachyon {
namespace {

namespace fs = std::filesystem;

const char* kLlama = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 128,
  "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 64,
  "tie_word_embeddings": false})";

const char* kMixtral = R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 128,
  "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 64,
  "num_local_experts": 4, "num_experts_per_tok": 2})";

const char* kQwen2Moe = R"({"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 128,
  "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 64,
  "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
  "shared_expert_intermediate_size": 256})";

class QuantWriter : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tachyon_quant_writer_" + std::to_string(::getpid()));
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A random bf16 model for `config` in root/dense (with a tokenizer file to copy).
  fs::path dense(const char* config) {
    const fs::path cfg = root_ / "config.json";
    std::ofstream(cfg) << config;
    const fs::path dir = root_ / "dense";
    write_random_model(cfg.string(), dir.string(), {});
    std::ofstream(dir / "tokenizer.json") << "{}";
    return dir;
  }

  // Quantizes dense into root/<name>, loads both and checks every matrix.
  void round_trip(const fs::path& in, const QuantizeSpec& spec, const std::string& name) {
    const fs::path out = root_ / name;
    const QuantizeSummary sum = quantize_model(in.string(), out.string(), spec);
    EXPECT_GT(sum.matrices, 0u);
    EXPECT_LT(sum.bytes_out, sum.bytes_in);
    EXPECT_TRUE(fs::exists(out / "tokenizer.json"));
    const HfConfig cfg = HfConfig::load((out / "config.json").string());
    const ModelConfig mc = map_model_config(cfg, "");
    ASSERT_TRUE(mc.quant.enabled());
    const WeightMap map = find_arch(cfg, "").map_weights(mc);
    auto qckpt = Checkpoint::open(out.string());
    auto dckpt = Checkpoint::open(in.string());
    const ModelWeights qw = load_weights(*qckpt, mc, map);
    uint64_t checked = 0;
    for (const WeightRecord& r : qw.records) {
      if (r.storage == "bf16" || r.storage == "f32") continue;
      // The module's dense weight, quantized here the same way.
      const Tensor d = dckpt->get(r.tensor + ".weight");
      auto want = quantize_for(spec, d);
      if (want->scheme == QuantScheme::kInt) {
        // The formats store f16 scales.
        want->scales = want->scales.to(DType::kF16).to(DType::kF32);
      }
      const Tensor got_t = find_slot(qw, r.slot);
      const QuantizedMatrix* got = quantized(got_t);
      ASSERT_NE(got, nullptr) << r.slot;
      const Tensor a = dequantize(*got), b = dequantize(*want);
      ASSERT_EQ(a.shape(), b.shape()) << r.slot;
      ASSERT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << r.slot << " " << got->str();
      check_packing(*qckpt, r.tensor, *want, spec);
      ++checked;
    }
    EXPECT_EQ(checked, sum.matrices);
    // The embedding, the lm_head and the router stay dense.
    EXPECT_EQ(quantized(qw.embedding), nullptr);
    EXPECT_EQ(quantized(qw.lm_head.w), nullptr);
    for (const LayerWeights& l : qw.layers)
      if (l.router.w) EXPECT_EQ(quantized(l.router.w), nullptr);
  }

  static Tensor find_slot(const ModelWeights& w, const std::string& slot) {
    for (size_t l = 0; l < w.layers.size(); ++l) {
      const LayerWeights& L = w.layers[l];
      const std::string p = "layers." + std::to_string(l) + ".";
      const std::pair<const char*, const Tensor*> named[] = {{"attn_q", &L.q.w},
                                                             {"attn_k", &L.k.w},
                                                             {"attn_v", &L.v.w},
                                                             {"attn_o", &L.o.w},
                                                             {"ffn_gate", &L.gate.w},
                                                             {"ffn_up", &L.up.w},
                                                             {"ffn_down", &L.down.w},
                                                             {"shared_gate", &L.shared_gate.w},
                                                             {"shared_up", &L.shared_up.w},
                                                             {"shared_down", &L.shared_down.w}};
      for (const auto& [n, t] : named)
        if (slot == p + n) return *t;
      for (size_t e = 0; e < L.experts.size(); ++e) {
        const std::string pe = p + "experts." + std::to_string(e) + ".";
        if (slot == pe + "expert_gate") return L.experts[e].gate;
        if (slot == pe + "expert_up") return L.experts[e].up;
        if (slot == pe + "expert_down") return L.experts[e].down;
      }
    }
    ADD_FAILURE() << "no slot " << slot;
    return {};
  }

  static uint32_t value(const QuantizedMatrix& m, int64_t i, int64_t j) {
    const auto* row = m.q.data<uint8_t>() + i * (m.k * m.bits / 8);
    return m.bits == 8 ? row[j] : (j & 1) ? row[j >> 1] >> 4 : row[j >> 1] & 0xf;
  }

  // The stored tensors unpacked by the format's rule equal the matrix's values.
  static void check_packing(const Checkpoint& ck, const std::string& module,
                            const QuantizedMatrix& m, const QuantizeSpec& spec) {
    if (spec.format == QuantFormat::kFp8) {
      const Tensor w = ck.get(module + ".weight");
      ASSERT_EQ(w.dtype(), DType::kF8E4M3);
      ASSERT_EQ(std::memcmp(w.raw(), m.q.raw(), m.q.nbytes()), 0) << module;
      const Tensor s = ck.get(module + ".weight_scale_inv");
      ASSERT_EQ(s.shape(), m.scales.shape());
      return;
    }
    const Tensor qw = ck.get(module + ".qweight"), qz = ck.get(module + ".qzeros");
    const auto* w = qw.data<int32_t>();
    const auto* z = qz.data<int32_t>();
    const int64_t n = m.n, k = m.k, g = m.groups();
    if (spec.format == QuantFormat::kGptq) {
      const int pack = 32 / m.bits;
      const uint32_t mask = (1u << m.bits) - 1;
      ASSERT_EQ(qw.shape(), (Shape{k / pack, n}));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < k; ++j)
          ASSERT_EQ((static_cast<uint32_t>(w[(j / pack) * n + i]) >> (m.bits * (j % pack))) & mask,
                    value(m, i, j));
      for (int64_t gi = 0; gi < g; ++gi)
        for (int64_t i = 0; i < n; ++i) {
          const uint32_t stored =
              (static_cast<uint32_t>(z[gi * (n / pack) + i / pack]) >> (m.bits * (i % pack))) &
              mask;
          ASSERT_EQ((stored + 1) & mask, m.zeros.data<uint8_t>()[i * g + gi]);  // v1: zero - 1
        }
      const Tensor gi = ck.get(module + ".g_idx");
      for (int64_t j = 0; j < k; ++j) ASSERT_EQ(gi.data<int32_t>()[j], j / m.group_size);
      return;
    }
    // AWQ gemm: column i of word (j, i / 8) in nibble p where order[p] == i % 8.
    const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    ASSERT_EQ(qw.shape(), (Shape{k, n / 8}));
    for (int64_t j = 0; j < k; ++j)
      for (int64_t c = 0; c < n / 8; ++c)
        for (int p = 0; p < 8; ++p)
          ASSERT_EQ((static_cast<uint32_t>(w[j * (n / 8) + c]) >> (4 * p)) & 0xf,
                    value(m, c * 8 + order[p], j));
    for (int64_t gi = 0; gi < g; ++gi)
      for (int64_t c = 0; c < n / 8; ++c)
        for (int p = 0; p < 8; ++p)
          ASSERT_EQ((static_cast<uint32_t>(z[gi * (n / 8) + c]) >> (4 * p)) & 0xf,
                    m.zeros.data<uint8_t>()[(c * 8 + order[p]) * g + gi]);
  }

  fs::path root_;
};

TEST_F(QuantWriter, Int4Int8Fp8AndAwqRoundTrip) {
  const fs::path in = dense(kLlama);
  round_trip(in, *quantize_method_spec("int4"), "int4");
  round_trip(in, *quantize_method_spec("int8"), "int8");
  round_trip(in, *quantize_method_spec("fp8"), "fp8");
  round_trip(in, *quant_format_spec("awq"), "awq");
}

TEST_F(QuantWriter, MoeExpertsRoundTrip) {
  const fs::path in = dense(kMixtral);
  round_trip(in, *quantize_method_spec("int4"), "int4");
  round_trip(in, *quantize_method_spec("fp8"), "fp8");
  fs::remove_all(in);
  // Qwen2-MoE naming, with a shared expert.
  const fs::path qin = dense(kQwen2Moe);
  round_trip(qin, *quantize_method_spec("int8"), "qwen_int8");
  round_trip(qin, *quant_format_spec("awq"), "qwen_awq");
}

TEST_F(QuantWriter, Int4FallsBackToPerChannelWhere128DoesNotDivide) {
  QuantizeSpec spec = *quantize_method_spec("int4");
  EXPECT_EQ(group_size_for(spec, 256), 128);
  EXPECT_EQ(group_size_for(spec, 96), 96);
  spec = *quantize_method_spec("int8");
  EXPECT_EQ(group_size_for(spec, 256), 256);
}

TEST_F(QuantWriter, ALoadedModuleContradictingTheModelIsNamed) {
  const fs::path in = dense(kLlama), q = root_ / "q", bad = root_ / "bad";
  quantize_model(in.string(), q.string(), *quantize_method_spec("int4"));
  auto ck = Checkpoint::open(q.string());
  const std::string victim = "model.layers.1.self_attn.k_proj.qweight";
  NamedTensors tensors;
  for (const std::string& name : ck->names())
    tensors.emplace_back(name, name == victim ? Tensor::zeros({8, 128}, DType::kI32)  // n 64
                                              : ck->get(name));
  fs::create_directories(bad);
  write_safetensors((bad / "model.safetensors").string(), tensors);
  fs::copy_file(q / "config.json", bad / "config.json");
  const HfConfig cfg = HfConfig::load((bad / "config.json").string());
  const ModelConfig mc = map_model_config(cfg, "");
  auto bck = Checkpoint::open(bad.string());
  try {
    load_weights(*bck, mc, find_arch(cfg, "").map_weights(mc));
    ADD_FAILURE() << "loaded a contradicting qweight";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(victim), std::string::npos) << e.what();
  }
}

TEST_F(QuantWriter, AQuantizedModuleNeedingALayoutTransformIsRefused) {
  // GPT-NeoX stores q/k/v per head: the loader reorders the dense rows, which a
  // quantized module cannot take.
  const fs::path in = dense(R"({"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 128,
    "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 4,
    "vocab_size": 64, "max_position_embeddings": 64})");
  auto ck = Checkpoint::open(in.string());
  const std::string qkv = "gpt_neox.layers.0.attention.query_key_value";
  ASSERT_TRUE(ck->contains(qkv + ".weight"));
  const QuantizeSpec spec = *quantize_method_spec("int8");
  NamedTensors tensors;
  for (const std::string& name : ck->names())
    if (name != qkv + ".weight") tensors.emplace_back(name, ck->get(name));
  for (auto& t : gptq_tensors(qkv, *quantize_for(spec, ck->get(qkv + ".weight"))))
    tensors.push_back(t);
  const fs::path out = root_ / "neox";
  fs::create_directories(out);
  write_safetensors((out / "model.safetensors").string(), tensors);
  Json cfg_json = HfConfig::load((in / "config.json").string()).json();
  cfg_json["quantization_config"] = quantization_config_json(spec);
  std::ofstream(out / "config.json") << cfg_json.dump();
  const HfConfig cfg = HfConfig::load((out / "config.json").string());
  const ModelConfig mc = map_model_config(cfg, "");
  auto qck = Checkpoint::open(out.string());
  try {
    load_weights(*qck, mc, find_arch(cfg, "").map_weights(mc));
    ADD_FAILURE() << "loaded a quantized per-head qkv";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layout transform"), std::string::npos) << e.what();
  }
  // quantize leaves that module dense, and its output loads.
  const fs::path q = root_ / "neox_q";
  quantize_model(in.string(), q.string(), spec);
  auto qq = Checkpoint::open(q.string());
  EXPECT_TRUE(qq->contains(qkv + ".weight"));
  const HfConfig qcfg = HfConfig::load((q / "config.json").string());
  const ModelConfig qmc = map_model_config(qcfg, "");
  const ModelWeights w = load_weights(*qq, qmc, find_arch(qcfg, "").map_weights(qmc));
  EXPECT_EQ(quantized(w.layers[0].qkv.w), nullptr);
  EXPECT_NE(quantized(w.layers[0].o.w), nullptr);
}

TEST_F(QuantWriter, RefusesBadRequests) {
  const fs::path in = dense(kLlama);
  EXPECT_THROW(quantize_model(in.string(), in.string(), *quantize_method_spec("int4")),
               InvalidArgument);
  const fs::path q = root_ / "q";
  quantize_model(in.string(), q.string(), *quantize_method_spec("int4"));
  // An already quantized checkpoint is refused.
  EXPECT_THROW(quantize_model(q.string(), (root_ / "qq").string(), *quantize_method_spec("int8")),
               InvalidArgument);
  EXPECT_FALSE(quantize_method_spec("int3"));
  EXPECT_FALSE(quant_format_spec("exl2"));
}

}  // namespace
}  // namespace tachyon
