#!/usr/bin/env python3
"""The crash drill: a controller killed with SIGKILL at random moments, restarted each time.

Runs bench/crash_drill.cc's program (the controller: an engine with the SQLite journal and the
local backend, whose containers outlive it for a lease) on one state directory, kills it with
SIGKILL --kills times, each a random delay (seeded, uniform in [--min-delay, --max-delay]
seconds) after it started, starts it again each time, then lets the last run finish. Then it
checks, from the state directory (`kiln list`, `kiln describe`, the log stream files) and from
what each run printed:

  jobs      every job of the plan is listed once, none else; every job a run was told was
            accepted (CreateTrainingJob OK) is there, and no job was accepted twice (a second
            acceptance would mean the journal lost the first); every job ended in the status
            its own script dictates (Completed; drill-05 fails on purpose: Failed).
  lines     each log stream (one per attempt) holds each "<job> step k" line at most once and
            without a gap from its first step; the last attempt's stream runs to the job's last
            step and "<job> done". Lines of an attempt that was lost and restarted appear again
            in the new attempt's stream: that is counted per stream, not as a duplicate.
  billing   BillableTimeInSeconds against the instance time actually held: the sum, over the
            job's attempts, from the status event at which its instances were ready ("Preparing
            the instances for training") to the event that ended the attempt (its end, or the
            restart after a lost instance), as the controllers saw the events on the loop's
            clock. Allowed error: 1 s (rounding) plus 1 s per restart during the job's life.

It prints a summary: kills, jobs, runs taken back and attempts restarted, lines checked,
duplicates and lost lines (both must be 0), the billing error, and the reattach latency: for
each restart that took a run back, from the controller process's start (its first statement)
to the first log line of a taken-back run that reached the engine's observer, P50 and P90.
Exit status 0 when every check passes, 1 otherwise.

  python3 bench/crash_drill.py --build-dir build                  # 20 jobs, 50 kills
  python3 bench/crash_drill.py --build-dir build --jobs 6 --kills 5 --seed 7
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def percentile(values, p):
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


def parse_run(path):
    """What one controller run printed."""
    run = {"start": None, "plan": [], "recovered": [], "accepted": [], "events": [],
           "first_lines": [], "jobs": {}, "pools": []}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            word, _, rest = line.partition(" ")
            if word == "start":
                run["start"] = int(rest)
            elif word == "plan":
                name, kind, steps = rest.split(" ")
                run["plan"].append((name, kind, int(steps)))
            elif word == "recovered":
                run["recovered"].append(rest.split(" ")[0])
            elif word == "accepted":
                run["accepted"].append(rest)
            elif word == "event":
                t, job, what = rest.split(" ", 2)
                status, secondary, message = (what.split("|", 2) + ["", ""])[:3]
                run["events"].append((int(t), job, status, secondary, message))
            elif word == "pool":
                run["pools"].append(tuple(rest.split(" ", 4)[:4]))
            elif word == "first-line":
                t, job, how = rest.split(" ")
                run["first_lines"].append((int(t), job, how))
            elif word == "job":
                name, status, billable, attempts, start, end, pool = rest.split(" ")
                run["jobs"][name] = (status, int(billable), int(attempts), int(start), int(end),
                                     pool)
    return run


STEP = re.compile(r"^(\S+) step (\d+)$")
RESUMED = re.compile(r"^(\S+) resumed at step (\d+)$")


def stream_key(name):
    # algo-<k>-<epoch>[-<n>]
    parts = name.split("-")
    n = int(parts[3]) if len(parts) > 3 else 1
    return (int(parts[2]), n, int(parts[1]))


def check_streams(job, steps, log_dir, failures):
    """Checks a job's log streams; returns counts."""
    out = {"streams": 0, "lines": 0, "duplicates": 0, "lost": 0, "taken_back": 0,
           "uncovered": 0}
    d = os.path.join(log_dir, job)
    names = sorted((n for n in os.listdir(d) if n.startswith("algo-")), key=stream_key) \
        if os.path.isdir(d) else []
    if not names:
        failures.append(f"{job}: no log stream")
        return out
    covered = set()
    for i, name in enumerate(names):
        out["streams"] += 1
        with open(os.path.join(d, name), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        seen = set()
        expect = None
        done = False
        for line in lines:
            if line.startswith("[kiln] "):
                if " taken back by process " in line:
                    out["taken_back"] += 1
                continue
            m = RESUMED.match(line)
            if m and m.group(1) == job:
                expect = int(m.group(2))
                continue
            m = STEP.match(line)
            if m and m.group(1) == job:
                k = int(m.group(2))
                out["lines"] += 1
                covered.add(k)
                if k in seen:
                    out["duplicates"] += 1
                    failures.append(f"{job}/{name}: step {k} twice")
                    continue
                if expect is None:
                    expect = 1
                if k > expect:
                    out["lost"] += k - expect
                    failures.append(f"{job}/{name}: steps {expect}..{k - 1} missing before {k}")
                elif k < expect:
                    failures.append(f"{job}/{name}: step {k} out of order (expected {expect})")
                seen.add(k)
                expect = max(expect, k + 1)
                continue
            if line == f"{job} done":
                if done:
                    out["duplicates"] += 1
                    failures.append(f"{job}/{name}: 'done' twice")
                done = True
                continue
            failures.append(f"{job}/{name}: unexpected line {line!r}")
        if i == len(names) - 1:
            if expect is not None and expect <= steps:
                out["lost"] += steps + 1 - expect
                failures.append(f"{job}/{name}: the last attempt ends at step {expect - 1} of {steps}")
            if not done:
                failures.append(f"{job}/{name}: the last attempt has no 'done' line")
    # Steps no stream holds: a spot job resumed from a checkpoint synced after lines that its
    # lost instance never wrote out (reported, not a failure of the log stream).
    out["uncovered"] = len(set(range(1, steps + 1)) - covered)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--controller", help="default: BUILD/bench/crash_drill")
    ap.add_argument("--kiln", help="default: BUILD/tools/kiln/kiln")
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-delay", type=float, default=0.3)
    ap.add_argument("--max-delay", type=float, default=4.0)
    ap.add_argument("--lease", type=int, default=30)
    ap.add_argument("--steps-factor", type=int,
                    help="job length factor (default: jobs last about as long as the kills)")
    ap.add_argument("--final-timeout", type=float, default=600)
    ap.add_argument("--keep", action="store_true", help="keep the state and work directories")
    args = ap.parse_args()
    controller = args.controller or os.path.join(args.build_dir, "bench", "crash_drill")
    kiln = args.kiln or os.path.join(args.build_dir, "tools", "kiln", "kiln")
    factor = args.steps_factor or max(
        1, round(args.kills * (args.min_delay + args.max_delay) / 2 / 12))
    rng = random.Random(args.seed)

    root = tempfile.mkdtemp(prefix="kiln-crash-drill-")
    os.chmod(root, 0o755)  # as root the containers run as nobody, who must reach it
    state = os.path.join(root, "state")
    work = os.path.join(root, "work")
    cmd = [controller, "--state-dir", state, "--work-dir", work, "--jobs", str(args.jobs),
           "--steps-factor", str(factor), "--lease", str(args.lease)]
    failures = []
    runs = []
    kills = 0
    began = time.monotonic()

    def start(i):
        out = open(os.path.join(root, f"run-{i:03d}.out"), "w")
        err = open(os.path.join(root, f"run-{i:03d}.err"), "w")
        p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        out.close()
        err.close()
        return p

    try:
        for i in range(args.kills):
            p = start(i)
            runs.append(i)
            delay = rng.uniform(args.min_delay, args.max_delay)
            try:
                rc = p.wait(timeout=delay)
                # Every job had ended: the drill has nothing left to kill.
                if rc != 0:
                    failures.append(f"run {i} exited {rc} before its kill")
                break
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait()
                kills += 1
        else:
            i = args.kills
            p = start(i)
            runs.append(i)
            try:
                rc = p.wait(timeout=args.final_timeout)
                if rc != 0:
                    failures.append(f"the last run exited {rc}")
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait()
                failures.append(f"the last run had not ended after {args.final_timeout} s (a hang)")
        elapsed = time.monotonic() - began

        parsed = [parse_run(os.path.join(root, f"run-{i:03d}.out")) for i in runs]
        for i in runs:
            with open(os.path.join(root, f"run-{i:03d}.err"), encoding="utf-8",
                      errors="replace") as f:
                # The controller's own errors (a sanitizer's notes are not failures).
                text = "\n".join(line for line in f.read().splitlines()
                                  if line.startswith("crash_drill: "))
            if text:
                failures.append(f"run {i} stderr: {text[:500]}")
        plan = next((r["plan"] for r in parsed if r["plan"]), [])
        planned = {name: (kind, steps) for name, kind, steps in plan}
        final = parsed[-1]["jobs"]

        # Jobs: listed once, every accepted one there, none accepted twice.
        listed = subprocess.run([kiln, "list", "--state-dir", state], capture_output=True,
                                text=True, check=False)
        if listed.returncode != 0:
            failures.append(f"kiln list: exit {listed.returncode}: {listed.stderr.strip()}")
        names = [line.split("\t")[0] for line in listed.stdout.splitlines() if line]
        if sorted(names) != sorted(planned):
            failures.append(f"kiln list shows {sorted(names)}, the plan has {sorted(planned)}")
        accepted = {}
        for r in parsed:
            for name in r["accepted"]:
                accepted[name] = accepted.get(name, 0) + 1
        lost_jobs = [n for n in accepted if n not in names]
        twice = [n for n, c in accepted.items() if c > 1]
        if lost_jobs:
            failures.append(f"accepted but not in the journal: {lost_jobs}")
        if twice:
            failures.append(f"accepted more than once (the journal lost them in between): {twice}")

        # Each job's end, lines and billing.
        kill_starts = [r["start"] for r in parsed[1:] if r["start"]]
        events = {}
        for r in parsed:
            for t, job, status, secondary, message in r["events"]:
                events.setdefault(job, []).append((t, status, secondary, message))
        totals = {"lines": 0, "duplicates": 0, "lost": 0, "taken_back": 0, "uncovered": 0,
                  "restarted": 0}
        billing_errors = []
        billing_excess = []
        for name, (kind, steps) in sorted(planned.items()):
            described = subprocess.run([kiln, "describe", "--state-dir", state, name],
                                       capture_output=True, text=True, check=False)
            if described.returncode != 0:
                failures.append(f"kiln describe {name}: {described.stderr.strip()}")
                continue
            d = json.loads(described.stdout)
            want = "Failed" if kind == "failing" else "Completed"
            if d["TrainingJobStatus"] != want:
                failures.append(f"{name}: {d['TrainingJobStatus']} (want {want}): "
                                f"{d.get('FailureReason', '')}")
            if kind == "failing" and "AlgorithmError" not in d.get("FailureReason", ""):
                failures.append(f"{name}: FailureReason {d.get('FailureReason')!r}")
            if name not in final or final[name][0] != d["TrainingJobStatus"]:
                failures.append(f"{name}: the last run printed {final.get(name)}")
            counts = check_streams(name, steps, os.path.join(state, "logs"), failures)
            for k in ("lines", "duplicates", "lost", "taken_back", "uncovered"):
                totals[k] += counts[k]
            totals["restarted"] += max(0, counts["streams"] - 1)
            attempts = final.get(name, (None, 0, 0))[2]
            if attempts != counts["streams"]:
                failures.append(f"{name}: {attempts} attempts described, "
                                f"{counts['streams']} log streams")
            # Billing: instance time held, from the events.
            held = 0
            since = None
            evs = sorted(events.get(name, []))
            for t, status, secondary, message in evs:
                if message == "Preparing the instances for training":
                    if since is None:
                        since = t
                elif since is not None and (
                        status in ("Completed", "Failed", "Stopped") or
                        secondary in ("Restarting", "Interrupted") or
                        message == "Launching requested ML instances"):
                    held += t - since
                    since = None
            if not evs:
                failures.append(f"{name}: no status event seen")
                continue
            first, last = evs[0][0], evs[-1][0]
            restarts = sum(1 for s in kill_starts if first <= s <= last)
            billable = d.get("BillableTimeInSeconds", 0)
            error = billable - held / 1e9
            billing_errors.append(abs(error))
            billing_excess.append(max(0.0, abs(error) - 1) / max(1, restarts))
            if abs(error) > 1 + restarts:
                failures.append(f"{name}: billed {billable} s, held {held / 1e9:.2f} s "
                                f"({restarts} restarts in its life)")

        pools = [name for name, (kind, _) in planned.items() if kind == "pool"]
        reused = {holder for r in parsed for holder, follow_up, status, by in r["pools"]
                  if status == "Reused" and by == follow_up}

        # Reattach latency: each restart's first log line of a run taken back.
        latencies = []
        for r in parsed[1:]:
            resumed = [t for t, _, how in r["first_lines"] if how == "resumed"]
            if resumed and r["start"]:
                latencies.append((min(resumed) - r["start"]) / 1e6)
        reattached_runs = sum(1 for r in parsed[1:] for _, _, how in r["first_lines"]
                              if how == "resumed")

        print(f"crash drill: {len(planned)} jobs, {kills} kills (seed {args.seed}, "
              f"delays {args.min_delay}-{args.max_delay} s, steps x{factor}), "
              f"{len(runs)} runs, {elapsed:.1f} s")
        print(f"  runs taken back after a restart: {reattached_runs} (seen by the observer), "
              f"{totals['taken_back']} '[kiln] taken back' lines in the streams; "
              f"attempts restarted: {totals['restarted']}")
        print(f"  lines checked: {totals['lines']}; duplicates: {totals['duplicates']}; "
              f"lost: {totals['lost']}; steps in no stream (checkpoint ahead of a lost run): "
              f"{totals['uncovered']}")
        print(f"  warm pools reused by their follow-up: {len(reused)} of {len(pools)}")
        if billing_errors:
            print(f"  billing error: max {max(billing_errors):.2f} s; beyond rounding, per "
                  f"restart in the job's life: max {max(billing_excess):.2f} s")
        if latencies:
            print(f"  reattach latency (process start to the first resumed line), "
                  f"{len(latencies)} restarts: P50 {percentile(latencies, 50):.0f} ms, "
                  f"P90 {percentile(latencies, 90):.0f} ms")
        else:
            print("  reattach latency: no restart took a run back")
        for f in failures:
            print(f"FAIL {f}")
        print("crash drill: " + ("FAILED" if failures else "passed") + f" (work in {root})"
              if args.keep or failures else "crash drill: " + ("FAILED" if failures else "passed"))
        return 1 if failures else 0
    finally:
        if not args.keep and not failures:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
