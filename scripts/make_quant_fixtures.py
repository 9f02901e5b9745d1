#!/usr/bin/env python3
"""Creates the quantized conformance fixtures: tiny checkpoints (2 layers, hidden 64,
vocab 512) in the layouts the hub's quantization tools write, with float64 Hugging Face
references, under tests/conformance/fixtures/quant/<name>/ (README.md there).

    python3 scripts/make_quant_fixtures.py [--out DIR] [--only NAME ...] [--reference HOW]
    python3 scripts/make_quant_fixtures.py --check [--out DIR] [--only NAME ...] [--reference HOW]
    python3 scripts/make_quant_fixtures.py --dense DIR [--only NAME ...]

Each variant's integers (or float8 values) and scales are seeded random draws (numpy's
PCG64, seeded with crc32 of the variant's name), packed by this script's writers of
each format, and stored inline in the fixture's weights.json; its float tensors
(embeddings, norms, biases, routers, unquantized modules) are seeded normal streams as in
the dense fixtures (scripts/fixture_weights.py). config.json holds the format's
quantization_config as the tool that writes the format spells it.

The reference of a fixture is the same architecture in float64 with every quantized
weight replaced by its dequantized value (the format's own formula): the checkpoint the
manifest builds is read back with readers written apart from the writers, the weights
dequantized, checked equal to the values the draws define, saved as a float64 dense
checkpoint and loaded by scripts/make_fixtures.py's loader (float64, eager attention),
which must hold exactly those weights. Activations are not quantized in the reference
(a static input_scale is carried only). Prompt logits at every position and 10 greedy
tokens by full recomputation, with make_fixtures.py's functions, as for the dense
fixtures.

--reference transformers (the default) needs torch and transformers, as make_fixtures.py
does; --reference port computes the same with a float64 numpy port of the three
architectures (numpy only), first checked against transformers' references of the dense
llama, qwen2 and mixtral fixtures (logits within 2e-6, greedy tokens identical); none
writes config.json and weights.json only. --check rebuilds every fixture from its files
and compares: the manifest's checksums, the recipe, the round trip, and the logits (within
2e-6) and greedy tokens that HOW computes against the stored reference. --dense DIR
writes each fixture as a dense float32 checkpoint of its dequantized weights with the
same references (put beside the fixtures under another name, as quant/dense_NAME, the
quantized conformance test runs on it through the dense loading path).

Prompts of 1, 5 and 10 tokens are redrawn until every greedy step's top-1 minus top-2
margin is at least 4e-3 (twice the test's tolerance; reference.json's prompt_draw).
"""

import argparse
import base64
import functools
import json
import math
import os
import shutil
import struct
import sys
import zlib

import numpy as np

sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
import fixture_weights as fw  # noqa: E402  (scripts/, next to this file)

VOCAB = 512
NUM_NEW = 10
PROMPT_LENGTHS = (1, 5, 10)
# Prompts are redrawn (up to MAX_DRAWS times) until every greedy step's top-1 minus top-2
# margin reaches twice the conformance test's logit tolerance.
MIN_MARGIN = 4e-3
MAX_DRAWS = 32
QUANT_DIR = os.path.join(fw.FIXTURES, "quant")

COMMON = {"vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2}
LLAMA = dict(COMMON, tie_word_embeddings=False, hidden_size=64, intermediate_size=96,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
             hidden_act="silu")
ARCHS = {
    "llama": ("LlamaForCausalLM", LLAMA),
    "llama128": ("LlamaForCausalLM", dict(LLAMA, intermediate_size=128)),
    "llama176": ("LlamaForCausalLM", dict(LLAMA, intermediate_size=176)),
    "qwen2": ("Qwen2ForCausalLM", dict(LLAMA, use_sliding_window=False)),
    "mixtral": ("MixtralForCausalLM", dict(LLAMA, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                                           sliding_window=None)),
}
MODEL_TYPE = {"llama": "llama", "llama128": "llama", "llama176": "llama", "qwen2": "qwen2", "mixtral": "mixtral"}


# ---- the architecture's tensors ------------------------------------------------------

def linears(arch, cfg):
    """(module name, out, in) of every linear a quantizer converts, in name order."""
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    hd = h // cfg["num_attention_heads"]
    kv = hd * cfg["num_key_value_heads"]
    out = []
    for layer in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        out += [(p + "self_attn.q_proj", h, h), (p + "self_attn.k_proj", kv, h),
                (p + "self_attn.v_proj", kv, h), (p + "self_attn.o_proj", h, h)]
        if arch == "mixtral":
            for e in range(cfg["num_local_experts"]):
                q = p + "block_sparse_moe.experts.%d." % e
                out += [(q + "w1", i, h), (q + "w2", h, i), (q + "w3", i, h)]
        else:
            out += [(p + "mlp.gate_proj", i, h), (p + "mlp.up_proj", i, h), (p + "mlp.down_proj", h, i)]
    return sorted(out)


def float_tensors(arch, cfg):
    """name -> (shape, kind, std) of the tensors no quantizer converts (the dense
    fixtures' draws: embeddings N(0, 1), matrices N(0, 1/fan_in), norms 1 + N(0, 0.01),
    biases N(0, 0.01))."""
    h = cfg["hidden_size"]
    t = {"model.embed_tokens.weight": ([VOCAB, h], "scaled", 1.0),
         "model.norm.weight": ([h], "norm", None),
         "lm_head.weight": ([VOCAB, h], "scaled", 1.0 / math.sqrt(h))}
    for layer in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        t[p + "input_layernorm.weight"] = ([h], "norm", None)
        t[p + "post_attention_layernorm.weight"] = ([h], "norm", None)
        if arch == "mixtral":
            t[p + "block_sparse_moe.gate.weight"] = ([cfg["num_local_experts"], h], "scaled", 1.0 / math.sqrt(h))
    if arch == "qwen2":
        for name, n, _ in linears(arch, cfg):
            if name.endswith(("q_proj", "k_proj", "v_proj")):
                t[name + ".bias"] = ([n], "scaled", 0.1)
    return t


# ---- float8 e4m3 ---------------------------------------------------------------------

def e4m3_table():
    """The value of every e4m3 (fn) byte; NaN for 0x7f and 0xff."""
    c = np.arange(256)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e, m = (c >> 3) & 0xF, c & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v = sign * v
    v[[0x7F, 0xFF]] = np.nan
    return v


E4M3 = e4m3_table()


def round_to(x, dtype):
    """x (float64) rounded to a stored float dtype, back in float64."""
    if dtype == "F16":
        return x.astype(np.float16).astype(np.float64)
    if dtype == "BF16":
        bits = fw.to_bf16_bits(x.astype(np.float32)).astype(np.uint32) << np.uint32(16)
        return bits.view(np.float32).astype(np.float64)
    if dtype == "F32":
        return x.astype(np.float32).astype(np.float64)
    raise ValueError(dtype)


def float_bytes(x, dtype):
    return fw.cast_bytes(np.asarray(x, dtype=np.float32).ravel(), dtype)


# ---- the draws ------------------------------------------------------------------------

class IntMatrix:
    """Unsigned q [n, k] of `bits` bits, zeros and scales [n, G], g_idx [k] (the group of
    each column): w[i, j] = (q[i, j] - zeros[i, g_idx[j]]) * scales[i, g_idx[j]]."""

    def __init__(self, rng, n, k, bits, group, sym, scale_dtype, act_order=False):
        self.n, self.k, self.bits = n, k, bits
        self.group = k if group == -1 else group
        groups = k // self.group
        top = 1 << bits
        self.q = rng.integers(0, top, size=(n, k))
        if sym:
            self.zeros = np.full((n, groups), top // 2)
        else:  # around the middle, never 0 (GPTQ v1 stores zero - 1)
            spread = max(1, top // 8)
            self.zeros = top // 2 + rng.integers(-spread, spread + 1, size=(n, groups))
        spread_q = top / math.sqrt(12.0)
        base = 1.0 / (math.sqrt(k) * spread_q)
        self.scales = round_to(base * np.exp(0.25 * rng.standard_normal((n, groups))), scale_dtype)
        if act_order:  # GPTQ's desc_act: groups follow a column permutation
            perm = rng.permutation(k)
            self.g_idx = np.empty(k, dtype=np.int64)
            self.g_idx[perm] = np.arange(k) // self.group
        else:
            self.g_idx = np.arange(k) // self.group

    def dequantized(self):
        return (self.q - self.zeros[:, self.g_idx]) * self.scales[:, self.g_idx]


class Fp8Matrix:
    """e4m3 values [n, k] (magnitudes 0.5 to 15, either sign) and scales per [bn, bk]
    block (None: the whole dimension): w = value * scale."""

    def __init__(self, rng, n, k, block, scale_dtype):
        bn, bk = block
        self.n, self.k, self.bn, self.bk = n, k, bn or n, bk or k
        self.codes = (rng.integers(0x30, 0x58, size=(n, k)) | rng.integers(0, 2, size=(n, k)) << 7).astype(np.uint8)
        base = 1.0 / (6.0 * math.sqrt(k))
        shape = (-(-n // self.bn), -(-k // self.bk))
        self.scales = round_to(base * np.exp(0.25 * rng.standard_normal(shape)), scale_dtype)

    def dequantized(self):
        s = np.repeat(np.repeat(self.scales, self.bn, 0), self.bk, 1)[:self.n, :self.k]
        return E4M3[self.codes] * s


# ---- writers (the formats' layouts) ------------------------------------------------------

def pack_along(v, bits, axis):
    """int32 words of unsigned values packed along `axis`, lowest bits first."""
    v = np.moveaxis(np.asarray(v, dtype=np.uint64), axis, -1)
    per = 32 // bits
    v = v.reshape(v.shape[:-1] + (v.shape[-1] // per, per))
    words = np.zeros(v.shape[:-1], dtype=np.uint64)
    for i in range(per):
        words |= v[..., i] << np.uint64(bits * i)
    return np.moveaxis(words.astype(np.uint32).view(np.int32), -1, axis)


def i32(a):
    return ("I32", list(a.shape), np.ascontiguousarray(a, dtype="<i4").tobytes())


def gptq_tensors(m, version):
    """AutoGPTQ / GPTQModel QuantLinear: qweight [k*bits/32, n] packed along k, qzeros
    [G, n*bits/32] packed along n (v1: zero - 1), scales f16 [G, n], g_idx [k]."""
    z = m.zeros - (1 if version == 1 else 0)
    return {"qweight": i32(pack_along(m.q.T, m.bits, 0)),
            "qzeros": i32(pack_along(z.T, m.bits, 1)),
            "scales": ("F16", [m.k // m.group, m.n], float_bytes(m.scales.T, "F16")),
            "g_idx": i32(m.g_idx.astype(np.int32))}


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # the column each nibble of a GEMM word holds


def awq_gemm_tensors(m):
    """AutoAWQ WQLinear_GEMM: qweight [k, n/8] and qzeros [G, n/8] packed along n in the
    interleaved nibble order, scales f16 [G, n]."""
    def pack(v):  # v [rows, n]
        r, n = v.shape
        v = v.reshape(r, n // 8, 8)[:, :, AWQ_ORDER].reshape(r, n)
        return pack_along(v, 4, 1)
    return {"qweight": i32(pack(m.q.T)), "qzeros": i32(pack(m.zeros.T)),
            "scales": ("F16", [m.k // m.group, m.n], float_bytes(m.scales.T, "F16"))}


def awq_zeros_width(k, group):
    mult = 1 if group >= 128 else {64: 2, 32: 4}[group]
    words = -(-(k // group) // 8)  # the zeros' int32 words
    return -(-words // mult) * mult


def awq_gemv_tensors(m):
    """AutoAWQ WQLinear_GEMV: qweight [n, k/8] packed along k in order, qzeros [n, W]
    (W: the zero words padded to the kernel's width) and scales f16 [n, 8 W], zero-padded."""
    w = awq_zeros_width(m.k, m.group)
    zeros = np.zeros((m.n, 8 * w), dtype=np.int64)
    zeros[:, :m.zeros.shape[1]] = m.zeros
    scales = np.zeros((m.n, 8 * w))
    scales[:, :m.scales.shape[1]] = m.scales
    return {"qweight": i32(pack_along(m.q, 4, 1)), "qzeros": i32(pack_along(zeros, 4, 1)),
            "scales": ("F16", [m.n, 8 * w], float_bytes(scales, "F16"))}


def fp8_block_tensors(m):
    """quant_method fp8 (DeepSeek-V3, Qwen3 FP8): weight e4m3 [n, k], weight_scale_inv
    f32 per block (multiplied, despite the name)."""
    return {"weight": ("F8_E4M3", [m.n, m.k], m.codes.tobytes()),
            "weight_scale_inv": ("F32", list(m.scales.shape), float_bytes(m.scales, "F32"))}


def ct_fp8_tensors(m, scale_dtype, input_scale):
    """compressed-tensors float-quantized: weight e4m3 [n, k], weight_scale [n, 1] per
    channel or [1] per tensor (and a static input_scale [1])."""
    shape = [m.n, 1] if m.bn == 1 else [1]
    t = {"weight": ("F8_E4M3", [m.n, m.k], m.codes.tobytes()),
         "weight_scale": (scale_dtype, shape, float_bytes(m.scales, scale_dtype))}
    if input_scale is not None:
        t["input_scale"] = ("F32", [1], float_bytes(np.array([input_scale]), "F32"))
    return t


def ct_pack_tensors(m):
    """compressed-tensors pack-quantized (symmetric): weight_packed [n, k*bits/32] of the
    signed values offset by 2^(bits-1), packed along k; weight_scale [n, G]; weight_shape."""
    return {"weight_packed": i32(pack_along(m.q, m.bits, 1)),
            "weight_scale": ("BF16", list(m.scales.shape), float_bytes(m.scales, "BF16")),
            "weight_shape": ("I64", [2], np.array([m.n, m.k], dtype="<i8").tobytes())}


# ---- readers (written apart from the writers: byte and nibble views) ------------------

def read_safetensors(data):
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        raw = np.frombuffer(data[base + a:base + b], dtype=np.uint8)
        dt = e["dtype"]
        if dt == "F32":
            v = raw.view("<f4").astype(np.float64)
        elif dt == "F16":
            v = raw.view("<f2").astype(np.float64)
        elif dt == "BF16":
            v = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        elif dt == "F8_E4M3":
            v = raw.copy()
        elif dt in ("I32", "I64", "I8", "U8"):
            v = raw.view({"I32": "<i4", "I64": "<i8", "I8": "i1", "U8": "u1"}[dt]).copy()
        else:
            raise ValueError("%s: dtype %s" % (name, dt))
        out[name] = (dt, v.reshape(e["shape"]))
    return out


def nibbles(words):
    """[..., w] int32 -> [..., 8 w] the 4-bit fields, lowest first (little-endian bytes)."""
    b = np.ascontiguousarray(words).astype("<i4").view(np.uint8)
    return np.stack([b & 0xF, b >> 4], axis=-1).reshape(words.shape[:-1] + (-1,)).astype(np.int64)


def fields(words, bits):
    if bits == 4:
        return nibbles(words)
    return np.ascontiguousarray(words).astype("<i4").view(np.uint8).astype(np.int64)


def read_gptq(t, bits, version):
    q = fields(t["qweight"].T, bits)                 # [n, k]
    z = fields(t["qzeros"], bits) + (1 if version == 1 else 0)  # [G, n]
    g = t["g_idx"]
    return (q - z[g].T) * t["scales"][g].T


def read_awq_gemm(t):
    def unpack(words):
        v = nibbles(words)
        r, n = v.shape
        out = np.empty_like(v).reshape(r, n // 8, 8)
        out[:, :, AWQ_ORDER] = v.reshape(r, n // 8, 8)
        return out.reshape(r, n)
    q, z, s = unpack(t["qweight"]), unpack(t["qzeros"]), t["scales"]   # [k, n], [G, n]
    group = q.shape[0] // s.shape[0]
    return ((q - np.repeat(z, group, 0)) * np.repeat(s, group, 0)).T


def read_awq_gemv(t, group):
    q = nibbles(t["qweight"])                          # [n, k]
    groups = q.shape[1] // group
    z, s = nibbles(t["qzeros"])[:, :groups], t["scales"][:, :groups]
    return (q - np.repeat(z, group, 1)) * np.repeat(s, group, 1)


def read_fp8(t, scale_name, block=None):
    """block: the config's weight_block_size; none: one scale, or one per row [n, 1]."""
    w = E4M3[t["weight"]]
    s = t[scale_name]
    n, k = w.shape
    if block is None:
        if s.size == 1:
            return w * s.reshape(())
        if s.shape != (n, 1):
            raise AssertionError("a per-channel scale of shape %s for [%d, %d]" % (s.shape, n, k))
        return w * s
    bn, bk = block
    if s.shape != (-(-n // bn), -(-k // bk)):
        raise AssertionError("block scales of shape %s for [%d, %d]" % (s.shape, n, k))
    return w * np.repeat(np.repeat(s, bn, 0), bk, 1)[:n, :k]


def read_ct_packed(t, bits):
    n, k = (int(x) for x in t["weight_shape"])
    q = fields(t["weight_packed"], bits)[:, :k] - (1 << (bits - 1))
    s = t["weight_scale"]
    return q * np.repeat(s, k // s.shape[1], 1)


# ---- the variants ----------------------------------------------------------------------

def autogptq_config(bits, group, sym, desc_act):
    return {"bits": bits, "group_size": group, "damp_percent": 0.01, "desc_act": desc_act,
            "static_groups": False, "sym": sym, "true_sequential": True,
            "model_name_or_path": None, "model_file_base_name": None,
            "quant_method": "gptq", "checkpoint_format": "gptq"}


def optimum_gptq_config(bits, group, sym, desc_act):
    return {"batch_size": 1, "bits": bits, "block_name_to_quantize": None,
            "cache_block_outputs": True, "checkpoint_format": "gptq", "damp_percent": 0.1,
            "dataset": "c4", "desc_act": desc_act, "exllama_config": {"version": 1},
            "group_size": group, "max_input_length": None, "model_seqlen": None,
            "module_name_preceding_first_block": None, "modules_in_block_to_quantize": None,
            "pad_token_id": None, "quant_method": "gptq", "sym": sym, "tokenizer": None,
            "true_sequential": True, "use_cuda_fp16": False, "use_exllama": True}


def gptqmodel_config(bits, group, sym, desc_act, fmt, lm_head):
    return {"bits": bits, "group_size": group, "desc_act": desc_act, "sym": sym,
            "lm_head": lm_head, "quant_method": "gptq", "checkpoint_format": fmt,
            "pack_dtype": "int32",
            "meta": {"quantizer": ["gptqmodel:2.2.0"], "uri": "https://github.com/modelcloud/gptqmodel",
                     "damp_percent": 0.01, "damp_auto_increment": 0.0025, "static_groups": False,
                     "true_sequential": True, "mse": 0.0}}


def awq_config(version, group, not_convert=None):
    c = {"quant_method": "awq", "zero_point": True, "group_size": group, "bits": 4, "version": version}
    if not_convert is not None:
        c["modules_to_not_convert"] = not_convert
    return c


def ct_args(num_bits, typ, strategy, group=None, dynamic=False, observer="minmax"):
    return {"actorder": None, "block_structure": None, "dynamic": dynamic, "group_size": group,
            "num_bits": num_bits, "observer": observer, "observer_kwargs": {}, "strategy": strategy,
            "symmetric": True, "type": typ}


def ct_config(fmt, weights, inputs):
    return {"config_groups": {"group_0": {"input_activations": inputs, "output_activations": None,
                                          "targets": ["Linear"], "weights": weights}},
            "format": fmt, "global_compression_ratio": None, "ignore": ["lm_head"],
            "kv_cache_scheme": None, "quant_method": "compressed-tensors",
            "quantization_status": "compressed", "sparsity_config": {}, "version": "0.10.2"}


# A scheme: (make(rng, n, k) -> the drawn matrix, writer, reader); make is a partial of
# IntMatrix or Fp8Matrix, its parameters plain data.
def gptq(bits, group, sym, version, desc_act=False):
    make = functools.partial(IntMatrix, bits=bits, group=group, sym=sym, scale_dtype="F16",
                             act_order=desc_act)
    return make, lambda m: gptq_tensors(m, version), lambda t: read_gptq(t, bits, version)


def awq(version, group):
    make = functools.partial(IntMatrix, bits=4, group=group, sym=False, scale_dtype="F16")
    if version == "gemm":
        return make, awq_gemm_tensors, read_awq_gemm
    return make, awq_gemv_tensors, lambda t: read_awq_gemv(t, group)


def fp8_block(bn, bk):
    return (functools.partial(Fp8Matrix, block=(bn, bk), scale_dtype="F32"), fp8_block_tensors,
            lambda t: read_fp8(t, "weight_scale_inv", (bn, bk)))


def ct_fp8(per_channel):
    if per_channel:
        return (functools.partial(Fp8Matrix, block=(1, None), scale_dtype="BF16"),
                lambda m: ct_fp8_tensors(m, "BF16", None), lambda t: read_fp8(t, "weight_scale"))
    return (functools.partial(Fp8Matrix, block=(None, None), scale_dtype="F32"),
            lambda m: ct_fp8_tensors(m, "F32", 0.0234375), lambda t: read_fp8(t, "weight_scale"))


def ct_int(bits, group):
    return (functools.partial(IntMatrix, bits=bits, group=group, sym=True, scale_dtype="BF16"), ct_pack_tensors,
            lambda t: read_ct_packed(t, bits))


# name -> (arch, float dtype, quantization_config, scheme, options, description)
VARIANTS = {
    "gptq_sym": (
        "llama", "F16", autogptq_config(4, 32, True, False), gptq(4, 32, True, 1), {},
        "GPTQ (AutoGPTQ) 4-bit, group 32, symmetric, checkpoint_format gptq (zeros stored minus 1)"),
    "gptq_act_order": (
        "llama", "F16", optimum_gptq_config(4, 16, False, True), gptq(4, 16, False, 1, desc_act=True), {},
        "GPTQ (transformers/optimum) 4-bit, group 16, asymmetric, desc_act: g_idx from a random permutation"),
    "gptq_v2_qwen2": (
        "qwen2", "F16", gptqmodel_config(8, -1, False, False, "gptq_v2", False), gptq(8, -1, False, 2), {},
        "GPTQ (GPTQModel) 8-bit per channel (group_size -1), asymmetric, checkpoint_format gptq_v2, q/k/v biases"),
    "gptq_lm_head": (
        "llama", "F16", gptqmodel_config(4, 32, False, False, "gptq", True), gptq(4, 32, False, 1),
        {"lm_head": True},
        "GPTQ (GPTQModel) 4-bit, group 32, asymmetric, lm_head: true (a quantized lm_head)"),
    "gptq_mixtral": (
        "mixtral", "F16", autogptq_config(4, 32, True, False), gptq(4, 32, True, 1), {},
        "GPTQ (AutoGPTQ) 4-bit, group 32, Mixtral with 4 experts (experts and attention quantized, router not)"),
    "awq_gemm": (
        "llama", "F16", awq_config("gemm", 32), awq("gemm", 32), {},
        "AWQ (AutoAWQ) GEMM 4-bit, group 32, zero point"),
    "awq_gemv": (
        "llama128", "F16", awq_config("gemv", 64), awq("gemv", 64), {},
        "AWQ (AutoAWQ) GEMV 4-bit, group 64, zero point: zeros and scales padded to the kernel's width"),
    "awq_not_converted": (
        "llama", "F16", awq_config("gemm", 32, ["o_proj", "layers.1.mlp"]), awq("gemm", 32),
        {"not_converted": ["o_proj", "layers.1.mlp"]},
        "AWQ GEMM 4-bit, group 32, modules_to_not_convert (every o_proj and layer 1's MLP stay float16)"),
    "fp8_block": (
        "llama176", "BF16",
        {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [32, 32]},
        fp8_block(32, 32), {},
        "FP8 (quant_method fp8, DeepSeek/Qwen layout) e4m3 with weight_scale_inv per 32x32 block "
        "(intermediate 176: partial blocks)"),
    "ct_fp8_channel": (
        "llama", "BF16",
        ct_config("float-quantized", ct_args(8, "float", "channel"),
                  ct_args(8, "float", "token", dynamic=True, observer=None)),
        ct_fp8(True), {},
        "compressed-tensors float-quantized FP8 (FP8_DYNAMIC): e4m3, bf16 weight_scale per channel"),
    "ct_fp8_tensor": (
        "llama", "BF16",
        ct_config("float-quantized", ct_args(8, "float", "tensor"), ct_args(8, "float", "tensor")),
        ct_fp8(False), {},
        "compressed-tensors float-quantized FP8 (static): e4m3, f32 weight_scale per tensor, input_scale"),
    "ct_w4a16": (
        "llama", "BF16", ct_config("pack-quantized", ct_args(4, "int", "group", group=32), None),
        ct_int(4, 32), {},
        "compressed-tensors pack-quantized int4 (W4A16), group 32, symmetric"),
    "ct_w8a16": (
        "llama", "BF16", ct_config("pack-quantized", ct_args(8, "int", "channel"), None),
        ct_int(8, -1), {},
        "compressed-tensors pack-quantized int8 (W8A16) per channel, symmetric"),
}


def seed_of(name):
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def quantized_modules(name, arch, cfg):
    _, _, _, _, opts, _ = VARIANTS[name]
    mods = linears(arch, cfg)
    skip = opts.get("not_converted", [])
    mods = [m for m in mods if not any(s in m[0] for s in skip)]
    if opts.get("lm_head"):
        mods.append(("lm_head", VOCAB, cfg["hidden_size"]))
    return mods


def build(name):
    """(config dict, manifest, {module: dequantized float64 [n, k]} from the draws)."""
    arch, fdtype, qcfg, (make, write, _), opts, _ = VARIANTS[name]
    hf_arch, cfg = ARCHS[arch]
    seed = seed_of(name)
    rng = np.random.Generator(np.random.PCG64(seed))
    quantized = quantized_modules(name, arch, cfg)
    qnames = {m[0] for m in quantized}
    floats = float_tensors(arch, cfg)
    for mod, n, k in linears(arch, cfg):  # unconverted linears stay float
        if mod not in qnames:
            floats[mod + ".weight"] = ([n, k], "scaled", 1.0 / math.sqrt(k))
    if "lm_head" in qnames:
        del floats["lm_head.weight"]
    stream = {"seed": seed, "skip": 0, "tensors": []}
    for t in sorted(floats):
        shape, kind, std = floats[t]
        e = {"name": t, "shape": shape, "kind": kind}
        if std is not None:
            e["std"] = float(np.float32(std))
        stream["tensors"].append(e)
    tensors = [{"name": t, "dtype": fdtype, "shape": floats[t][0]} for t in floats]
    want = {}
    for mod, n, k in quantized:
        m = make(rng, n, k)
        want[mod] = m.dequantized()
        for suffix, (dt, shape, data) in write(m).items():
            tensors.append({"name": mod + "." + suffix, "dtype": dt, "shape": shape, "base64": base64.b64encode(data).decode("ascii")})
    tensors.sort(key=lambda t: t["name"])
    manifest = {"format": fw.FORMAT, "streams": [stream],
                "files": [{"name": "model.safetensors", "metadata": {"format": "pt"}, "tensors": tensors}]}
    config = {"architectures": [hf_arch], "model_type": MODEL_TYPE[arch]}
    config.update(COMMON)
    config["torch_dtype"] = {"F16": "float16", "BF16": "bfloat16"}[fdtype]
    config.update(cfg)
    config["quantization_config"] = qcfg
    return config, manifest, want


def dense_weights(name, files):
    """Reads the built checkpoint back and dequantizes: {HF tensor name: float64}."""
    arch, _, _, (_, _, read), _, _ = VARIANTS[name]
    cfg = ARCHS[arch][1]
    tensors = {}
    for f, data in files.items():
        if f.endswith(".safetensors"):
            tensors.update(read_safetensors(data))
    dense, used = {}, set()
    for mod, n, k in quantized_modules(name, arch, cfg):
        parts = {t[len(mod) + 1:]: v for t, (_, v) in tensors.items() if t.startswith(mod + ".")
                 and "." not in t[len(mod) + 1:] and t[len(mod) + 1:] != "bias"}
        w = read(parts)
        if w.shape != (n, k):
            raise AssertionError("%s: %s dequantized to %s" % (name, mod, w.shape))
        dense[mod + ".weight"] = w
        used.update(mod + "." + p for p in parts)
    for t, (dt, v) in tensors.items():
        if t not in used:
            if dt not in ("F32", "F16", "BF16"):
                raise AssertionError("%s: %s (%s) belongs to no quantized module" % (name, t, dt))
            dense[t] = v
    return dense


def check_round_trip(name, files, want, manifest):
    dense = dense_weights(name, files)
    for mod, w in want.items():
        got = dense[mod + ".weight"]
        if not np.array_equal(got, w):
            raise AssertionError("%s: %s reads back differently (max diff %g)"
                                 % (name, mod, np.abs(got - w).max()))
    gen, _ = fw.generate(manifest)
    fdtype = VARIANTS[name][1]
    for t, v in gen.items():
        if not np.array_equal(dense[t].ravel(), round_to(v.astype(np.float64), fdtype)):
            raise AssertionError("%s: float tensor %s reads back differently" % (name, t))
    return dense


def prompts(name, draw):
    """The prompts of the draw-th try: a reference keeps the first whose greedy paths all
    have margins of at least MIN_MARGIN."""
    rng = np.random.Generator(np.random.PCG64(seed_of(name) + 1 + draw))
    return [rng.integers(3, VOCAB, size=n).tolist() for n in PROMPT_LENGTHS]


# ---- references (torch, transformers) ------------------------------------------------------

def references(name, config, dense, tmp, draws):
    """Prompt logits and greedy cases of the dense float64 model fed the dequantized
    weights: they are saved as a float64 checkpoint and loaded, as the dense fixtures'
    references are, by scripts/make_fixtures.py's loader (transformers' own loading, the
    legacy expert names converted as for any hub checkpoint), which must take every value
    (the absolute sums of its parameters and of the weights agree)."""
    import make_fixtures as mf  # torch and transformers
    os.makedirs(tmp, exist_ok=True)
    cfg = {k: v for k, v in config.items() if k != "quantization_config"}
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    mf.save_file({t: mf.torch.from_numpy(np.ascontiguousarray(v)) for t, v in dense.items()},
                  os.path.join(tmp, "model.safetensors"))
    model = mf.load_f64(tmp)
    shutil.rmtree(tmp)
    taken = sum(float(v.abs().sum()) for v in model.state_dict().values())
    given = sum(float(np.abs(v).sum()) for v in dense.values())
    if abs(taken - given) > 1e-9 * given:
        raise AssertionError("%s: the dense model holds other weights (|w| sums %r, %r)" % (name, taken, given))
    def run(ids):
        new, margin = mf.greedy_full_recompute(model, ids)
        return mf.prompt_logits(model, ids).float().numpy(), new, margin
    draw, logits, cases = first_clear_draw(name, run, draws)
    how = "transformers %s, torch %s, float64, eager attention" % (mf.transformers.__version__,
                                                                    mf.torch.__version__)
    return draw, logits, cases, how


def first_clear_draw(name, run, draws):
    """(draw, logits, cases) of the first draw of prompts among `draws` whose greedy
    margins all reach MIN_MARGIN (run(ids) -> prompt logits, greedy tokens, margin)."""
    for draw in draws:
        logits, cases = {}, []
        for i, ids in enumerate(prompts(name, draw)):
            lg, new, margin = run(ids)
            logits["case%d.logits" % i] = lg
            cases.append({"input_ids": ids, "greedy_new_ids": new, "min_greedy_margin": margin})
        if min(c["min_greedy_margin"] for c in cases) >= MIN_MARGIN or len(draws) == 1:
            return draw, logits, cases
    raise AssertionError("%s: no prompts with greedy margins of %g in %d draws" % (name, MIN_MARGIN, len(draws)))


def logits_file(logits):
    entries = [(k, "F32", list(v.shape), np.ascontiguousarray(v, dtype="<f4").tobytes())
               for k, v in sorted(logits.items())]
    return fw.safetensors_bytes(entries, None)


def write_references(path, name, config, files, draw, logits, cases, how):
    with open(os.path.join(path, "reference.safetensors"), "wb") as f:
        f.write(logits_file(logits))
    tensors = read_safetensors(files["model.safetensors"])
    ref = {
        "arch": config["architectures"][0],
        "model_type": config["model_type"],
        "variant": VARIANTS[name][5],
        "format": "safetensors",
        "reference": "%s; every quantized weight replaced by its dequantized value (activations "
                     "not quantized)" % how,
        "logits": "reference.safetensors holds caseN.logits [len(input_ids), vocab_size] float32",
        "greedy_mode": "full_recompute",
        "prompt_draw": draw,
        "cases": cases,
        "checkpoint_tensors": {k: list(v[1].shape) for k, v in sorted(tensors.items())},
    }
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)


# ---- a float64 numpy port of the three architectures (no torch) ---------------------------

def port_logits(config, w, ids):
    """Logits [len(ids), vocab] of llama / qwen2 / mixtral as transformers computes them in
    float64 with eager attention (its rotary angles and softmax in float32 included)."""
    h, nh, nkv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    hd, eps, n = h // nh, config["rms_norm_eps"], len(ids)
    inv = (1.0 / (np.float32(config["rope_theta"]) ** (np.arange(0, hd, 2).astype(np.float32) / np.float32(hd))))
    ang = np.arange(n, dtype=np.float32)[:, None] * inv.astype(np.float32)[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, 1).astype(np.float64)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, 1).astype(np.float64)[:, None, :]

    def rms(x, g):
        return g * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))

    def rope(x):
        rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos + rot * sin

    def lin(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    def silu(x):
        return x / (1.0 + np.exp(-x))

    x = w["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        a = rms(x, w[p + "input_layernorm.weight"])
        q = rope(lin(a, p + "self_attn.q_proj").reshape(n, nh, hd))
        k = rope(lin(a, p + "self_attn.k_proj").reshape(n, nkv, hd))
        v = lin(a, p + "self_attn.v_proj").reshape(n, nkv, hd)
        k, v = np.repeat(k, nh // nkv, 1), np.repeat(v, nh // nkv, 1)
        s = np.einsum("qhd,khd->hqk", q, k) * hd ** -0.5 + mask
        s = np.exp(s - s.max(-1, keepdims=True)).astype(np.float32)
        s = (s / s.sum(-1, keepdims=True, dtype=np.float32)).astype(np.float64)
        x = x + lin(np.einsum("hqk,khd->qhd", s, v).reshape(n, h), p + "self_attn.o_proj")
        a = rms(x, w[p + "post_attention_layernorm.weight"])
        if "num_local_experts" in config:
            e = p + "block_sparse_moe."
            r = a @ w[e + "gate.weight"].T
            r = np.exp(r - r.max(-1, keepdims=True))
            r /= r.sum(-1, keepdims=True)
            out = np.zeros_like(a)
            for t in range(n):
                top = np.argsort(-r[t], kind="stable")[:config["num_experts_per_tok"]]
                for j in top:
                    f = e + "experts.%d." % j
                    y = lin(silu(lin(a[t], f + "w1")) * lin(a[t], f + "w3"), f + "w2")
                    out[t] += y * (r[t, j] / r[t, top].sum())
            x = x + out
        else:
            x = x + lin(silu(lin(a, p + "mlp.gate_proj")) * lin(a, p + "mlp.up_proj"), p + "mlp.down_proj")
    return rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def port_greedy(config, w, ids):
    ids, new, margin = list(ids), [], float("inf")
    for _ in range(NUM_NEW):
        last = port_logits(config, w, ids)[-1]
        top = np.argsort(-last, kind="stable")[:2]
        margin = min(margin, float(last[top[0]] - last[top[1]]))
        new.append(int(top[0]))
        ids.append(new[-1])
    return new, margin


def port_references(name, config, dense, draws):
    def run(ids):
        new, margin = port_greedy(config, dense, ids)
        return port_logits(config, dense, ids).astype(np.float32), new, margin
    return first_clear_draw(name, run, draws) + (PORT,)


PORT = ("float64 numpy port of transformers' llama / qwen2 / mixtral (make_quant_fixtures.py "
        "port_logits; checked against the transformers 5.17.0 references of the dense llama, qwen2 "
        "and mixtral fixtures: logits within 1e-6, greedy tokens identical)")


def check_port(tolerance=2e-6):
    """The port against transformers' references of the dense llama, qwen2 and mixtral
    fixtures: logits within tolerance, greedy tokens identical."""
    for arch in ("llama", "qwen2", "mixtral"):
        folder = os.path.join(fw.FIXTURES, arch)
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
        with open(os.path.join(folder, "reference.json")) as f:
            ref = json.load(f)
        files = fw.materialise(fw.load_manifest(arch))
        w = {k: v[1] for f, data in files.items() if f.endswith(".safetensors")
             for k, v in read_safetensors(data).items()}
        stored = read_safetensors(open(os.path.join(folder, "reference.safetensors"), "rb").read())
        worst = 0.0
        for i, c in enumerate(ref["cases"]):
            worst = max(worst, float(np.abs(port_logits(config, w, c["input_ids"])
                                            - stored["case%d.logits" % i][1]).max()))
            if port_greedy(config, w, c["input_ids"])[0] != c["greedy_new_ids"]:
                raise AssertionError("the port's greedy tokens differ from transformers' on %s" % arch)
        if worst > tolerance:
            raise AssertionError("the port's logits differ from transformers' on %s by %g" % (arch, worst))
        print("port vs transformers on %-8s max |diff| %.1e" % (arch, worst), flush=True)


# ---- making and checking ------------------------------------------------------------------

def make(name, out, reference):
    config, manifest, want = build(name)
    manifest = fw.finish_manifest(manifest)
    files = fw.materialise(manifest)
    dense = check_round_trip(name, files, want, manifest)
    path = os.path.join(out, name)
    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    fw.write_manifest(path, manifest)
    line = "%-20s %7d bytes of weights.json" % (name, os.path.getsize(os.path.join(path, fw.MANIFEST)))
    if reference != "none":
        draws = range(MAX_DRAWS)
        if reference == "port":
            found = port_references(name, config, dense, draws)
        else:
            found = references(name, config, dense, os.path.join(out, ".tmp-" + name), draws)
        write_references(path, name, config, files, *found)
        cases = found[2]
        line += "; prompt draw %d, min margins " % found[0] + ", ".join("%.4f" % c["min_greedy_margin"] for c in cases)
    print(line, flush=True)


def check(name, out, reference):
    path = os.path.join(out, name)
    with open(os.path.join(path, fw.MANIFEST)) as f:
        manifest = json.load(f)
    files = fw.materialise(manifest)
    if fw.checksums(files) != manifest["fnv1a64"]:
        raise AssertionError("%s: the manifest builds other files than it records" % name)
    config, fresh, want = build(name)
    if fw.materialise(fresh) != files:
        raise AssertionError("%s: the variant's recipe builds other files than the fixture's" % name)
    with open(os.path.join(path, "config.json")) as f:
        if json.load(f) != config:
            raise AssertionError("%s: config.json differs from the variant's" % name)
    dense = check_round_trip(name, files, want, manifest)
    with open(os.path.join(path, "reference.json")) as f:
        ref = json.load(f)
    draw = ref["prompt_draw"]
    if [c["input_ids"] for c in ref["cases"]] != prompts(name, draw):
        raise AssertionError("%s: the reference's prompts are not the variant's" % name)
    line = "%-20s files and round trip ok" % name
    if reference != "none":
        stored = read_safetensors(open(os.path.join(path, "reference.safetensors"), "rb").read())
        if reference == "port":
            _, logits, cases, _ = port_references(name, config, dense, [draw])
        else:
            _, logits, cases, _ = references(name, config, dense, os.path.join(out, ".tmp-" + name), [draw])
        worst = max(float(np.abs(logits[k] - stored[k][1]).max()) for k in logits)
        if worst > 2e-6 or [c["greedy_new_ids"] for c in cases] != [c["greedy_new_ids"] for c in ref["cases"]]:
            raise AssertionError("%s: the reference is not reproduced (logits differ by %g)" % (name, worst))
        line += ", reference reproduced (max |diff| %.1e)" % worst
    print(line, flush=True)


def write_dense(name, out, dense_root):
    """The fixture as a dense float32 checkpoint of its dequantized weights, with its config
    (less quantization_config) and references: any dense loading path must reproduce the
    references on it, which checks them apart from the quantized loading paths."""
    config, manifest, want = build(name)
    dense = check_round_trip(name, fw.materialise(manifest), want, manifest)
    path = os.path.join(dense_root, name)
    if os.path.realpath(path) == os.path.realpath(os.path.join(out, name)):
        raise ValueError("%s: the dense checkpoint would replace the fixture" % name)
    os.makedirs(path, exist_ok=True)
    cfg = {k: v for k, v in config.items() if k != "quantization_config"}
    cfg["torch_dtype"] = "float32"
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    entries = [(k, "F32", list(v.shape), np.ascontiguousarray(v, dtype="<f4").tobytes())
               for k, v in sorted(dense.items())]
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(fw.safetensors_bytes(entries, {"format": "pt"}))
    for f in ("reference.json", "reference.safetensors"):
        shutil.copy(os.path.join(out, name, f), path)
    print("%-20s dense checkpoint in %s" % (name, path), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=QUANT_DIR, help="fixture folder (default: %(default)s)")
    ap.add_argument("--only", nargs="*", help="variants (default: all)")
    ap.add_argument("--check", action="store_true", help="check the fixtures instead of making them")
    ap.add_argument("--dense", metavar="DIR",
                    help="write each fixture as a dense float32 checkpoint of its dequantized "
                         "weights with its references to DIR/NAME instead")
    ap.add_argument("--reference", choices=("transformers", "port", "none"), default="transformers",
                    help="how references are computed: transformers (torch), the numpy port "
                         "(checked against transformers' dense references first), or not at all")
    args = ap.parse_args()
    names = args.only or sorted(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        sys.exit("unknown variants %s; known: %s" % (unknown, sorted(VARIANTS)))
    if args.dense:
        for name in names:
            write_dense(name, args.out, args.dense)  # a fixture's own folder is refused
        return 0
    os.makedirs(args.out, exist_ok=True)
    if args.reference == "port":
        check_port()
    failed = 0
    for name in names:
        try:
            (check if args.check else make)(name, args.out, args.reference)
        except Exception as e:  # report every variant that fails
            failed += 1
            print("%s: FAILED: %s: %s" % (name, type(e).__name__, e), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
