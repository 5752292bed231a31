#!/usr/bin/env python3
"""`kiln simulate` against a minimal Python heapq model of the same HPO workload, one core each.

The workload: `--sweeps` HPO sweeps of `--trials` trials (100 x 1,000 = 100,000 jobs by default),
`--parallelism` at a time, a sweep a day, one GPU shape (ml.g5.xlarge, FastFile, work 12 min
median), the tuner's 20 s gap, warm pools kept for the job's 10-minute KeepAlivePeriodInSeconds;
no spot, no node failures, one policy (JobRequested), so both sides do the same work. The script
writes that scenario file for `kiln simulate` (kept with --scenario-out), and runs
bench/hpo_peer_model.py with the same parameters.

Figures: CPU seconds (user + system). Kiln's is the whole `kiln simulate` process (reading the
scenario, the run, the report); the Python model's is its simulation alone (time.process_time
around it, without the interpreter's start), so the ratio leans towards Python. Each side runs
--runs times, pinned to one core with `taskset -c CORE` when taskset exists; the median and the
best run are printed, and the ratio Python / Kiln of each. Both must agree on the work done: the
same jobs and completions, warm-hit rates within 0.01 and startup P50s within 10%, or the script
fails. `kiln simulate` does not report its event count; the model's is printed.

Usage (after building the kiln program, Release):
  python3 bench/simulate_vs_python.py --kiln build/tools/kiln/kiln --runs 5
  python3 bench/simulate_vs_python.py --sweeps 2 --trials 500 --runs 1   # a quick check
Exit status: 0; 1 if the two disagree on the work, or --min-ratio is given and the median ratio
is below it; 2 on a setup error (no kiln program, a run failing).
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "hpo_peer_model.py")


def scenario(a):
    horizon = int(a.sweeps * a.every)
    return {
        "name": f"hpo-{a.sweeps * a.trials}",
        "description": "bench/simulate_vs_python.py: HPO sweeps on one shape, warm pools, one policy",
        "seed": a.seed,
        "horizon": f"{horizon}s",
        "models": {"node_failures": False},
        "workloads": [{
            "kind": "hpo", "name": "hpo", "sweeps": a.sweeps, "every": f"{int(a.every)}s",
            "trials": a.trials, "parallelism": a.parallelism,
            "gap": {"median": "20s", "sigma": 0.5},
            "job": {"instance_type": "ml.g5.xlarge", "instance_count": 1, "input_mode": "FastFile",
                    "keep_alive": "10m", "work": {"median": "12m", "sigma": 0.6}},
        }],
        "policies": [{"keep_alive": "job_requested"}],
    }


def pinned(cmd, core):
    if core is not None and shutil.which("taskset"):
        return ["taskset", "-c", str(core)] + cmd
    return cmd


def run_child(cmd):
    """Runs cmd; returns (stdout, CPU seconds of the child: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {p.returncode}: {p.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p.stdout, cpu


def run_kiln(a, path):
    out, cpu = run_child(pinned([a.kiln, "simulate", path, "--format", "json"], a.core))
    policies = json.loads(out)["policies"]
    if len(policies) != 1:
        raise RuntimeError(f"expected one policy, got {len(policies)}")
    p = policies[0]
    return cpu, {"jobs": p["jobs"], "completed": p["completed"], "warm_hit_rate": p["warm_hit_rate"],
                 "startup_p50_s": p["startup_p50_seconds"], "events": None}


def run_python(a):
    cmd = [sys.executable, MODEL, "--sweeps", str(a.sweeps), "--trials", str(a.trials),
           "--parallelism", str(a.parallelism), "--every", str(a.every), "--seed", str(a.seed)]
    out, process_cpu = run_child(pinned(cmd, a.core))
    r = json.loads(out)
    return r["cpu_seconds"], process_cpu, r


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kiln", default="build/tools/kiln/kiln", help="the kiln program")
    p.add_argument("--sweeps", type=int, default=100)
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--parallelism", type=int, default=20)
    p.add_argument("--every", type=float, default=86400.0, help="seconds between sweeps")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--core", type=int, default=0, help="CPU to pin both to (-1: no pinning)")
    p.add_argument("--scenario-out", help="also keep the scenario file here")
    p.add_argument("--min-ratio", type=float, help="fail if the median ratio is below this")
    a = p.parse_args(argv)
    if a.core is not None and a.core < 0:
        a.core = None
    if a.sweeps < 1 or a.trials < 1 or a.parallelism < 1 or a.runs < 1 or a.every <= 0:
        p.error("--sweeps, --trials, --parallelism and --runs must be >= 1, --every > 0")
    if not (os.path.isfile(a.kiln) and os.access(a.kiln, os.X_OK)):
        print(f"no kiln program at {a.kiln} (build it: cmake --build build --target kiln)",
              file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="kiln-hpo-") as tmp:
        path = a.scenario_out or os.path.join(tmp, "hpo.json")
        with open(path, "w") as f:
            json.dump(scenario(a), f, indent=1)
            f.write("\n")
        kiln_cpu, py_cpu, py_process_cpu = [], [], []
        try:
            for _ in range(a.runs):  # in turns, so both see the same hour
                cpu, k = run_kiln(a, path)
                kiln_cpu.append(cpu)
                cpu, process_cpu, m = run_python(a)
                py_cpu.append(cpu)
                py_process_cpu.append(process_cpu)
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    jobs = a.sweeps * a.trials
    pinned_to = f"core {a.core}" if a.core is not None and shutil.which("taskset") else "not pinned"
    print(f"HPO, {jobs} jobs ({a.sweeps} sweeps x {a.trials} trials, {a.parallelism} at a time), "
          f"{a.runs} runs each, {pinned_to}")
    print(f"{'':24}{'jobs':>8}{'completed':>11}{'warm hits':>11}{'startup P50 s':>15}"
          f"{'events/job':>12}{'CPU s median':>14}{'best':>8}")
    for name, r, cpu in (("kiln simulate", k, kiln_cpu), ("Python heapq model", m, py_cpu)):
        ev = f"{r['events'] / r['jobs']:.2f}" if r.get("events") and r["jobs"] else "n/a"
        print(f"{name:24}{r['jobs']:>8}{r['completed']:>11}{r['warm_hit_rate']:>11.4f}"
              f"{r['startup_p50_s']:>15.1f}{ev:>12}{statistics.median(cpu):>14.3f}{min(cpu):>8.3f}")
    print(f"(Python process, interpreter start included: median "
          f"{statistics.median(py_process_cpu):.3f} s)")
    ratio = statistics.median(py_cpu) / statistics.median(kiln_cpu)
    best_ratio = min(py_cpu) / min(kiln_cpu)
    print(f"ratio Python / Kiln (CPU): {ratio:.2f}x median, {best_ratio:.2f}x best runs; "
          f"target >= 3x")

    problems = []
    for key in ("jobs", "completed"):
        if k[key] != m[key]:
            problems.append(f"{key}: kiln {k[key]}, model {m[key]}")
    if abs(k["warm_hit_rate"] - m["warm_hit_rate"]) > 0.01:
        problems.append(f"warm-hit rate: kiln {k['warm_hit_rate']}, model {m['warm_hit_rate']}")
    if abs(k["startup_p50_s"] - m["startup_p50_s"]) > 0.1 * max(k["startup_p50_s"], 1.0):
        problems.append(f"startup P50: kiln {k['startup_p50_s']}, model {m['startup_p50_s']:.1f}")
    for msg in problems:
        print(f"not the same work: {msg}", file=sys.stderr)
    if problems:
        return 1
    if a.min_ratio is not None and ratio < a.min_ratio:
        print(f"ratio {ratio:.2f} below --min-ratio {a.min_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
