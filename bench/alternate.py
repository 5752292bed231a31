#!/usr/bin/env python3
"""Runs Google Benchmark binaries alternately and compares them run by run.

This VM's speed swings by up to 2x from one hour to the next, so a figure is
only compared with one measured in the same minutes: two builds of a bench
(say, main and a change) are run in turns, N rounds, and each round gives one
ratio. With --concurrent, each round starts the binaries at the same time (one
per core on a 2-core machine), so that both see the same neighbours; they then
share the last-level cache, and run slower than alone.

  python3 bench/alternate.py --filter 'BM_EngineLifecycle/prepared/100000' \\
      --rounds 8 /tmp/old/build/bench/engine_bench build/bench/engine_bench

Prints each round's real times, then per binary the median, the fastest and
the slowest, and the median of the per-round ratios to the first binary.
Exit status 2 if a binary fails or its filter matches no benchmark.
"""

import argparse
import json
import statistics
import subprocess
import sys


def fail(message):
    print(f"alternate.py: {message}", file=sys.stderr)
    sys.exit(2)


def start(binary, pattern):
    """Starts one run of `binary` on the benchmarks matching `pattern`."""
    try:
        return subprocess.Popen(
            [binary, f"--benchmark_filter={pattern}", "--benchmark_format=json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError as e:
        fail(f"cannot run {binary}: {e.strerror}")


def real_time(process, binary):
    """The real time of the first benchmark the run reports, in its own unit."""
    out, _ = process.communicate()
    if process.returncode != 0:
        fail(f"{binary} exited with status {process.returncode}")
    try:
        report = json.loads(out) if out.strip() else {}
    except json.JSONDecodeError:
        fail(f"{binary} printed no JSON report")
    runs = [b for b in report.get("benchmarks", [])
            if b.get("run_type", "iteration") == "iteration"]
    if not runs:
        fail(f"{binary}: the filter matches no benchmark")
    return runs[0]["real_time"], runs[0].get("time_unit", "ns"), runs[0]["name"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filter", required=True, help="--benchmark_filter for every binary")
    parser.add_argument("--rounds", type=int, default=6, help="rounds (default 6)")
    parser.add_argument("--concurrent", action="store_true",
                        help="start the binaries of a round together instead of in turn")
    parser.add_argument("binaries", nargs="+", help="the first is the baseline")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    n = len(args.binaries)
    times = [[] for _ in range(n)]  # by position: a binary may be given twice
    unit = name = None
    for r in range(args.rounds):
        # Each round starts with a different binary, so that none always runs first.
        order = [(r + k) % n for k in range(n)]
        if args.concurrent:
            started = [(i, start(args.binaries[i], args.filter)) for i in order]
            results = [(i, real_time(p, args.binaries[i])) for i, p in started]
        else:
            results = [(i, real_time(start(args.binaries[i], args.filter), args.binaries[i]))
                       for i in order]
        for i, (t, unit, name) in results:
            times[i].append(t)
        print(f"round {r + 1}: " + "  ".join(f"{t[-1]:.4g}" for t in times), flush=True)

    print(f"\n{name} (real time, {unit}; {args.rounds} rounds"
          f"{', concurrent' if args.concurrent else ', in turn'})")
    for i, t in enumerate(times):
        ratio = statistics.median(x / y for x, y in zip(t, times[0]))
        print(f"  median {statistics.median(t):10.4g}  fastest {min(t):10.4g}  "
              f"slowest {max(t):10.4g}  ratio to first {ratio:6.3f}  {args.binaries[i]}")


if __name__ == "__main__":
    main()
