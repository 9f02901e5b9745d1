#!/usr/bin/env python3
"""Creates the LoRA conformance fixtures: PEFT LoRA adapters for the tiny dense
conformance checkpoints, with float64 PEFT references, under
tests/conformance/fixtures/lora/<name>/ (README.md there).

    python3 scripts/make_lora_fixtures.py [--out DIR] [--only NAME ...]
    python3 scripts/make_lora_fixtures.py --check [--out DIR] [--only NAME ...]
    python3 scripts/make_lora_fixtures.py --port [--out DIR] [--only NAME ...]

Needs torch, transformers and peft. Each variant adapts one dense fixture (its base,
tests/conformance/fixtures/<base>, materialised from its manifest by
scripts/fixture_weights.py): the adapter is made by PEFT itself (get_peft_model with the
variant's LoraConfig and init_lora_weights=False, then save_pretrained), with every
lora_A / lora_B value replaced first by a seeded normal draw (the stream of
scripts/fixture_weights.py, seeded with crc32("lora/" + name), the adapter's tensors in
the order of their saved names): A ~ N(0, 1/K), B ~ N(0, (GAIN / (scaling sqrt(r)))^2),
so that scaling * B A is about GAIN times the size of the weight it adapts and the adapter
visibly changes greedy tokens. The fixture keeps adapter_config.json as PEFT wrote it
(base_model_name_or_path set to the base fixture's folder) and, for a safetensors adapter,
the manifest weights.json that rebuilds adapter_model.safetensors byte for byte (checked
against PEFT's file before it is dropped); a .bin adapter (torch.save of the state dict,
as save_pretrained(safe_serialization=False) writes it) is stored as it is.

References: the base reloaded with transformers' from_pretrained in float64 with eager
attention (scripts/make_fixtures.py's loader), the adapter loaded onto it from the
fixture's files by PeftModel.from_pretrained, the whole model made float64 (its adapter
values checked equal to the draws); prompt logits at every position and 10 greedy tokens
by full recomputation, for the adapter and for the base (the same model under
disable_adapter()). Prompts of 1, 5 and 10 tokens are redrawn (reference.json's
prompt_draw) until every greedy margin of both is at least 4e-3 and the adapter's greedy
tokens differ from the base's in at least two of the three prompts.

--check rebuilds every fixture in a temporary folder and compares: adapter_config.json,
the adapter's files (the manifest's checksums and PEFT's bytes; a .bin's values), the
prompts of the recorded draw, and the logits (within 2e-6) and greedy tokens. --port
(numpy only) checks the references of the llama and qwen2 safetensors adapters apart from
PEFT: make_quant_fixtures.py's float64 port of those architectures fed the base's weights
plus scaling * B A, each module's scaling read from adapter_config.json (alpha_pattern,
rank_pattern, use_rslora) as PEFT defines it; logits within 2e-6, greedy tokens identical.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import zlib

import numpy as np

sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
import fixture_weights as fw  # noqa: E402  (scripts/, next to this file)

VOCAB = 512
NUM_NEW = 10
PROMPT_LENGTHS = (1, 5, 10)
MIN_MARGIN = 4e-3  # twice the conformance test's logit tolerance
MAX_DRAWS = 32
GAIN = 0.5
LORA_DIR = os.path.join(fw.FIXTURES, "lora")
LLAMA_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# name -> (base fixture, LoraConfig kwargs, adapter file format, description)
VARIANTS = {
    "llama_qv": ("llama", dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]), "safetensors",
                 "r 8, alpha 16 on q_proj and v_proj"),
    "llama_all": ("llama", dict(r=16, lora_alpha=32, target_modules=LLAMA_ALL, use_rslora=True), "safetensors",
                  "r 16, alpha 32 on every attention and MLP projection, rsLoRA scaling (alpha / sqrt(r))"),
    "llama_pattern": ("llama", dict(r=8, lora_alpha=16, target_modules=r".*\.(q_proj|v_proj|o_proj|down_proj)",
                                    rank_pattern={"o_proj": 4}, alpha_pattern={"down_proj": 64}), "safetensors",
                      "r 8 with rank_pattern o_proj 4 and alpha_pattern down_proj 64, target_modules a regex"),
    "llama_bin": ("llama", dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]), "bin",
                  "r 4 on q, k, v, o saved as adapter_model.bin (torch.save of the state dict)"),
    "phi3_fused": ("phi3", dict(r=8, lora_alpha=16, target_modules=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]),
                   "safetensors", "Phi-3 fused qkv_proj and gate_up_proj (and o_proj, down_proj), r 8"),
    "gpt_neox": ("gpt_neox", dict(r=8, lora_alpha=16, target_modules=["query_key_value", "dense"]), "safetensors",
                 "GPT-NeoX query_key_value (per-head q, k, v rows) and attention dense, r 8"),
    "qwen2": ("qwen2", dict(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj"]), "safetensors",
              "Qwen2 (bfloat16 base with q, k, v biases) q_proj, k_proj, v_proj, r 8"),
    "gpt2": ("gpt2", dict(r=8, lora_alpha=16, target_modules=["c_attn", "c_proj"], fan_in_fan_out=True),
             "safetensors", "GPT-2 Conv1D c_attn and c_proj (attention and MLP), fan_in_fan_out"),
}


def seed_of(name):
    return zlib.crc32(("lora/" + name).encode()) & 0x7FFFFFFF


def prompts(name, draw):
    rng = np.random.Generator(np.random.PCG64(seed_of(name) + 1 + draw))
    return [rng.integers(3, VOCAB, size=n).tolist() for n in PROMPT_LENGTHS]


def base_checkpoint(base, folder):
    """The base fixture's checkpoint files (from its manifest, or stored) and config."""
    src = os.path.join(fw.FIXTURES, base)
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(src):
        if f != fw.MANIFEST and not f.startswith("reference") and os.path.isfile(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), folder)
    if os.path.exists(os.path.join(src, fw.MANIFEST)):
        for f, data in fw.materialise(fw.load_manifest(base)).items():
            with open(os.path.join(folder, f), "wb") as out:
                out.write(data)
    return folder


# ---- the adapter (torch, peft) ---------------------------------------------------------

def saved_name(param_name):
    """PEFT's saved key of a parameter (the adapter name dropped)."""
    return param_name.replace(".default.", ".")


def make_adapter(name, base_dir, out_dir):
    """PEFT's adapter for variant `name` with the seeded values, saved to out_dir.
    Returns the manifest stream and {saved name: float32 values}."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    base, kwargs, fmt, _ = VARIANTS[name]
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(init_lora_weights=False, **kwargs))
    peft_model.peft_config["default"].base_model_name_or_path = "tests/conformance/fixtures/" + base
    layers = {}
    for mod_name, mod in peft_model.named_modules():
        if hasattr(mod, "lora_A") and "default" in getattr(mod, "lora_A", {}):
            layers[mod_name] = mod
    params = {}
    for mod_name, mod in layers.items():
        for part in ("lora_A", "lora_B"):
            p = getattr(mod, part)["default"].weight
            params[saved_name(mod_name + "." + part + ".default.weight")] = (p, mod)
    if not params:
        raise AssertionError("%s: PEFT adapted no module" % name)
    gen = torch.Generator().manual_seed(seed_of(name))
    stream = {"seed": seed_of(name), "skip": 0, "tensors": []}
    values = {}
    with torch.no_grad():
        for key in sorted(params):
            p, mod = params[key]
            shape = list(p.shape)
            if ".lora_A." in key:
                std = 1.0 / math.sqrt(shape[1])
            else:
                std = GAIN / (float(mod.scaling["default"]) * math.sqrt(mod.r["default"]))
            std = float(torch.tensor(std, dtype=torch.float32))
            z = torch.randn(shape, generator=gen, dtype=torch.float64)
            p.copy_(z.to(torch.float32) * std)
            values[key] = p.detach().clone()
            stream["tensors"].append({"name": key, "shape": shape, "kind": "scaled", "std": std})
    peft_model.save_pretrained(out_dir, safe_serialization=(fmt == "safetensors"))
    return stream, values


def adapter_manifest(name, out_dir, stream):
    """The manifest rebuilding out_dir/adapter_model.safetensors, checked byte for byte."""
    import torch
    from safetensors import safe_open
    path = os.path.join(out_dir, "adapter_model.safetensors")
    tensors = {}
    with safe_open(path, framework="pt") as sf:
        meta = sf.metadata()
        for k in sf.keys():
            t = sf.get_tensor(k).contiguous()
            if t.dtype != torch.float32:
                raise AssertionError("%s: %s is %s" % (name, k, t.dtype))
            tensors[k] = ("F32", list(t.shape), t.view(torch.int32).numpy().tobytes())
    m = fw.twin_manifest({"format": fw.FORMAT, "streams": [stream]}, tensors, meta)
    m["files"][0]["name"] = "adapter_model.safetensors"
    m = fw.finish_manifest(m)
    with open(path, "rb") as f:
        if fw.materialise(m)["adapter_model.safetensors"] != f.read():
            raise AssertionError("%s: the manifest does not rebuild PEFT's adapter_model.safetensors" % name)
    return m


def check_bin(name, out_dir, values):
    import torch
    sd = torch.load(os.path.join(out_dir, "adapter_model.bin"), weights_only=True)
    if sorted(sd) != sorted(values) or any(not torch.equal(sd[k], values[k]) for k in values):
        raise AssertionError("%s: adapter_model.bin holds other values than the draws" % name)


# ---- references ------------------------------------------------------------------------------

def references(name, base_dir, adapter_dir, values, draws):
    import torch
    import make_fixtures as mf
    from peft import PeftModel
    model = PeftModel.from_pretrained(mf.load_f64(base_dir), adapter_dir)
    model = model.double().eval()
    loaded = {saved_name(k): v for k, v in model.named_parameters() if "lora_" in k}
    if sorted(loaded) != sorted(values):
        raise AssertionError("%s: PEFT loaded other modules: %s" % (name, sorted(set(loaded) ^ set(values))))
    for k, v in values.items():
        if not torch.equal(loaded[k], v.double()):
            raise AssertionError("%s: %s loaded as other values" % (name, k))

    def run(ids, adapter):
        if adapter:
            return mf.prompt_logits(model, ids).float().numpy(), *mf.greedy_full_recompute(model, ids)
        with model.disable_adapter():
            return mf.prompt_logits(model, ids).float().numpy(), *mf.greedy_full_recompute(model, ids)

    for draw in draws:
        logits, cases, changed = {}, [], 0
        for i, ids in enumerate(prompts(name, draw)):
            c = {"input_ids": ids}
            for who in ("adapter", "base"):
                lg, new, margin = run(ids, who == "adapter")
                logits["%s.case%d.logits" % (who, i)] = lg
                c[who] = {"greedy_new_ids": new, "min_greedy_margin": margin}
            changed += c["adapter"]["greedy_new_ids"] != c["base"]["greedy_new_ids"]
            cases.append(c)
        margin = min(c[w]["min_greedy_margin"] for c in cases for w in ("adapter", "base"))
        if (margin >= MIN_MARGIN and changed >= 2) or len(draws) == 1:
            how = "peft %s, transformers %s, torch %s, float64, eager attention" % (
                __import__("peft").__version__, mf.transformers.__version__, torch.__version__)
            return draw, logits, cases, how
    raise AssertionError("%s: no prompts with greedy margins of %g and changed tokens in %d draws"
                         % (name, MIN_MARGIN, len(draws)))


def build(name, work, draws):
    """Makes the variant in `work`: (adapter folder, manifest or None, draw, logits, cases, how)."""
    base, _, fmt, _ = VARIANTS[name]
    base_dir = base_checkpoint(base, os.path.join(work, "base"))
    adapter_dir = os.path.join(work, "adapter")
    stream, values = make_adapter(name, base_dir, adapter_dir)
    manifest = adapter_manifest(name, adapter_dir, stream) if fmt == "safetensors" else None
    if fmt == "bin":
        check_bin(name, adapter_dir, values)
    found = references(name, base_dir, adapter_dir, values, draws)
    return (adapter_dir, manifest) + found


def logits_file(logits):
    entries = [(k, "F32", list(v.shape), np.ascontiguousarray(v, dtype="<f4").tobytes())
               for k, v in sorted(logits.items())]
    return fw.safetensors_bytes(entries, None)


def make(name, out):
    with tempfile.TemporaryDirectory() as work:
        adapter_dir, manifest, draw, logits, cases, how = build(name, work, range(MAX_DRAWS))
        path = os.path.join(out, name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        shutil.copy(os.path.join(adapter_dir, "adapter_config.json"), path)
        if manifest is None:
            shutil.copy(os.path.join(adapter_dir, "adapter_model.bin"), path)
        else:
            fw.write_manifest(path, manifest)
    base, kwargs, fmt, desc = VARIANTS[name]
    with open(os.path.join(path, "reference.safetensors"), "wb") as f:
        f.write(logits_file(logits))
    ref = {
        "base": base,
        "variant": desc,
        "lora_config": kwargs,
        "format": fmt,
        "reference": how + "; the adapter loaded by PeftModel.from_pretrained",
        "logits": "reference.safetensors holds adapter.caseN.logits and base.caseN.logits "
                  "[len(input_ids), vocab_size] float32",
        "greedy_mode": "full_recompute",
        "prompt_draw": draw,
        "cases": cases,
    }
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print("%-14s prompt draw %d, min margins %s" % (name, draw, ", ".join(
        "%.4f/%.4f" % (c["adapter"]["min_greedy_margin"], c["base"]["min_greedy_margin"]) for c in cases)), flush=True)


def check(name, out):
    path = os.path.join(out, name)
    with open(os.path.join(path, "reference.json")) as f:
        ref = json.load(f)
    draw = ref["prompt_draw"]
    if [c["input_ids"] for c in ref["cases"]] != prompts(name, draw):
        raise AssertionError("%s: the reference's prompts are not the variant's" % name)
    with tempfile.TemporaryDirectory() as work:
        adapter_dir, manifest, _, logits, cases, _ = build(name, work, [draw])
        with open(os.path.join(path, "adapter_config.json")) as a, \
                open(os.path.join(adapter_dir, "adapter_config.json")) as b:
            if config_key(json.load(a)) != config_key(json.load(b)):
                raise AssertionError("%s: adapter_config.json differs from PEFT's" % name)
        if manifest is None:
            import torch
            sd = torch.load(os.path.join(path, "adapter_model.bin"), weights_only=True)
            fresh = torch.load(os.path.join(adapter_dir, "adapter_model.bin"), weights_only=True)
            if sorted(sd) != sorted(fresh) or any(not torch.equal(sd[k], fresh[k]) for k in sd):
                raise AssertionError("%s: adapter_model.bin holds other values" % name)
        else:
            with open(os.path.join(path, fw.MANIFEST)) as f:
                stored = json.load(f)
            if fw.materialise(stored) != fw.materialise(manifest) or stored["fnv1a64"] != manifest["fnv1a64"]:
                raise AssertionError("%s: the manifest builds other files than PEFT's" % name)
    stored = fw_read_logits(os.path.join(path, "reference.safetensors"))
    worst = max(float(np.abs(logits[k] - stored[k]).max()) for k in logits)
    same = all(c[w]["greedy_new_ids"] == r[w]["greedy_new_ids"]
               for c, r in zip(cases, ref["cases"]) for w in ("adapter", "base"))
    if worst > 2e-6 or not same or sorted(stored) != sorted(logits):
        raise AssertionError("%s: the reference is not reproduced (logits differ by %g)" % (name, worst))
    print("%-14s files and reference reproduced (max |diff| %.1e)" % (name, worst), flush=True)


def config_key(config):
    """adapter_config.json's fields, a target_modules list as the set PEFT holds (it
    writes the set in hash order)."""
    config = dict(config)
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    return config


# ---- a check without torch: the numpy port of llama / qwen2 -------------------------------

def module_scaling(config, module):
    """PEFT's scaling of one adapted module: its alpha (alpha_pattern, else lora_alpha)
    over its rank (rank_pattern, else r), or over sqrt(rank) with use_rslora."""
    import re

    def pick(pattern, default):
        for key, v in (pattern or {}).items():
            if re.match(r"(.*\.)?(%s)$" % key, module):
                return v
        return default
    r, alpha = pick(config.get("rank_pattern"), config["r"]), pick(config.get("alpha_pattern"), config["lora_alpha"])
    return alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r


def check_port(name, out):
    """The references of a llama or qwen2 safetensors adapter against make_quant_fixtures.py's
    float64 numpy port fed the base's weights with scaling * B A added (numpy only):
    logits within 2e-6, greedy tokens identical, for the adapter and the base."""
    import make_quant_fixtures as mq
    path = os.path.join(out, name)
    with open(os.path.join(path, "reference.json")) as f:
        ref = json.load(f)
    with open(os.path.join(path, "adapter_config.json")) as f:
        acfg = json.load(f)
    with open(os.path.join(fw.FIXTURES, ref["base"], "config.json")) as f:
        config = json.load(f)
    base = {k: v[1] for data in fw.materialise(fw.load_manifest(ref["base"])).values() if data[:1] != b"{"
            for k, v in mq.read_safetensors(data).items()}
    with open(os.path.join(path, fw.MANIFEST)) as f:
        adapter = mq.read_safetensors(fw.materialise(json.load(f))["adapter_model.safetensors"])
    merged = dict(base)
    for key, (_, a) in adapter.items():
        if ".lora_A." in key:
            module = key[len("base_model.model."):key.index(".lora_A.")]
            b = adapter[key.replace(".lora_A.", ".lora_B.")][1]
            merged[module + ".weight"] = merged[module + ".weight"] + module_scaling(acfg, module) * (b @ a)
    stored = fw_read_logits(os.path.join(path, "reference.safetensors"))
    worst = 0.0
    for i, c in enumerate(ref["cases"]):
        for who, w in (("adapter", merged), ("base", base)):
            lg = mq.port_logits(config, w, c["input_ids"])
            worst = max(worst, float(np.abs(lg - stored["%s.case%d.logits" % (who, i)]).max()))
            if mq.port_greedy(config, w, c["input_ids"])[0] != c[who]["greedy_new_ids"]:
                raise AssertionError("%s: the port's greedy tokens differ (%s, case %d)" % (name, who, i))
    if worst > 2e-6:
        raise AssertionError("%s: the port's logits differ by %g" % (name, worst))
    print("%-14s port reproduces the reference (max |diff| %.1e)" % (name, worst), flush=True)


PORTED = ("llama", "qwen2")


def fw_read_logits(path):
    import struct
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for k, e in header.items():
        a, b = e["data_offsets"]
        out[k] = np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f4").reshape(e["shape"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=LORA_DIR, help="fixture folder (default: %(default)s)")
    ap.add_argument("--only", nargs="*", help="variants (default: all)")
    ap.add_argument("--check", action="store_true", help="check the fixtures instead of making them")
    ap.add_argument("--port", action="store_true",
                    help="check the references of the llama and qwen2 safetensors adapters against "
                         "a float64 numpy port instead (numpy only)")
    args = ap.parse_args()
    names = args.only or sorted(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        sys.exit("unknown variants %s; known: %s" % (unknown, sorted(VARIANTS)))
    if args.port:
        failed = 0
        for name in names:
            if VARIANTS[name][0] in PORTED and VARIANTS[name][2] == "safetensors":
                try:
                    check_port(name, args.out)
                except Exception as e:
                    failed += 1
                    print("%s: FAILED: %s: %s" % (name, type(e).__name__, e), flush=True)
        return 1 if failed else 0
    import torch
    torch.set_grad_enabled(False)
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    for name in names:
        try:
            (check if args.check else make)(name, args.out)
        except Exception as e:  # report every variant that fails
            failed += 1
            print("%s: FAILED: %s: %s" % (name, type(e).__name__, e), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
