#!/usr/bin/env python3
"""Writes synthetic spot availability traces that look like measured ones, in Kiln's trace format.

Published availability traces (for example SkyPilot's spot-traces, probed every 10 minutes) show
spot capacity that stays for hours, sometimes days, then disappears for a while, with run lengths
far more spread out than exponential. This generator draws such traces as an alternating renewal
process: an available run, then an unavailable one, and so on, each run's length drawn from a
heavy-tailed distribution (lognormal by default, or Pareto). The mean available run is
--mean-up-hours; the mean unavailable run follows from --availability, the long-run fraction of
ticks with spot. The traces are synthetic, seeded and reproducible; they are not measurements of
any cloud.

Output: {"metadata": {"gap_seconds": G, ...}, "data": [counts...]}, data[i] the spot instances
available during tick i (0 when none; up to --max-count while available).

  bench/spot_traces.py --availability 0.5 --days 14 --seed 3 -o zone_50.json
"""

import argparse
import json
import math
import random
import sys


def run_length(rng, mean, dist, spread):
    """A positive duration with the given mean: lognormal (spread = sigma) or Pareto (spread =
    shape alpha > 1; smaller is heavier-tailed)."""
    if dist == "lognormal":
        return rng.lognormvariate(math.log(mean) - spread * spread / 2, spread)
    if dist == "pareto":
        if spread <= 1:
            raise ValueError("a Pareto shape must exceed 1 for a finite mean")
        return mean * (spread - 1) / spread * rng.paretovariate(spread)
    raise ValueError("unknown distribution %r" % dist)


def generate(seed, days=14.0, gap_seconds=600, availability=0.5, mean_up_hours=4.0,
             dist="lognormal", spread=1.2, max_count=1):
    """Returns the trace document (a dict)."""
    if not 0 < availability <= 1:
        raise ValueError("availability must be in (0, 1]")
    rng = random.Random(seed)
    ticks = int(round(days * 86400 / gap_seconds))
    mean_up = mean_up_hours * 3600
    mean_down = mean_up * (1 - availability) / availability
    data = []
    # Start at a random point of the cycle: available with the long-run probability.
    up = rng.random() < availability
    while len(data) < ticks:
        mean = mean_up if up else mean_down
        if mean <= 0:
            length = ticks
        else:
            length = max(1, int(round(run_length(rng, mean, dist, spread) / gap_seconds)))
        if up:
            level = rng.randint(max(1, (max_count + 1) // 2), max_count)
            data.extend([level] * length)
        else:
            data.extend([0] * length)
        up = not up
    data = data[:ticks]
    return {"metadata": {"gap_seconds": gap_seconds,
                         "note": "synthetic (bench/spot_traces.py): %s runs, seed %d, "
                                 "availability %.2f, mean available run %gh"
                                 % (dist, seed, availability, mean_up_hours)},
            "data": data}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--availability", type=float, default=0.5,
                   help="long-run fraction of ticks with spot available")
    p.add_argument("--mean-up-hours", type=float, default=4.0, help="mean available run")
    p.add_argument("--dist", choices=("lognormal", "pareto"), default="lognormal")
    p.add_argument("--spread", type=float, default=1.2,
                   help="lognormal sigma, or Pareto shape alpha (> 1)")
    p.add_argument("--days", type=float, default=14.0)
    p.add_argument("--gap-seconds", type=int, default=600)
    p.add_argument("--max-count", type=int, default=1, help="instances available when up")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    a = p.parse_args(argv)
    doc = generate(a.seed, a.days, a.gap_seconds, a.availability, a.mean_up_hours, a.dist,
                   a.spread, a.max_count)
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
