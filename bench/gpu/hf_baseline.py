#!/usr/bin/env python3
"""Hugging Face transformers baseline on the same GPU and shape as our benchmarks.

Runs a Llama-shaped model with random bf16 weights (initialised on the GPU) and prints
one JSON line per figure: prefill tokens/s for 1x1024 and 8x1024 prompts, and greedy
`generate` decode tokens/s at batch 1 and 32. With --decode B,... it also times single
decode steps (one forward of one token per sequence through the model's KV cache after
a --ctx-token prefill, logits and argmax included; no `generate` loop), which is the
figure our decode benchmark measures. Timing: CUDA events after warm-up, median of
repeats.

Usage: python3 hf_baseline.py [--config CONFIG.json] [--quick] [--decode 1,64]
                              [--ctx 1024] [--no-generate]
"""
import argparse
import json
import statistics
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                 max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                 tie_word_embeddings=False)


def timed(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--decode", default="")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--no-generate", action="store_true")
    args = ap.parse_args()
    cfg = dict(LLAMA3_8B)
    if args.config:
        cfg.update(json.load(open(args.config)))
    config = LlamaConfig(**{k: v for k, v in cfg.items() if k in LLAMA3_8B})
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"figure": "params", "value": params,
                      "weight_gb": params * 2 / 1e9}), flush=True)
    vocab = config.vocab_size
    repeats = 3 if args.quick else 10

    with torch.inference_mode():
        for batch in (1, 8):
            ids = torch.randint(0, vocab, (batch, 1024), device="cuda")
            t = timed(lambda: model(ids, use_cache=False, logits_to_keep=1), 2, repeats)
            print(json.dumps({"figure": f"prefill_{batch}x1024", "tokens_per_s": batch * 1024 / t,
                              "seconds": t}), flush=True)
        for batch in [int(b) for b in args.decode.split(",") if b]:
            ids = torch.randint(0, vocab, (batch, args.ctx), device="cuda")
            out = model(ids, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
            del out
            times = []
            for step in range(19 if not args.quick else 8):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                out = model(nxt, past_key_values=cache, use_cache=True)
                nxt = out.logits[:, -1:].argmax(-1)
                end.record()
                torch.cuda.synchronize()
                if step >= 3:
                    times.append(start.elapsed_time(end) / 1000.0)
            t = statistics.median(times)
            print(json.dumps({"figure": f"decode_b{batch}_ctx{args.ctx}",
                              "tokens_per_s": batch / t, "seconds": t}), flush=True)
            del cache, out
            torch.cuda.empty_cache()
        for batch, new in (() if args.no_generate else ((1, 128), (32, 128))):
            ids = torch.randint(0, vocab, (batch, 128), device="cuda")
            gen = lambda: model.generate(ids, attention_mask=torch.ones_like(ids),
                                         max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                         pad_token_id=0)
            t = timed(gen, 1, 2 if args.quick else 3)
            print(json.dumps({"figure": f"generate_batch{batch}", "tokens_per_s": batch * new / t,
                              "seconds": t}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
