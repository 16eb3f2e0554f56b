#!/usr/bin/env python3
"""Flame-style chart of one prefill and one decode forward from a dsv4 trace.

Usage: /usr/bin/python3 bench/profile_chart.py TRACE.json OUT.png

Reads a trace written with the kernel level (`dsv4 bench --profile --profile-level kernel`),
takes the thread that ran the "model.forward" spans, and draws the first prefill forward (the
one with the most rows) and the last decode forward (the fewest rows) as stacked bars: x is
time from the forward's start in ms, each row one nesting depth (forward, layer, op, sub-op),
colours by op name. Needs matplotlib (Debian python3-matplotlib). See docs/profiling.md.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load_spans(path):
    with open(path) as f:
        trace = json.load(f)
    spans = {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") != "kernel":
            continue
        spans.setdefault(e["tid"], []).append(
            (e["ts"], e["ts"] + e["dur"], e["name"], e.get("args", {})))
    return spans


def pick_forwards(spans):
    forwards = [(tid, s) for tid, ss in spans.items() for s in ss if s[2] == "model.forward"]
    if not forwards:
        sys.exit("no model.forward spans: was the trace recorded with --profile-level kernel?")
    rows = lambda f: f[1][3].get("rows", 0)
    prefill = max(forwards, key=lambda f: (rows(f), -f[1][0]))
    decode = min(forwards, key=lambda f: (rows(f), -f[1][0]))
    picked = [("prefill", prefill)]
    if decode is not prefill:
        picked.append(("decode", decode))
    return picked


def nested(spans, forward):
    """Spans inside `forward` on its thread, with their nesting depth."""
    begin, end = forward[0], forward[1]
    inside = sorted((s for s in spans if s[0] >= begin and s[1] <= end),
                    key=lambda s: (s[0], -(s[1] - s[0])))
    out, stack = [], []
    for s in inside:
        while stack and s[0] >= stack[-1][1]:
            stack.pop()
        out.append((s, len(stack)))
        stack.append(s)
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    spans = load_spans(sys.argv[1])
    picked = pick_forwards(spans)
    fig, axes = plt.subplots(len(picked), 1, figsize=(16, 3.2 * len(picked)), squeeze=False)
    cmap = plt.get_cmap("tab20")
    colours = {}
    for ax, (label, (tid, forward)) in zip(axes[:, 0], picked):
        items = nested(spans[tid], forward)
        depth_max = max(d for _, d in items)
        for (b, e, name, _), depth in items:
            colour = colours.setdefault(name, cmap(len(colours) % 20))
            x, w = (b - forward[0]) / 1e3, (e - b) / 1e3
            ax.broken_barh([(x, w)], (depth_max - depth, 0.9), facecolors=colour,
                           edgecolor="white", linewidth=0.2)
            if w > (forward[1] - forward[0]) / 1e3 / 40:
                ax.text(x + w / 2, depth_max - depth + 0.45, name, ha="center", va="center",
                        fontsize=6, clip_on=True)
        ax.set_title(f"{label}: {forward[3].get('rows', '?')} rows, "
                     f"{(forward[1] - forward[0]) / 1e3:.2f} ms")
        ax.set_xlabel("ms from the forward's start")
        ax.set_yticks([])
        ax.set_xlim(0, (forward[1] - forward[0]) / 1e3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=130)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
