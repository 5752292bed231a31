#!/usr/bin/env python3
"""Writes the sample spot availability traces shipped with Kiln's scenarios.

They are SYNTHETIC: a seeded two-state process (capacity there / gone) with
lognormal durations, written in the SkyPilot trace format
({"metadata": {"gap_seconds": G}, "data": [available instance counts]}).
They exercise the simulator; they are not measurements of any cloud.

Real traces: skypilot-org/spot-traces (the "Can't Be Late" paper's data) is
in the same format and also holds available-instance counts (1 = available),
so a scenario names its files as it names these, without "invert". Do not set
"invert": true for them: that reads every available tick as unavailable and
back. "invert" is for 0/1 logs that mark a failed launch or a preemption with
1. See ../README.md ("models") for both conventions and how to point a
scenario at a clone of that repository (not shipped: it has no licence file).

Run: python3 make_traces.py   (rewrites the .json files next to it)
"""
import json
import math
import random


def trace(seed, ticks, gap, up_median, down_median, sigma, max_count):
    rng = random.Random(seed)
    data = []
    up = True
    while len(data) < ticks:
        median = up_median if up else down_median
        length = max(1, round(median * math.exp(sigma * rng.gauss(0, 1)) / gap))
        if up:
            level = rng.randint(max(1, max_count // 2), max_count)
            for _ in range(length):
                # Capacity wobbles a little while it is there.
                data.append(max(1, min(max_count, level + rng.choice([-1, 0, 0, 0, 1]))))
        else:
            data.extend([0] * length)
        up = not up
    return {"metadata": {"gap_seconds": gap, "note": "synthetic sample trace of available-instance counts (not inverted), see make_traces.py"},
            "data": data[:ticks]}


def write(name, t):
    with open(name, "w") as f:
        json.dump(t, f, separators=(",", ":"))
        f.write("\n")


# 7 days at 5-minute ticks, up to 8 instances: gone for ~1 h about every ~8 h.
write("steady_8.json", trace(7, 7 * 288, 300, 8 * 3600, 3600, 0.8, 8))
# 7 days at 10-minute ticks, one instance: volatile, gone ~40% of the time.
write("volatile_1.json", trace(11, 7 * 144, 600, 3 * 3600, 2 * 3600, 1.0, 1))
