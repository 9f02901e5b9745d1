#!/usr/bin/env python3
"""Summarises `ncu --csv --metrics gpu__time_duration.sum` output of
`tachyon_gpu_bench --profile-steps` (one prefill step, one decode step at batch 1, one at
batch 64, in that order).

The kernels are split into the three steps at the two embedding lookups that start the
decode steps (every step starts with one), then grouped per step by kernel name, grid
and block: count, total and mean microseconds, share of the step.

Usage: ncu_summary.py NCU.csv
"""
import csv
import re
import sys
from collections import OrderedDict


def short(name):
    name = re.sub(r"\(anonymous namespace\)::|<unnamed>::", "", name)
    name = re.sub(r"tachyon::cuda::", "", name)
    return name[:90]


def main():
    rows = []
    with open(sys.argv[1], newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        us = v / 1e3 if unit.startswith("n") else v if unit.startswith("u") else v * 1e3
        rows.append((short(r["Kernel Name"]), r.get("Grid Size", ""), r.get("Block Size", ""), us))
    starts = [i for i, r in enumerate(rows) if "embedding_kernel" in r[0]]
    if len(starts) < 3:
        starts = [0, len(rows), len(rows)]
    steps = [("prefill 1 x 1024", rows[starts[0]:starts[1]]),
             ("decode batch 1", rows[starts[1]:starts[2]]),
             ("decode batch 64", rows[starts[2]:])]
    for title, ks in steps:
        total = sum(k[3] for k in ks)
        print(f"\n== {title}: {len(ks)} kernels, {total:.1f} us of kernel time")
        groups = OrderedDict()
        for name, grid, block, us in ks:
            g = groups.setdefault((name, grid, block), [0, 0.0])
            g[0] += 1
            g[1] += us
        for (name, grid, block), (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            if us < 0.002 * total:
                continue
            print(f"{us:10.1f} us {100 * us / max(total, 1e-9):5.1f}%  n={n:<4d} mean={us / n:8.2f}"
                  f"  grid={grid:<16} block={block:<12} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
