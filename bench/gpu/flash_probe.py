#!/usr/bin/env python3
"""Reads the wgmma flash kernel's probe records (src/backend/cuda/flash_probe.cuh).

Usage: flash_probe.py PREFIX.<blocks> [...]   (files written by a PROBE=1 build run with
TACHYON_FLASH_PROBE=PREFIX). Prints, per file: the clock the stamps imply, a mean
block's phases (start, tile loop, end, the SM's gap between blocks), the tile loop's
cost per tile (least squares over blocks of different lengths), and where each
consumer warpgroup and loader spends its cycles per tile. Plain Python: the GPU
machine has no numpy.
"""
import collections
import statistics as st
import struct
import sys

WORDS = 32
PHASES = ["wait K", "wait V", "turn", "issue->S", "S->PV", "softmax", "rest"]
CONSUMER, LOADER = 12, 12 + 2 * len(PHASES)


def fit(x, y):
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    b = sxy / sxx if sxx else 0.0
    return my - b * mx, b


def report(path):
    raw = open(path, "rb").read()
    recs = [struct.unpack_from("<%dI" % WORDS, raw, 4 * WORDS * i) for i in range(len(raw) // (4 * WORDS))]
    recs = [r for r in recs if r[0] or r[1]]
    if not recs:
        print(f"{path}: no records")
        return
    g0 = [r[0] | (r[1] << 32) for r in recs]
    g1 = [r[9] | (r[10] << 32) for r in recs]
    sm = [r[2] for r in recs]
    tiles = [r[3] for r in recs]
    stamps = [r[4:9] for r in recs]  # item, Q, first K, loop end, stored
    ghz = st.median([s[4] / max(1, b - a) for s, a, b in zip(stamps, g0, g1)])

    def us(cycles):
        return cycles / ghz / 1e3

    span = (max(g1) - min(g0)) / 1e3
    print(f"{path}: {len(recs)} blocks on {len(set(sm))} SMs, span {span:.1f} us, clock {ghz:.2f} GHz, "
          f"{sum(tiles)} tiles")

    def mean(f):
        return us(st.mean([f(s) for s in stamps]))

    print(f"  mean block (us): item+wait {mean(lambda s: s[0]):.2f}  Q {mean(lambda s: s[1] - s[0]):.2f}  "
          f"first K {mean(lambda s: s[2] - s[1]):.2f}  loop {mean(lambda s: s[3] - s[2]):.2f}  "
          f"store {mean(lambda s: s[4] - s[3]):.2f}  total {mean(lambda s: s[4]):.2f}")
    a, b = fit(tiles, [us(s[3] - s[2]) for s in stamps])
    print(f"  loop = {a:.2f} + {b:.3f} us x tiles ({b * ghz * 1e3:.0f} cycles a tile)")

    n_tiles = sum(tiles)
    for wg in range(2):
        base = CONSUMER + len(PHASES) * wg
        tot = [sum(r[base + i] for r in recs) for i in range(len(PHASES))]
        per = [t / n_tiles for t in tot]
        print(f"  warpgroup {wg}, cycles a tile: " +
              "  ".join(f"{n} {v:.0f}" for n, v in zip(PHASES, per)) + f"  (sum {sum(per):.0f})")
    for half, name in ((0, "K"), (1, "V")):
        base = LOADER + 2 * half
        wait = sum(r[base] for r in recs) / n_tiles
        rest = sum(r[base + 1] for r in recs) / n_tiles
        print(f"  {name} loader, cycles a tile: waiting for an empty stage {wait:.0f}, the rest {rest:.0f}")

    per_sm = collections.defaultdict(list)
    for i, s in enumerate(sm):
        per_sm[s].append((g0[i], g1[i]))
    gaps = []
    for v in per_sm.values():
        v.sort()
        gaps += [b[0] - a[1] for a, b in zip(v, v[1:])]
    if gaps:
        gaps.sort()
        print(f"  an SM's gap between blocks (ns): median {st.median(gaps):.0f}, p90 {gaps[9 * len(gaps) // 10]}")
    busy = sum(b - a for a, b in zip(g0, g1))
    print(f"  SMs busy {busy / (len(per_sm) * (max(g1) - min(g0))):.3f} of the span")


for p in sys.argv[1:]:
    report(p)
