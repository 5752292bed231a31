#!/usr/bin/env python3
"""Kiln's event loop against SimGrid 3.32 on the same timed-wake-up pattern, side by side.

N actors each sleep K times of simulated time, all with dt = 1 s ("same" periods) or actor a
with dt = (1 + a/N) s ("distinct" periods, so that wake-ups arrive out of time order):
  * SimGrid: bench/simgrid_sleepers (s4u actors calling this_actor::sleep_for), run with the raw
    context factory and 64 KiB stacks, the fastest settings for many actors;
  * Kiln: BM_Sleepers/N/K and BM_SleepersDistinctPeriods/N/K of bench/event_loop_bench (each
    actor a callback that reschedules itself on a virtual event loop).
The figures are timed wake-ups per second of CPU time (both sides are single-threaded; on a
shared machine CPU time is far stabler than wall time), creation of the actors included; the
ratio of wall-clock rates is printed too. Each side runs --runs times and its best run counts
(the least disturbed by other load). The ratio is Kiln / SimGrid; the target is >= 10.

Usage (after a Release build):
  bench/compare_simgrid.py --build-dir build
  bench/compare_simgrid.py --build-dir build --cases 1000x1000 --periods same --runs 5 \
      --min-ratio 10
Exit status: 0, or 1 if --min-ratio is given and a case falls below it, 2 on a setup error.
"""

import argparse
import json
import os
import re
import subprocess
import sys

SIMGRID_FLAGS = [
    "--cfg=contexts/factory:raw",
    "--cfg=contexts/stack-size:64",
    "--log=root.thresh:critical",
]


def simgrid_rates(binary, actors, sleeps, periods):
    """Returns (cpu, wall) wake-ups per second."""
    out = subprocess.run([binary, str(actors), str(sleeps), periods] + SIMGRID_FLAGS,
                         check=True, capture_output=True, text=True).stdout
    cpu = re.search(r"cpu_events_per_s=(\S+)", out)
    wall = re.search(r"wall_events_per_s=(\S+)", out)
    if not cpu or not wall:
        raise RuntimeError(f"unexpected output from {binary}: {out!r}")
    return float(cpu.group(1)), float(wall.group(1))


def kiln_rates(binary, actors, sleeps, periods):
    """Returns (cpu, wall) wake-ups per second of the best iteration run."""
    name = "BM_Sleepers" if periods == "same" else "BM_SleepersDistinctPeriods"
    out = subprocess.run(
        [binary, f"--benchmark_filter=^{name}/{actors}/{sleeps}$", "--benchmark_format=json"],
        check=True, capture_output=True, text=True).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]
    if not runs:
        raise RuntimeError(f"{name}/{actors}/{sleeps} did not run (is it registered?)")
    unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    best = max(runs, key=lambda b: b["events/s"])
    wall = actors * sleeps / (best["real_time"] * unit[best["time_unit"]])
    return best["events/s"], wall


def best_of(runs, measure):
    results = [measure() for _ in range(runs)]
    return max(r[0] for r in results), max(r[1] for r in results)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default="build", help="CMake build directory (Release)")
    parser.add_argument("--cases", nargs="+", default=["1000x1000", "10000x100"],
                        help="NxK cases (BM_Sleepers must register each)")
    parser.add_argument("--periods", nargs="+", default=["same", "distinct"],
                        choices=["same", "distinct"], help="sleep periods of the actors")
    parser.add_argument("--runs", type=int, default=3, help="runs per side; the best counts")
    parser.add_argument("--min-ratio", type=float, default=None,
                        help="exit 1 if a case's ratio is below this")
    args = parser.parse_args()

    simgrid = os.path.join(args.build_dir, "bench", "simgrid_sleepers")
    kiln = os.path.join(args.build_dir, "bench", "event_loop_bench")
    for binary in (simgrid, kiln):
        if not os.access(binary, os.X_OK):
            print(f"missing {binary}: build it first (simgrid_sleepers needs libsimgrid-dev)",
                  file=sys.stderr)
            return 2

    print(f"{'case (N x K)':>14} {'periods':>9} {'simgrid ev/s':>13} {'kiln ev/s':>11} "
          f"{'ratio':>6}   {'wall ratio':>10}")
    below = False
    for case in args.cases:
        actors, sleeps = (int(x) for x in case.lower().split("x"))
        for periods in args.periods:
            sg_cpu, sg_wall = best_of(args.runs,
                                      lambda: simgrid_rates(simgrid, actors, sleeps, periods))
            kl_cpu, kl_wall = best_of(args.runs,
                                      lambda: kiln_rates(kiln, actors, sleeps, periods))
            ratio = kl_cpu / sg_cpu
            print(f"{actors:>6} x {sleeps:<5} {periods:>9} {sg_cpu:>13.3e} {kl_cpu:>11.3e} "
                  f"{ratio:>6.1f}   {kl_wall / sg_wall:>10.1f}")
            if args.min_ratio is not None and ratio < args.min_ratio:
                below = True
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
