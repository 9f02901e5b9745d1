#!/usr/bin/env python3
"""Draws llama8b_table.py's table as an SVG bar chart (share of the roofline per figure,
ours and transformers side by side), without plotting libraries.

Usage: plot_table.py TABLE.md OUT.svg
"""
import sys


def rows(path):
    out = []
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 6 or not cells[4].endswith("%") or cells[0].startswith("("):
            continue  # (also the header, the separator and the indented sub-rows)
        ours = float(cells[4].rstrip("%"))
        hf = float(cells[5].rstrip("%")) if cells[5].endswith("%") else None
        out.append((cells[0], ours, hf))
    return out


def main():
    data = rows(sys.argv[1])
    w, bar, gap, left, top = 760, 16, 22, 230, 40
    h = top + len(data) * (2 * bar + gap) + 40
    scale = (w - left - 40) / 100.0
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="20" font-size="14">Share of the H200 roofline, '
           'Llama-3-8B shape, bf16</text>']
    for pct in range(0, 101, 25):
        x = left + pct * scale
        svg.append(f'<line x1="{x}" y1="{top - 6}" x2="{x}" y2="{h - 30}" stroke="#ddd"/>')
        svg.append(f'<text x="{x}" y="{h - 14}" text-anchor="middle">{pct}%</text>')
    y = top
    for name, ours, hf in data:
        svg.append(f'<text x="{left - 8}" y="{y + bar + 4}" text-anchor="end">{name}</text>')
        svg.append(f'<rect x="{left}" y="{y}" width="{ours * scale:.1f}" height="{bar}" '
                   'fill="#2b6cb0"/>')
        svg.append(f'<text x="{left + ours * scale + 4:.1f}" y="{y + bar - 4}">'
                   f'tachyon {ours:.1f}%</text>')
        if hf is not None:
            svg.append(f'<rect x="{left}" y="{y + bar}" width="{hf * scale:.1f}" '
                       f'height="{bar}" fill="#aaa"/>')
            svg.append(f'<text x="{left + hf * scale + 4:.1f}" y="{y + 2 * bar - 4}">'
                       f'transformers {hf:.1f}%</text>')
        y += 2 * bar + gap
    svg.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(svg) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
