#!/usr/bin/env python3
"""The Llama-3-8B table: our figures (tachyon_gpu_bench RESULT lines), transformers'
(hf_baseline.py JSON lines) and the roofline of each figure on the H200.

Rooflines: decode reads every weight and each sequence's KV cache once per step
(bytes / 4.26 TB/s, the device-to-device copy rate measured on the lent H200);
prefill does the step's matrix FLOPs (every linear layer on every prompt token, the
lm_head on one row per sequence, causal attention) at 809 TFLOP/s (bf16 GEMM 8192^3 on
the same machine).

Usage: llama8b_table.py CONFIG.json BENCH.log HF.log
"""
import json
import re
import sys

BW = 4.26e12
FLOPS = 809e12


def main():
    cfg = json.load(open(sys.argv[1]))
    ours, hf = {}, {}
    for line in open(sys.argv[2]):
        if line.startswith("RESULT "):
            f = line.split()
            ours[f[1]] = f[2:]
    try:
        for line in open(sys.argv[3]):
            if line.startswith("{"):
                j = json.loads(line)
                hf[j["figure"]] = j
    except OSError:
        pass
    d, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", d // H)
    params = int(ours["params"][0]) if "params" in ours else None
    if params is None:
        print("no RESULT params line: the benchmark did not run")
        return 1
    weight_bytes = 2 * params
    kv_per_token = L * 2 * KV * hd * 2
    embed = V * d
    lm_head = 0 if cfg.get("tie_word_embeddings") else V * d
    body = params - embed - lm_head  # every linear layer a token goes through

    rows = []
    for key in sorted(ours):
        m = re.match(r"prefill_(\d+)x(\d+)_ms", key)
        if m:
            s, n = int(m.group(1)), int(m.group(2))
            flops = 2 * s * n * body + 2 * s * V * d + s * L * 4 * H * hd * n * (n + 1) / 2
            roof = s * n / (flops / FLOPS)
            ht = hf.get(f"prefill_{s}x{n}", {}).get("tokens_per_s")
            rows.append((f"prefill {s} x {n}", float(ours[key][2]), ht, roof))
    for key in sorted(ours, key=lambda k: (len(k), k)):
        m = re.match(r"decode_b(\d+)_ctx(\d+)_sampled_ms", key)
        if m:
            b, c = int(m.group(1)), int(m.group(2))
            steps_ctx = c + 12  # the median timed step's context
            roof = b / ((weight_bytes + b * steps_ctx * kv_per_token) / BW)
            ht = hf.get(f"decode_b{b}_ctx{c}", {}).get("tokens_per_s")
            rows.append((f"decode batch {b}, context {c}", float(ours[key][2]), ht, roof))
            for tag, label in (("graphs", "logits of every row to the host"),
                               ("eager", "graphs off, logits to the host")):
                other = ours.get(f"decode_b{b}_ctx{c}_{tag}_ms")
                if other:
                    rows.append((f"  (same, {label})", float(other[2]), None, roof))
    print(f"weights {weight_bytes / 1e9:.2f} GB ({params / 1e9:.3f} B parameters), "
          f"KV {kv_per_token / 1024:.0f} KiB per token; {BW / 1e12:.2f} TB/s, "
          f"{FLOPS / 1e12:.0f} TFLOP/s\n")
    print("| figure | ours (tok/s) | transformers (tok/s) | roofline (tok/s) | ours / roofline "
          "| transformers / roofline | ours / transformers |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, o, h, r in rows:
        hs = f"{h:,.0f}" if h else "-"
        hr = f"{h / r:.1%}" if h else "-"
        oh = f"{o / h:.2f}x" if h else "-"
        print(f"| {name} | {o:,.0f} | {hs} | {r:,.0f} | {o / r:.1%} | {hr} | {oh} |")
    checks = [k for k in ours if k.startswith("check_")]
    for k in sorted(checks):
        print(f"\n{k}: {' '.join(ours[k])}", end="")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
