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

prints, per trace and over all of them, the table of both (policy, cost / on-demand cost, misses)
and, per policy, the share of runs where Kiln's cost is within --tolerance of the reference's.
Exit status 1 when a policy falls short of --min-share within tolerance, or Kiln misses a deadline
the reference meets.
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
        results[name] = {"cost": p["cost"], "met": p["deadline_misses"] == 0}
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+")
    p.add_argument("--kiln", required=True, help="the kiln binary")
    p.add_argument("--work-hours", type=float, default=48.0)
    p.add_argument("--deadline-hours", default="52,56")
    p.add_argument("--overhead-hours", default="0.1,0.2")
    p.add_argument("--windows", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--policies", default="on_demand,greedy,uniform_progress")
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--min-share", type=float, default=0.9)
    p.add_argument("--json", action="store_true", help="one JSON object per run")
    args = p.parse_args(argv)

    names = [n for n in args.policies.split(",") if n]
    if "on_demand" not in names:
        names.insert(0, "on_demand")
    prices = ref.DEFAULT_PRICES
    rng = random.Random(args.seed)
    deadlines = ref.parse_list(args.deadline_hours)
    overheads = ref.parse_list(args.overhead_hours)
    work = ref.hours_to_seconds(args.work_hours)
    rows = []
    failed = False
    with tempfile.TemporaryDirectory() as workdir:
        for path in args.traces:
            trace = ref.Trace.load(path)
            for _ in range(args.windows):
                start = rng.randrange(len(trace.counts))
                deadline = ref.hours_to_seconds(rng.choice(deadlines))
                overhead = ref.hours_to_seconds(rng.choice(overheads))
                job = ref.Job(work, deadline, overhead, prices)
                want = ref.run_all(trace, start, job, names + ["ideal"], ref.defaults())
                got = run_kiln(args.kiln, trace, start, work, deadline, overhead, prices, names,
                               workdir)
                row = {"trace": path, "start_tick": start, "deadline": deadline,
                       "overhead": overhead, "ref": {}, "kiln": got}
                for name in names + ["ideal"]:
                    r = want[name]
                    row["ref"][name] = None if r is None else {"cost": r.cost, "met": r.met,
                                                                "spot_share": r.spot_share}
                rows.append(row)
                if args.json:
                    print(json.dumps(row, sort_keys=True), flush=True)

    print("%-17s %5s %10s %10s %8s %8s %7s %11s" % ("policy", "runs", "kiln/OD", "ref/OD",
                                                     "misses", "(ref)", "spot", "within"))
    for name in names + ["ideal"]:
        kr, rr, km, rm, share, within, extra_miss = [], [], 0, 0, [], 0, 0
        for row in rows:
            r = row["ref"][name]
            od = row["ref"]["on_demand"]["cost"]
            if r is not None:
                rr.append(r["cost"] / od)
                rm += not r["met"]
                share.append(r["spot_share"])
            k = row["kiln"].get(name)
            if k is None:
                continue
            kr.append(k["cost"] / row["kiln"]["on_demand"]["cost"])
            km += not k["met"]
            if r is not None:
                if abs(k["cost"] - r["cost"]) <= args.tolerance * r["cost"]:
                    within += 1
                if r["met"] and not k["met"]:
                    extra_miss += 1
        ok = not kr or (within >= args.min_share * len(kr) and extra_miss == 0)
        failed |= not ok
        print("%-17s %5d %10s %10.3f %8s %8d %6.0f%% %11s" % (
            name, len(rr), "%.3f" % statistics.mean(kr) if kr else "-", statistics.mean(rr),
            km if kr else "-", rm, 100 * statistics.mean(share) if share else 0,
            "%d/%d%s" % (within, len(kr), "" if ok else " SHORT") if kr else "-"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
