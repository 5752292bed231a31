#!/usr/bin/env python3
"""A minimal Python discrete-event model of an HPO workload: the peer for `kiln simulate`'s speed.

What a researcher would write in an afternoon with heapq, for the same workload as the HPO
scenario bench/simulate_vs_python.py gives `kiln simulate` (one instance type, one keep-alive
policy, no spot, no node failures):

  * sweeps start every `every` seconds; each submits `parallelism` trials at once, then one more
    trial a tuner gap (lognormal) after each trial ends, until `trials` were submitted (closed
    loop, as Kiln's `hpo` workload);
  * a trial takes the newest idle warm pool of the shape if there is one (warm start), else
    provisions a cluster (lognormal) and pulls the image (bytes / a lognormal rate);
  * then container start, data (FastFile metadata), the work, the upload;
  * at the end the cluster goes to a warm pool for the keep-alive, unless the next trial takes it
    first; an idle pool that reaches its keep-alive is released.

That is about six events a job (arrival, provisioned and image pulled when cold, container started,
data ready, work done, upload done, keep-alive expiry when the pool is not reused). Durations are
lognormal around their median, clamped to [median / 3, median * 3] (the work to a factor 10), as
Kiln's models are, with Kiln's default medians. There is no request validation, no API, no status
history, no billing detail beyond instance-seconds: it is the floor of what such a model costs in
Python, not a re-implementation of Kiln. Deterministic for a seed (one random.Random stream).

Usage:
  bench/hpo_peer_model.py --sweeps 100 --trials 1000 --parallelism 20 --seed 1
prints one JSON object: jobs, completed, warm_hits, warm_hit_rate, events, startup_p50_s,
startup_p90_s, billable_instance_hours, warm_retained_instance_hours, cpu_seconds (CPU time of the
simulation alone, time.process_time, without the interpreter's start).
"""

import argparse
import heapq
import json
import math
import random
import sys
import time

# Event kinds.
SWEEP, ARRIVE, PROVISIONED, PULLED, STARTED, DATA_READY, WORK_DONE, UPLOADED, EXPIRE = range(9)


def simulate(sweeps=100, trials=1000, parallelism=20, every=86400.0, gap=(20.0, 0.5),
             work=(720.0, 0.6), keep_alive=600.0, provisioning=(81.0, 0.2),
             container_start=(14.0, 0.12), image_bytes=1.34e9, image_rate=(100.0, 0.2),
             fast_file=(4.5, 0.3), upload=5.0, horizon=None, seed=1):
    """Runs the model; returns a dict of counts (see the module comment)."""
    rng = random.Random(seed)
    gauss = rng.gauss
    exp = math.exp
    push = heapq.heappush
    pop = heapq.heappop
    if horizon is None:
        horizon = every * sweeps

    def draw(median, sigma, max_factor=3.0):
        f = exp(sigma * gauss(0.0, 1.0))
        if f > max_factor:
            f = max_factor
        elif f < 1.0 / max_factor:
            f = 1.0 / max_factor
        return median * f

    gap_m, gap_s = gap
    work_m, work_s = work
    prov_m, prov_s = provisioning
    start_m, start_s = container_start
    rate_m, rate_s = image_rate
    ff_m, ff_s = fast_file

    heap = []
    seq = 0  # tie-break: events at the same time run in the order they were scheduled
    for s in range(sweeps):
        if s * every < horizon:
            push(heap, (s * every, seq, SWEEP, s))
            seq += 1

    submitted = [0] * sweeps
    # A job: [sweep, arrival, cluster]. A cluster: [idle_since, generation] (generation changes
    # each time the cluster is taken, so a stale expiry is recognised).
    idle = []  # idle warm pools, newest last
    jobs = completed = warm_hits = events = 0
    startups = []
    billable = retained = 0.0
    now = 0.0

    while heap:
        now, _, kind, x = pop(heap)
        events += 1
        if kind == ARRIVE:
            jobs += 1
            job = [x, now, None]
            cluster = None
            while idle:
                c = idle.pop()
                if c[0] >= 0.0:  # still idle (not released)
                    cluster = c
                    break
            if cluster is not None:
                warm_hits += 1
                retained += now - cluster[0]
                cluster[0] = -1.0
                cluster[1] += 1
                job[2] = cluster
                push(heap, (now + draw(start_m, start_s), seq, STARTED, job))
            else:
                job[2] = [-1.0, 0]
                push(heap, (now + draw(prov_m, prov_s), seq, PROVISIONED, job))
            seq += 1
        elif kind == PROVISIONED:
            push(heap, (now + image_bytes / 1e6 / draw(rate_m, rate_s), seq, PULLED, x))
            seq += 1
        elif kind == PULLED:
            push(heap, (now + draw(start_m, start_s), seq, STARTED, x))
            seq += 1
        elif kind == STARTED:
            push(heap, (now + draw(ff_m, ff_s), seq, DATA_READY, x))
            seq += 1
        elif kind == DATA_READY:
            startups.append(now - x[1])
            push(heap, (now + draw(work_m, work_s, 10.0), seq, WORK_DONE, x))
            seq += 1
        elif kind == WORK_DONE:
            push(heap, (now + upload, seq, UPLOADED, x))
            seq += 1
        elif kind == UPLOADED:
            completed += 1
            s, arrival, cluster = x
            billable += now - arrival
            # The cluster goes to a warm pool for the keep-alive.
            cluster[0] = now
            idle.append(cluster)
            push(heap, (now + keep_alive, seq, EXPIRE, (cluster, cluster[1])))
            seq += 1
            # The tuner submits the next trial after its gap.
            if submitted[s] < trials:
                at = now + draw(gap_m, gap_s)
                if at < horizon:
                    submitted[s] += 1
                    push(heap, (at, seq, ARRIVE, s))
                    seq += 1
        elif kind == EXPIRE:
            cluster, generation = x
            if cluster[1] == generation and cluster[0] >= 0.0:
                retained += now - cluster[0]
                cluster[0] = -2.0  # released
        else:  # SWEEP
            for _ in range(min(parallelism, trials)):
                submitted[x] += 1
                push(heap, (now, seq, ARRIVE, x))
                seq += 1

    startups.sort()

    def rank(q):  # nearest rank
        if not startups:
            return None
        return startups[max(0, math.ceil(q * len(startups)) - 1)]

    return {
        "jobs": jobs,
        "completed": completed,
        "warm_hits": warm_hits,
        "warm_hit_rate": warm_hits / len(startups) if startups else 0.0,
        "events": events,
        "startup_p50_s": rank(0.5),
        "startup_p90_s": rank(0.9),
        "billable_instance_hours": billable / 3600.0,
        "warm_retained_instance_hours": retained / 3600.0,
        "end_s": now,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sweeps", type=int, default=100)
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--parallelism", type=int, default=20)
    p.add_argument("--every", type=float, default=86400.0, help="seconds between sweep starts")
    p.add_argument("--keep-alive", type=float, default=600.0, help="seconds")
    p.add_argument("--work-median", type=float, default=720.0, help="seconds")
    p.add_argument("--work-sigma", type=float, default=0.6)
    p.add_argument("--gap-median", type=float, default=20.0, help="seconds")
    p.add_argument("--gap-sigma", type=float, default=0.5)
    p.add_argument("--horizon", type=float, default=None, help="seconds (default sweeps x every)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if a.sweeps < 0 or a.trials < 0 or a.parallelism < 1:
        p.error("--sweeps and --trials must be >= 0, --parallelism >= 1")
    start = time.process_time()
    r = simulate(sweeps=a.sweeps, trials=a.trials, parallelism=a.parallelism, every=a.every,
                 gap=(a.gap_median, a.gap_sigma), work=(a.work_median, a.work_sigma),
                 keep_alive=a.keep_alive, horizon=a.horizon, seed=a.seed)
    r["cpu_seconds"] = time.process_time() - start
    json.dump(r, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
