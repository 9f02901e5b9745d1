#!/usr/bin/env python3
"""Summarises an nvidia-smi trace taken beside a benchmark run.

The trace is `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,
clocks_event_reasons.active --format=csv,noheader -lms N` (llama8b.sh writes one). Busy
samples (above 300 W) are split into those the software power cap limited (event reason
bit 0x4) and the rest; for each, the count, mean SM clock and mean power.

Usage: smi_summary.py TRACE.csv
"""
import statistics
import sys

POWER_CAP = 0x4
BUSY_W = 300.0


def parse(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 4 or not parts[1].endswith("MHz") or not parts[2].endswith("W"):
                continue  # a header or a line nvidia-smi could not fill
            try:
                clock = float(parts[1].split()[0])
                watts = float(parts[2].split()[0])
                reasons = int(parts[3], 16)
            except ValueError:
                continue
            rows.append((clock, watts, reasons))
    return rows


def describe(name, rows):
    if not rows:
        return f"{name}: none"
    clock = statistics.mean(r[0] for r in rows)
    watts = statistics.mean(r[1] for r in rows)
    return f"{name}: {len(rows)} samples, SM clock {clock:.0f} MHz, {watts:.0f} W on average"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    rows = parse(sys.argv[1])
    busy = [r for r in rows if r[1] > BUSY_W]
    capped = [r for r in busy if r[2] & POWER_CAP]
    print(f"nvidia-smi trace: {len(rows)} samples, {len(busy)} busy (> {BUSY_W:.0f} W)")
    print("  " + describe("power-capped", capped))
    print("  " + describe("busy, not capped", [r for r in busy if not r[2] & POWER_CAP]))


if __name__ == "__main__":
    main()
