#!/usr/bin/env python3
"""Creates extra conformance fixtures: tiny checkpoints of architecture variants the
bundled fixtures do not cover, with transformers' reference outputs, in exactly the
format of tests/conformance/fixtures (see its README.md).

    python3 scripts/make_fixtures.py OUT_DIR [--only NAME ...]

Needs torch and transformers (5.x). Writes OUT_DIR/<variant>/ (config.json,
weights.json, reference.json, reference.safetensors) for every variant, then
OUT_DIR.tar.gz. Copy the folders into tests/conformance/fixtures/; the conformance test
picks up every folder with a config.json. The weights are not kept: weights.json (see
scripts/fixture_weights.py) regenerates them bit for bit at test time, and this script
checks that it does before deleting the files save_pretrained wrote.

Each checkpoint: 2 layers, vocab 512, hidden 64 (96 where a head count that is not a
power of two needs it), seeded random weights scaled so that logits are far from
uniform, saved with save_pretrained. References: the checkpoint reloaded with
from_pretrained in float64 with eager attention on the CPU; prompt logits at every
position; 10 greedy tokens with the smallest top-1 minus top-2 margin along the path.
Greedy tokens are computed by full recomputation at each step, except for rope
scalings whose frequencies depend on the length seen so far (dynamic, longrope):
there a fresh model decodes through its KV cache (recorded as "greedy_mode").
"""

import argparse
import json
import math
import os
import shutil
import sys
import tarfile
import zlib

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
import fixture_weights  # noqa: E402  (scripts/, next to this file)

VOCAB = 512
NUM_NEW = 10
PROMPT_LENGTHS = (1, 6, 23)

COMMON = {"vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2}

LLAMA = dict(
    COMMON,
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-5,
    hidden_act="silu",
    tie_word_embeddings=False,
)

# name -> (model_type, config kwargs in the classic spelling, description)
VARIANTS = {
    "falcon_old_rotary": (
        "falcon",
        dict(COMMON, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, new_decoder_architecture=False,
             multi_query=True, parallel_attn=True, bias=False, alibi=False, layer_norm_epsilon=1e-5,
             max_position_embeddings=256, rope_theta=10000.0, tie_word_embeddings=False),
        "Falcon-7B layout: multi-query attention, one norm feeding attention and MLP in parallel, rotary",
    ),
    "opt_project_postln": (
        "opt",
        dict(COMMON, bos_token_id=2, pad_token_id=1, hidden_size=64, ffn_dim=176, num_hidden_layers=2,
             num_attention_heads=4, max_position_embeddings=256, word_embed_proj_dim=32, do_layer_norm_before=False,
             activation_function="relu", enable_bias=True, tie_word_embeddings=True),
        "OPT-350m layout: word_embed_proj_dim != hidden_size (project_in/out), post-layernorm",
    ),
    "gpt_neox_serial": (
        "gpt_neox",
        dict(COMMON, hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             rotary_pct=0.5, rotary_emb_base=10000, max_position_embeddings=256, use_parallel_residual=False,
             layer_norm_eps=1e-5, hidden_act="gelu", tie_word_embeddings=False),
        "GPT-NeoX with a serial residual (use_parallel_residual = false)",
    ),
    "gpt_bigcode_mha": (
        "gpt_bigcode",
        dict(COMMON, n_embd=64, n_layer=2, n_head=4, n_positions=256, multi_query=False,
             activation_function="gelu_pytorch_tanh", tie_word_embeddings=True),
        "GPT-BigCode without multi-query: per-head [q, k, v] rows in c_attn",
    ),
    "gpt2_inverse_layer": (
        "gpt2",
        dict(COMMON, n_embd=64, n_layer=2, n_head=4, n_positions=256, scale_attn_by_inverse_layer_idx=True,
             tie_word_embeddings=True),
        "GPT-2 with scale_attn_by_inverse_layer_idx",
    ),
    "bloom_6heads": (
        "bloom",
        dict(COMMON, hidden_size=96, n_layer=2, n_head=6, layer_norm_epsilon=1e-5, tie_word_embeddings=True),
        "Bloom with 6 heads: ALiBi slopes for a head count that is not a power of two",
    ),
    "mpt_6heads": (
        "mpt",
        dict(COMMON, d_model=96, n_heads=6, n_layers=2, expansion_ratio=4, max_seq_len=256, no_bias=True,
             attn_config={"alibi": True, "alibi_bias_max": 16, "clip_qkv": 0.3}, tie_word_embeddings=True),
        "MPT with 6 heads, alibi_bias_max 16 and clip_qkv",
    ),
    "qwen2_moe_sparse_step": (
        "qwen2_moe",
        dict(LLAMA, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
             shared_expert_intermediate_size=96, decoder_sparse_step=2, norm_topk_prob=True,
             max_position_embeddings=256, rope_theta=10000.0, use_sliding_window=False),
        "Qwen2-MoE with a dense first layer (decoder_sparse_step 2) and norm_topk_prob",
    ),
    "llama_rope_linear": (
        "llama",
        dict(LLAMA, max_position_embeddings=16, rope_theta=10000.0, rope_scaling={"rope_type": "linear", "factor": 4.0}),
        "Llama with linear rope scaling",
    ),
    "llama_rope_dynamic": (
        "llama",
        dict(LLAMA, max_position_embeddings=16, rope_theta=10000.0, rope_scaling={"rope_type": "dynamic", "factor": 4.0}),
        "Llama with dynamic NTK rope scaling (prompts longer than max_position_embeddings)",
    ),
    "llama_rope_yarn": (
        "llama",
        dict(LLAMA, max_position_embeddings=64, rope_theta=10000.0,
             rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}),
        "Llama with yarn rope scaling",
    ),
    "llama_rope_yarn_mscale": (
        "llama",
        dict(LLAMA, max_position_embeddings=64, rope_theta=10000.0,
             rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                           "mscale": 1.0, "mscale_all_dim": 0.5, "beta_fast": 16, "beta_slow": 2}),
        "Llama with yarn rope scaling, mscale / mscale_all_dim attention factor and custom betas",
    ),
    "llama_rope_llama3": (
        "llama",
        dict(LLAMA, max_position_embeddings=256, rope_theta=10000.0,
             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 16}),
        "Llama with llama3 rope scaling",
    ),
    "phi3_longrope": (
        "phi3",
        dict(LLAMA, pad_token_id=0, max_position_embeddings=256, original_max_position_embeddings=16,
             rope_theta=10000.0,
             rope_scaling={"type": "longrope",
                           "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
                           "long_factor": [1.2, 1.9, 2.7, 3.6, 4.6, 5.7, 6.9, 8.2]}),
        "Phi-3 with longrope scaling (short/long factors chosen by length, attention factor)",
    ),
}

LENGTH_DEPENDENT_ROPE = {"dynamic", "longrope"}


def rope_type_of(kwargs):
    scaling = kwargs.get("rope_scaling") or {}
    return scaling.get("rope_type", scaling.get("type", "default"))


def seed_of(name):
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def draw_kind(name, shape):
    """How a parameter is drawn: ("scaled", std) for float32(z) * float32(std), ("norm",
    None) for float32(1 + 0.1 z), z a float64 normal (fixture_weights.py's kinds)."""
    if len(shape) >= 2:
        std = 1.0 if ("embed" in name or "wte" in name or "wpe" in name or "word_embeddings" in name) \
            else 1.0 / math.sqrt(shape[-1])
        if len(shape) == 3:  # fused experts [E, out, in] or [E, in, out]
            std = 1.0 / math.sqrt(min(shape[1], shape[2]))
        return "scaled", std
    if name.endswith("bias"):
        return "scaled", 0.1
    return "norm", None  # norm scales and other vectors


def scale_weights(model, seed):
    """Seeded random weights: matrices ~ N(0, 1/fan_in), embeddings ~ N(0, 1), norm
    scales ~ 1 + N(0, 0.1^2), biases ~ N(0, 0.1^2), drawn in name order from one stream.
    Logits then spread well beyond float32 noise. Returns the manifest stream."""
    gen = torch.Generator().manual_seed(seed)
    stream = {"seed": seed, "skip": 0, "tensors": []}
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            shape = list(p.shape)
            kind, std = draw_kind(name, shape)
            z = torch.randn(shape, generator=gen, dtype=torch.float64)
            if kind == "scaled":
                p.copy_(z.to(p.dtype) * std)
            else:
                p.copy_((1.0 + 0.1 * z).to(p.dtype))
            # A 3-d parameter is listed by rows ([E * a, b]), so that the per-expert
            # tensors the checkpoint holds are gathers of its rows.
            t = {"name": name, "shape": [shape[0] * shape[1], shape[2]] if len(shape) == 3 else shape,
                 "kind": kind}
            if std is not None:
                t["std"] = float(torch.tensor(std, dtype=torch.float32))
            stream["tensors"].append(t)
    return stream


def write_weights_manifest(path, stream):
    """Replaces the weight files save_pretrained wrote with weights.json, after checking
    that the manifest rebuilds them byte for byte."""
    weight_files = sorted(f for f in os.listdir(path)
                          if f.startswith("model") and (f.endswith(".safetensors") or f.endswith(".json")))
    if weight_files != ["model.safetensors"]:
        sys.exit(f"{path}: expected one model.safetensors, got {weight_files}")
    tensors = {}
    with safe_open(os.path.join(path, "model.safetensors"), framework="pt") as sf:
        meta = sf.metadata()
        for k in sf.keys():
            t = sf.get_tensor(k).contiguous()
            name = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}[t.dtype]
            bits = t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)
            tensors[k] = (name, list(t.shape), bits.numpy().tobytes())
    m = fixture_weights.twin_manifest({"format": fixture_weights.FORMAT, "streams": [stream]}, tensors, meta)
    built = fixture_weights.materialise(m)
    with open(os.path.join(path, "model.safetensors"), "rb") as f:
        if built["model.safetensors"] != f.read():
            sys.exit(f"{path}: weights.json does not rebuild model.safetensors byte for byte")
    fixture_weights.write_manifest(path, m)
    os.remove(os.path.join(path, "model.safetensors"))


def load_f64(path):
    # Eager attention and eager (per-expert) MoE: the fused kernels refuse float64.
    kwargs = {"attn_implementation": "eager"}
    for extra in ({"experts_implementation": "eager"}, {}):
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64, **kwargs, **extra)
            break
        except TypeError:
            continue
    model.eval()
    return model


@torch.no_grad()
def prompt_logits(model, ids):
    out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0]


@torch.no_grad()
def greedy_full_recompute(model, ids):
    ids = list(ids)
    new, margin = [], float("inf")
    for _ in range(NUM_NEW):
        last = prompt_logits(model, ids)[-1]
        top = torch.topk(last, 2)
        margin = min(margin, float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        new.append(nxt)
        ids.append(nxt)
    return new, margin


@torch.no_grad()
def greedy_kv_cache(model, ids):
    new, margin = [], float("inf")
    out = model(input_ids=torch.tensor([ids]), use_cache=True)
    past = out.past_key_values
    last = out.logits[0, -1]
    for step in range(NUM_NEW):
        top = torch.topk(last, 2)
        margin = min(margin, float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        new.append(nxt)
        if step + 1 == NUM_NEW:
            break
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        last = out.logits[0, -1]
    return new, margin


def checkpoint_tensors(path):
    tensors = {}
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors") and f != "reference.safetensors":
            with safe_open(os.path.join(path, f), framework="pt") as sf:
                for k in sf.keys():
                    tensors[k] = list(sf.get_slice(k).get_shape())
    return dict(sorted(tensors.items()))


def make_variant(out_root, name):
    model_type, kwargs, description = VARIANTS[name]
    path = os.path.join(out_root, name)
    if os.path.exists(path):
        shutil.rmtree(path)
    seed = seed_of(name)
    torch.manual_seed(seed)
    config = AutoConfig.for_model(model_type, **kwargs)
    model = AutoModelForCausalLM.from_config(config)
    model = model.to(torch.float32)
    stream = scale_weights(model, seed)
    model.save_pretrained(path, safe_serialization=True)
    del model

    gen = torch.Generator().manual_seed(seed + 1)
    cases = [torch.randint(3, VOCAB, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
    length_dependent = rope_type_of(kwargs) in LENGTH_DEPENDENT_ROPE
    greedy_mode = "kv_cache" if length_dependent else "full_recompute"

    logits, case_refs, seen = {}, [], None
    for i, ids in enumerate(cases):
        # A fresh model per case: length-dependent rope keeps state between calls.
        model = load_f64(path)
        if seen is None:
            seen = sorted(model.state_dict().keys())
        logits[f"case{i}.logits"] = prompt_logits(model, ids).to(torch.float32).contiguous()
        model = load_f64(path)
        if length_dependent:
            new, margin = greedy_kv_cache(model, ids)
        else:
            new, margin = greedy_full_recompute(model, ids)
        case_refs.append({"input_ids": ids, "greedy_new_ids": new, "min_greedy_margin": margin})
        del model
    save_file(logits, os.path.join(path, "reference.safetensors"))

    arch = json.load(open(os.path.join(path, "config.json")))["architectures"][0]
    files = [f for f in os.listdir(path) if f.endswith(".safetensors") and f != "reference.safetensors"]
    ref = {
        "arch": arch,
        "model_type": model_type,
        "variant": description,
        "format": "sharded" if len(files) > 1 else "safetensors",
        "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, float64, eager attention",
        "logits": "reference.safetensors holds caseN.logits [len(input_ids), vocab_size] float32",
        "greedy_mode": greedy_mode,
        "weight_names_seen_by_transformers": seen,
        "cases": case_refs,
        "checkpoint_tensors": checkpoint_tensors(path),
    }
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    write_weights_manifest(path, stream)
    margins = ", ".join(f"{c['min_greedy_margin']:.4f}" for c in case_refs)
    print(f"{name:28s} {arch:24s} greedy {greedy_mode:15s} min margins {margins}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--only", nargs="*", help="variants to make (default: all)")
    args = parser.parse_args()
    names = args.only or list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variants: {unknown}; known: {list(VARIANTS)}")
    os.makedirs(args.out_dir, exist_ok=True)
    torch.set_grad_enabled(False)
    made = []
    for name in names:
        try:
            make_variant(args.out_dir, name)
            made.append(name)
        except Exception as e:  # keep going: report every variant that fails
            print(f"{name}: FAILED: {type(e).__name__}: {e}")
            shutil.rmtree(os.path.join(args.out_dir, name), ignore_errors=True)
    out = os.path.abspath(args.out_dir).rstrip("/")
    with tarfile.open(out + ".tar.gz", "w:gz") as tar:
        for name in made:
            tar.add(os.path.join(out, name), arcname=name)
    print(f"wrote {out}.tar.gz")


if __name__ == "__main__":
    main()
