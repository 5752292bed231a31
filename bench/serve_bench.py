#!/usr/bin/env python3
"""`kiln serve` against moto's SageMaker mock on the same calls (issue 42's figures).

Starts `kiln serve` (a temporary state directory and credentials file; it
journals always) and `python3 -m moto.server`, each on a free loopback port;
creates the same JOBS training jobs on both through bench/serve_load (--once:
CreateTrainingJob/s, every job a new one; on kiln the jobs run a train script
that exits at once), then drives DescribeTrainingJob and ListTrainingJobs on
both from CONNECTIONS keep-alive connections with requests signed up front:
closed loop (as fast as the server answers) for SECONDS, and open loop at RATE
requests/s (latency from each request's due time). Prints one table; stops
everything it started at the end, also on failure.

With --busy N, then (kiln only; --busy-only: nothing else): DescribeTrainingJob
from CONNECTIONS connections, closed loop, for SECONDS, first with N finished
jobs and none running (idle), then while N more jobs run at once (each a
`process` container that sleeps, all InProgress/Training), describing the
running jobs and, as the same request as idle, the finished ones; the ratio is
busy P99 / idle P99 (Kiln's target: within 2x). The running jobs are stopped
before the server is.

    serve_bench.py --build-dir build [--jobs 1000] [--connections 32]
                   [--seconds 10] [--rate 2000] [--no-moto]
                   [--busy N] [--busy-only]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

TRAIN = "#!/bin/sh\nexit 0\n"
SLEEPER = "#!/bin/sh\nexec sleep 3600\n"
KEY, SECRET, ACCOUNT = "AKIDBENCH", "bench-secret", "123456789012"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def job_request(work, name, image="image", max_runtime=60):
    return {
        "TrainingJobName": name,
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/bench",
        "AlgorithmSpecification": {"TrainingImage": os.path.join(work, image),
                                   "TrainingInputMode": "File"},
        "OutputDataConfig": {"S3OutputPath": f"file://{work}/out"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1,
                           "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": max_runtime},
    }


def write_bodies(work, what, bodies):
    path = os.path.join(work, what + ".jsonl")
    with open(path, "w") as f:
        f.write("\n".join(json.dumps(b) for b in bodies) + "\n")
    return path


def wait_for(sm, names, done, what, timeout, failed_ok=False):
    """Describes the jobs until done(describe) holds for each (a Failed job is
    an error unless failed_ok); returns the seconds it took."""
    start = time.monotonic()
    pending = list(names)
    while pending:
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"{len(pending)} of {len(names)} jobs not {what} after "
                               f"{timeout:g} s (e.g. {pending[0]})")
        still = []
        for n in pending:
            d = sm.describe_training_job(TrainingJobName=n)
            if d["TrainingJobStatus"] == "Failed" and not failed_ok:
                raise RuntimeError(f"{n} failed: {d.get('FailureReason')}")
            if not done(d):
                still.append(n)
        pending = still
        if pending:
            time.sleep(0.5)
    return time.monotonic() - start


def busy_rows(args, work, port):
    """DescribeTrainingJob idle, then while args.busy jobs run (see the
    module's comment). Returns [(what, result)]."""
    import boto3  # (only this mode needs it)
    import botocore.config
    sm = boto3.client("sagemaker", endpoint_url=f"http://127.0.0.1:{port}",
                      region_name="us-east-1", aws_access_key_id=KEY,
                      aws_secret_access_key=SECRET,
                      config=botocore.config.Config(retries={"max_attempts": 3}))
    ended = [f"ended-{i:05d}" for i in range(args.busy)]
    running = [f"running-{i:05d}" for i in range(args.busy)]
    files = {
        "ended-create": write_bodies(work, "ended-create",
                                     [job_request(work, n) for n in ended]),
        "running-create": write_bodies(work, "running-create", [
            job_request(work, n, image="sleeper", max_runtime=3600) for n in running]),
        "ended": write_bodies(work, "ended", [{"TrainingJobName": n} for n in ended]),
        "running": write_bodies(work, "running", [{"TrainingJobName": n} for n in running]),
        "stop": write_bodies(work, "stop", [{"TrainingJobName": n} for n in running]),
    }
    describe = ["--connections", str(args.connections), "--seconds", str(args.seconds),
                "--warmup", str(args.warmup)]
    once = ["--once", "--connections", str(args.connections)]
    load(args, port, "CreateTrainingJob", files["ended-create"], once)
    wait_for(sm, ended, lambda d: d["TrainingJobStatus"] == "Completed", "Completed", 600)
    rows = [(f"Describe, {args.busy} ended, none running (idle)",
             load(args, port, "DescribeTrainingJob", files["ended"], describe))]
    try:
        load(args, port, "CreateTrainingJob", files["running-create"], once)
        took = wait_for(sm, running, lambda d: d["SecondaryStatus"] == "Training", "Training",
                        900)
        print(f"{args.busy} jobs Training {took:.0f} s after the last was created",
              file=sys.stderr)
        rows.append((f"Describe, the {args.busy} running",
                     load(args, port, "DescribeTrainingJob", files["running"], describe)))
        rows.append((f"Describe, {args.busy} ended, {args.busy} running",
                     load(args, port, "DescribeTrainingJob", files["ended"], describe)))
        # Still all running? (A figure taken while they ended would be none.)
        wait_for(sm, running, lambda d: d["SecondaryStatus"] == "Training", "Training", 1)
    finally:
        # (Jobs that failed to start, e.g. at the open-files limit, refuse
        # the stop.)
        load(args, port, "StopTrainingJob", files["stop"], once, refusals_ok=True)
        wait_for(sm, running, lambda d: d["TrainingJobStatus"] in ("Stopped", "Failed"),
                 "ended", 600, failed_ok=True)
    return rows


def load(args, port, op, bodies, extra, refusals_ok=False):
    """serve_load's figures; refusals_ok: some answers may be errors (its exit
    status 3), as when stopping jobs of which some have ended."""
    cmd = [args.load, "--port", str(port), "--op", op, "--bodies", bodies,
           "--key", KEY, "--secret", SECRET] + extra
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=600)
    if out.returncode != 0 and not (refusals_ok and out.returncode == 3):
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    r = dict(kv.split("=") for kv in out.stdout.split())
    return {k: float(v) for k, v in r.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default="build")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--rate", type=float, default=2000)
    p.add_argument("--no-moto", action="store_true", help="kiln only")
    p.add_argument("--busy", type=int, default=0,
                   help="also Describe while this many jobs run (kiln only)")
    p.add_argument("--busy-only", action="store_true", help="only the --busy figures")
    args = p.parse_args()
    kiln = os.path.join(args.build_dir, "tools", "kiln", "kiln")
    args.load = os.path.join(args.build_dir, "bench", "serve_load")
    for path in (kiln, args.load):
        if not os.access(path, os.X_OK):
            sys.exit(f"serve_bench: {path} is not built")

    # SIGTERM as SIGINT: the servers are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = tempfile.mkdtemp(prefix="kiln-serve-bench-")
    os.chmod(work, 0o755)  # as root, the containers run as nobody
    procs = []
    try:
        with open(os.path.join(work, "keys"), "w") as f:
            f.write(f"{KEY} {SECRET} {ACCOUNT}\n")
        os.makedirs(os.path.join(work, "image"))
        train = os.path.join(work, "image", "train")
        with open(train, "w") as f:
            f.write(TRAIN)
        os.chmod(train, 0o755)
        os.makedirs(os.path.join(work, "sleeper"))
        with open(os.path.join(work, "sleeper", "train"), "w") as f:
            f.write(SLEEPER)
        os.chmod(os.path.join(work, "sleeper", "train"), 0o755)
        names = [f"bench-{i:05d}" for i in range(args.jobs)]
        files = {}
        for what, lines in (
                ("create", [json.dumps(job_request(work, n)) for n in names]),
                ("create2", [json.dumps(job_request(work, n + "-b")) for n in names]),
                ("describe", [json.dumps({"TrainingJobName": n}) for n in names]),
                ("list", ["{}"])):
            files[what] = os.path.join(work, what + ".jsonl")
            with open(files[what], "w") as f:
                f.write("\n".join(lines) + "\n")

        servers = {}
        serve_err = open(os.path.join(work, "serve.stderr"), "wb")
        kp = subprocess.Popen(
            [kiln, "serve", "--credentials", os.path.join(work, "keys"), "--listen",
             "127.0.0.1:0", "--state-dir", os.path.join(work, "state"), "--grace", "2"],
            stdout=subprocess.PIPE, stderr=serve_err, text=True)
        procs.append(kp)
        line = kp.stdout.readline()
        if not line.startswith("listening on http://"):
            raise RuntimeError(f"kiln serve did not start: {line!r}")
        servers["kiln"] = int(line.split(":")[-1].strip().rstrip("/"))
        if not args.no_moto and not args.busy_only:
            port = free_port()
            mp = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                   str(port)], stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(work, "moto.stderr"), "wb"))
            procs.append(mp)
            for _ in range(300):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if mp.poll() is not None:
                        raise RuntimeError("moto.server exited")
                    time.sleep(0.1)
            servers["moto"] = port

        if not args.busy_only:
            rows = []  # (what, {server: result})
            # CreateTrainingJob: the jobs the other calls read, then as many again
            # while the first ones run (kiln journals each).
            for what, f in (("CreateTrainingJob (empty)", files["create"]),
                            ("CreateTrainingJob (+1 set)", files["create2"])):
                res = {}
                for name, port in servers.items():
                    res[name] = load(args, port, "CreateTrainingJob", f,
                                     ["--once", "--connections", str(args.connections)])
                rows.append((what, res))
            time.sleep(2)  # let kiln's jobs end
            for op, f in (("DescribeTrainingJob", files["describe"]),
                          ("ListTrainingJobs", files["list"])):
                for mode, extra in (("max rate", []),
                                    (f"{args.rate:g}/s", ["--rate", str(args.rate)])):
                    res = {}
                    for name, port in servers.items():
                        res[name] = load(args, port, op, f, extra + [
                            "--connections", str(args.connections),
                            "--seconds", str(args.seconds), "--warmup", str(args.warmup)])
                    rows.append((f"{op}, {mode}", res))
            print(f"{args.jobs} jobs x2, {args.connections} connections, {args.seconds:g} s a run")
            print(f"{'what':34} {'server':6} {'req/s':>10} {'P50 ms':>8} {'P90 ms':>8} "
                  f"{'P99 ms':>8} {'max ms':>8} {'ratio':>8}")
            for what, res in rows:
                for name, r in res.items():
                    ratio = ""
                    if (name == "kiln" and "moto" in res and res["moto"]["rps"] > 0
                            and not what.endswith("/s")):
                        ratio = f"{r['rps'] / res['moto']['rps']:.1f}x"
                    if what.endswith("/s") and r["rps"] < 0.95 * args.rate:
                        # Behind its schedule: latency from the due time grows
                        # without bound, and what was answered in time is no figure.
                        print(f"{what:34} {name:6} "
                              f"{'overloaded: cannot keep up with the rate':>44}")
                        continue
                    print(f"{what:34} {name:6} {r['rps']:10.0f} {r['p50_us'] / 1e3:8.2f} "
                          f"{r['p90_us'] / 1e3:8.2f} {r['p99_us'] / 1e3:8.2f} "
                          f"{r['max_us'] / 1e3:8.2f} {ratio:>8}")
        if args.busy:
            busy = busy_rows(args, work, servers["kiln"])
            idle_p99 = busy[0][1]["p99_us"]
            print(f"kiln serve, DescribeTrainingJob, {args.connections} connections, closed loop, "
                  f"{args.seconds:g} s a run")
            print(f"{'what':40} {'req/s':>10} {'P50 ms':>8} {'P90 ms':>8} {'P99 ms':>8} "
                  f"{'max ms':>8} {'errors':>6} {'P99/idle':>8}")
            for what, r in busy:
                ratio = f"{r['p99_us'] / idle_p99:.2f}x" if idle_p99 > 0 else ""
                print(f"{what:40} {r['rps']:10.0f} {r['p50_us'] / 1e3:8.2f} "
                      f"{r['p90_us'] / 1e3:8.2f} {r['p99_us'] / 1e3:8.2f} "
                      f"{r['max_us'] / 1e3:8.2f} {r['errors']:6.0f} {ratio:>8}")
        return 0
    finally:
        for proc in reversed(procs):
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
