#!/usr/bin/env python3
"""Runs Kiln's spot policies and the independent reference (bench/spot_reference.py) on the same
jobs and traces, and compares their costs.

Each run is one job of W hours of work with deadline D hours and changeover delay d hours on a
trace window (a start tick). The reference simulates the paper's model in ticks; Kiln runs the job
through its engine (`kiln simulate`) on a scenario written to match that model:
  * the trace, rotated so that the window starts at tick 0;
  * the authors' prices (spot $0.9731/h, on-demand $3.06/h);
  * a changeover costs d: every new instance spends d starting its container (billed, as the
    paper bills it), and provisioning, image pulls and data take no time;
  * spot is taken back without notice when the trace says it is gone, and the job checkpoints
    every minute (the paper loses no progress at a preemption; Kiln loses at most a minute);
  * Uniform Progress and greedy decide once per trace tick, as the reference does.
Kiln also waits 30 s before asking for capacity again after an interruption, and 5 s for a
refused request, which the reference does not; its safety net counts them in the job's margin.

  bench/spot_compare.py --kiln build/tools/kiln/kiln TRACE... --windows 100 \\
      --deadline-hours 52,56 --overhead-hours 0.1,0.2

prints, over all windows, the table of both (policy, cost / on-demand cost, misses, spot share:
of instance time for Kiln, of work for the reference) and, per policy, the runs where Kiln's cost is within --tolerance of the
reference's. For scale, the last column counts the runs where the reference itself, with a
changeover --sensitivity seconds longer, stays within the tolerance of its own cost: these
policies decide at thresholds, and a small shift moves a decision by a tick, and what follows
with it. Exit status 1 when a policy falls short of --min-share within tolerance, or Kiln misses
a deadline the reference meets.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import spot_reference as ref  # noqa: E402

INSTANCE_TYPE = "ml.p3.2xlarge"
CHECKPOINT_EVERY = 60
# Kiln's policy name -> the reference's, and the scenario entry that selects it.
KILN_POLICIES = {
    "on_demand": ("OnDemand", "on_demand"),
    "greedy": ("Greedy(ckpt 60s, tick %ds)", {"greedy": {"checkpoint_every": CHECKPOINT_EVERY}}),
    "uniform_progress": ("UniformProgress(ckpt 60s, tick %ds)",
                         {"uniform_progress": {"checkpoint_every": CHECKPOINT_EVERY}}),
}


def scenario(trace_file, gap, work, deadline, overhead, prices, names):
    policies = []
    for name in names:
        entry = KILN_POLICIES[name][1]
        if isinstance(entry, dict):
            entry = json.loads(json.dumps(entry))
            for body in entry.values():
                body["tick"] = gap
        policies.append({"spot": entry})
    return {
        "name": "spot-compare",
        "seed": 1,
        "horizon": "1m",
        "models": {
            "instance_types": {
                INSTANCE_TYPE: {
                    "on_demand_per_hour": prices[1],
                    "spot_per_hour": prices[0],
                    "provisioning": 0,
                    "container_start": overhead,
                    "image_pull": 1e9,
                    "spot": {"trace": trace_file},
                    "spot_notice": 0,
                },
            },
            "node_failures": False,
            "capacity_error": 5,
        },
        "workloads": [{"kind": "trace", "name": "job", "file": "job.jsonl"}],
        "policies": policies,
    }


def job_line(work, deadline):
    request = {
        "TrainingJobName": "window",
        "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
        "AlgorithmSpecification": {"TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1",
                                   "TrainingInputMode": "File"},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": INSTANCE_TYPE, "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 28 * 86400},
    }
    sim = {"work": work, "deadline": deadline, "spot_eligible": True, "image_bytes": 1,
           "data_bytes": 0, "upload": 0}
    return json.dumps({"arrival": 0, "request": request, "sim": sim})


def run_kiln(kiln, trace, start, work, deadline, overhead, prices, names, workdir):
    rotated = trace.counts[start:] + trace.counts[:start]
    with open(os.path.join(workdir, "trace.json"), "w") as f:
        json.dump({"metadata": {"gap_seconds": trace.gap}, "data": rotated}, f)
    with open(os.path.join(workdir, "job.jsonl"), "w") as f:
        f.write(job_line(work, deadline) + "\n")
    path = os.path.join(workdir, "scenario.json")
    with open(path, "w") as f:
        json.dump(scenario("trace.json", trace.gap, work, deadline, overhead, prices, names), f)
    out = subprocess.run([kiln, "simulate", path, "--format", "json", "--jobs", "1"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("kiln simulate failed: %s" % out.stderr.strip())
    doc = json.loads(out.stdout)
    by_name = {p["policy"]: p for p in doc["policies"]}
    results = {}
    for name in names:
        label = KILN_POLICIES[name][0]
        p = by_name[label % trace.gap if "%" in label else label]
        billable = p["billable_instance_hours"]
        results[name] = {"cost": p["cost"], "met": p["deadline_misses"] == 0,
                         "spot_share": p["spot_instance_hours"] / billable if billable else 0.0}
    return results


def compare(kiln, trace_paths, windows, seed=1, work_hours=48.0, deadline_hours=(52, 56),
            overhead_hours=(0.1, 0.2), names=("on_demand", "greedy", "uniform_progress"),
            with_ideal=True, prices=ref.DEFAULT_PRICES, on_row=None, sensitivity=0):
    """One row per window: {"trace", "start_tick", "deadline", "overhead", "ref": {name: {cost,
    met, spot_share} or None}, "kiln": {name: {cost, met}}}. With `sensitivity` (seconds), also
    "shifted": the reference's costs with a changeover that much longer."""
    names = list(names)
    if "on_demand" not in names:
        names.insert(0, "on_demand")
    rng = random.Random(seed)
    work = ref.hours_to_seconds(work_hours)
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for path in trace_paths:
            trace = ref.Trace.load(path)
            for _ in range(windows):
                start = rng.randrange(len(trace.counts))
                deadline = ref.hours_to_seconds(rng.choice(deadline_hours))
                overhead = ref.hours_to_seconds(rng.choice(overhead_hours))
                job = ref.Job(work, deadline, overhead, prices)
                want = ref.run_all(trace, start, job, names + (["ideal"] if with_ideal else []),
                                   ref.defaults())
                got = run_kiln(kiln, trace, start, work, deadline, overhead, prices, names, workdir)
                row = {"trace": path, "start_tick": start, "deadline": deadline,
                       "overhead": overhead, "ref": {}, "kiln": got}
                if sensitivity:
                    shifted = ref.Job(work, deadline, overhead + sensitivity, prices)
                    row["shifted"] = {n: {"cost": r.cost, "met": r.met} for n, r in ref.run_all(
                        trace, start, shifted, names, ref.defaults()).items()}
                for name, r in want.items():
                    row["ref"][name] = None if r is None else {"cost": r.cost, "met": r.met,
                                                                "spot_share": r.spot_share}
                rows.append(row)
                if on_row:
                    on_row(row)
    return rows


def summarize(rows, tolerance=0.05):
    """Per policy: runs, mean cost / on-demand cost for Kiln and the reference, misses of each,
    Kiln's misses where the reference met the deadline, the reference's mean spot share, and the
    runs where Kiln's cost is within `tolerance` of the reference's."""
    out = {}
    for name in rows[0]["ref"]:
        s = {"runs": 0, "kiln_ratio": [], "ref_ratio": [], "kiln_misses": 0, "ref_misses": 0,
             "extra_misses": 0, "spot_share": [], "kiln_spot_share": [], "within": 0, "compared": 0,
             "shifted_within": 0}
        for row in rows:
            r, k = row["ref"][name], row["kiln"].get(name)
            if r is not None:
                s["runs"] += 1
                s["ref_ratio"].append(r["cost"] / row["ref"]["on_demand"]["cost"])
                s["ref_misses"] += not r["met"]
                s["spot_share"].append(r["spot_share"])
            if k is None:
                continue
            s["kiln_ratio"].append(k["cost"] / row["kiln"]["on_demand"]["cost"])
            s["kiln_spot_share"].append(k["spot_share"])
            s["kiln_misses"] += not k["met"]
            if r is not None:
                s["compared"] += 1
                s["within"] += abs(k["cost"] - r["cost"]) <= tolerance * r["cost"]
                s["extra_misses"] += r["met"] and not k["met"]
                if "shifted" in row:
                    shifted = row["shifted"][name]["cost"]
                    s["shifted_within"] += abs(shifted - r["cost"]) <= tolerance * r["cost"]
        for key in ("kiln_ratio", "ref_ratio", "spot_share", "kiln_spot_share"):
            s[key] = statistics.mean(s[key]) if s[key] else None
        out[name] = s
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+")
    p.add_argument("--kiln", required=True, help="the kiln binary")
    p.add_argument("--work-hours", type=float, default=48.0)
    p.add_argument("--deadline-hours", default="52,56")
    p.add_argument("--overhead-hours", default="0.1,0.2")
    p.add_argument("--windows", type=int, default=20, help="random windows per trace")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--policies", default="on_demand,greedy,uniform_progress")
    p.add_argument("--no-ideal", action="store_true", help="leave out the omniscient optimum")
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--min-share", type=float, default=0.9)
    p.add_argument("--json", action="store_true", help="also print one JSON object per run")
    p.add_argument("--sensitivity", type=float, default=30,
                   help="also run the reference with a changeover this many seconds longer, and "
                        "count its runs within tolerance of itself (0: not)")
    args = p.parse_args(argv)

    names = [n for n in args.policies.split(",") if n]
    for n in names:
        if n not in KILN_POLICIES:
            p.error("unknown policy %r (%s)" % (n, ", ".join(KILN_POLICIES)))
    on_row = (lambda row: print(json.dumps(row, sort_keys=True), flush=True)) if args.json else None
    rows = compare(args.kiln, args.traces, args.windows, args.seed, args.work_hours,
                   ref.parse_list(args.deadline_hours), ref.parse_list(args.overhead_hours), names,
                   not args.no_ideal, on_row=on_row, sensitivity=int(args.sensitivity))
    print("%d windows: W=%gh, D in {%s} h, d in {%s} h" % (len(rows), args.work_hours,
                                                            args.deadline_hours,
                                                            args.overhead_hours))
    print("%-17s %5s %9s %9s %7s %7s %6s %6s %13s %13s" % (
        "policy", "runs", "kiln/OD", "ref/OD", "misses", "(ref)", "spot", "(ref)",
        "within %g%%" % (100 * args.tolerance),
        "ref+%gs" % args.sensitivity if args.sensitivity else ""))
    failed = False
    for name, s in summarize(rows, args.tolerance).items():
        kiln_ran = s["kiln_ratio"] is not None
        ok = not kiln_ran or (s["within"] >= args.min_share * s["compared"] and
                              s["extra_misses"] == 0)
        failed |= not ok
        print("%-17s %5d %9s %9.3f %7s %7d %6s %5.0f%% %13s %13s" % (
            name, s["runs"], "%.3f" % s["kiln_ratio"] if kiln_ran else "-", s["ref_ratio"],
            s["kiln_misses"] if kiln_ran else "-", s["ref_misses"],
            "%.0f%%" % (100 * s["kiln_spot_share"]) if kiln_ran else "-",
            100 * (s["spot_share"] or 0),
            "%d/%d%s" % (s["within"], s["compared"], "" if ok else " SHORT") if kiln_ran
            else "-", "%d/%d" % (s["shifted_within"], s["compared"])
            if kiln_ran and args.sensitivity else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
