#!/usr/bin/env python3
"""A small reference of the spot/on-demand policies of Wu et al., "Can't Be Late: Optimizing Spot
Instance Savings under Deadlines" (NSDI'24), written from the paper's rules to check Kiln's own
`uniform_progress` against.

The model is the paper's (Sec. 3.1), simulated in ticks like the authors' simulator:
  * one job of W seconds of computation with deadline D (seconds after it starts) and changeover
    delay d: whenever the job starts on a new spot or on-demand instance, its progress stands still
    for d while time runs on, and the delay is billed at the new instance's price. Going idle
    costs no delay;
  * time advances in ticks of the trace's gap; a policy decides at the start of each tick between
    idle, spot (only if spot is available during the tick) and on-demand (always available);
  * a job on spot whose tick finds spot unavailable has been preempted: it starts the tick idle;
  * instances are billed per second while held (Sec. 3.1); the tick in which the work completes is
    billed only up to the completion;
  * a job not done by its deadline goes on under the same policy (its safety net keeps it on
    on-demand) until done, and counts as a miss.

Policies (the rules' sources in the comments of each class):
  on_demand          on-demand from the start;
  greedy             the paper's greedy baseline (Sec. 3.4);
  uniform_progress   Uniform Progress with hysteresis (Sec. 5.2.2), safety net 2d (Sec. 3.3);
  up_plain           Uniform Progress without hysteresis ("Uniform Progress (plain)", Sec. 5.2.2);
  ideal              the omniscient minimum cost (Sec. 5.3.1): an exact dynamic program over the
                     same tick model, given the whole trace.

A trace is Kiln's spot trace file: {"metadata": {"gap_seconds": G}, "data": [counts...]}; spot is
available during tick i when data[i] >= the job's instance count (Sec. 5.5: a gang of N instances
needs N spots), repeating after the end as Kiln does. Prices default to the authors' p3.2xlarge
(V100) figures: spot $0.9731/h, on-demand $3.06/h.

One run:
  bench/spot_reference.py TRACE --work-hours 48 --deadline-hours 52 --overhead-hours 0.2 \
      --start-tick 100
Many random windows (start tick uniform over the trace, deadline and overhead drawn from the
given lists), a table per trace and over all of them:
  bench/spot_reference.py TRACE... --windows 300 --deadline-hours 52,56 --overhead-hours 0.1,0.2
--json prints one JSON object per run and policy instead of the table.
"""

import argparse
import json
import math
import random
import statistics
import sys

IDLE, SPOT, ON_DEMAND = 0, 1, 2
MODE_NAMES = {IDLE: "idle", SPOT: "spot", ON_DEMAND: "on_demand"}
INF = float("inf")

# The authors' p3.2xlarge prices, $/h (spot, on-demand).
DEFAULT_PRICES = (0.9731, 3.06)


def hours_to_seconds(hours):
    return int(round(hours * 3600))


class Trace:
    """Spot availability per tick, repeating after the end."""

    def __init__(self, gap_seconds, counts, name="trace"):
        if gap_seconds <= 0 or int(gap_seconds) != gap_seconds:
            raise ValueError("gap_seconds must be a positive whole number")
        if not counts:
            raise ValueError("a trace needs at least one tick")
        self.gap = int(gap_seconds)
        self.counts = list(counts)
        self.name = name

    @classmethod
    def load(cls, path, invert=False):
        with open(path) as f:
            doc = json.load(f)
        counts = doc["data"]
        if invert:
            counts = [0 if c else 1 for c in counts]
        return cls(doc["metadata"]["gap_seconds"], counts, name=path)

    def availability(self, start_tick, instances=1):
        """A function tick -> bool for a job starting at start_tick."""
        counts, n = self.counts, len(self.counts)
        return lambda i: counts[(start_tick + i) % n] >= instances

    def available_fraction(self, instances=1):
        return sum(1 for c in self.counts if c >= instances) / len(self.counts)


class Job:
    def __init__(self, work, deadline, overhead, prices=DEFAULT_PRICES):
        """work, deadline, overhead in whole seconds; prices ($/h) = (spot, on-demand)."""
        if work <= 0 or deadline <= 0 or overhead < 0:
            raise ValueError("work and deadline must be positive, overhead not negative")
        self.work, self.deadline, self.overhead = int(work), int(deadline), int(overhead)
        self.price = {IDLE: 0.0, SPOT: prices[0] / 3600.0, ON_DEMAND: prices[1] / 3600.0}


class Observation:
    """What a policy sees at the start of tick i (times in seconds since the job started)."""

    __slots__ = ("i", "t", "length", "remaining_time", "remaining_work", "held", "overhead_left",
                 "spot", "job")

    @property
    def progress(self):  # cp(t) of Sec. 5.2.1
        return self.job.work - self.remaining_work

    def expected_progress(self, t):  # ep(t) = t C(0) / R(0), Eq. (5)
        return t * self.job.work / self.job.deadline


# --- Policies -------------------------------------------------------------------------------------


class OnDemand:
    name = "on_demand"

    def decide(self, o):
        return ON_DEMAND if o.remaining_work > 0 else IDLE


class SafetyNet:
    """The Safety Net Rule (Sec. 3.3): once the job is idle and R(t) < C(t) + 2d, it goes on-demand
    and stays there until the end; from then on moving from idle to spot is not safe. `factor` is
    the 2 of 2d.

    In ticks a job decides only at tick starts, so an idle job may wait out a tick only if the margin
    still holds at the end of it (R(t) - gap >= C(t) + 2d); otherwise it goes on-demand now. This
    keeps R >= C + 2d at every tick start where the job is idle, which is what the paper's argument
    for the Exploitation Rule needs: a spot taken then leaves R >= C + d after its changeover, room
    for one more changeover to on-demand if it is preempted."""

    def __init__(self, factor=2.0):
        self.factor = factor
        self.latched = False

    def margin(self, o):
        return self.factor * o.job.overhead

    def may_take_spot(self, o):
        return o.remaining_time >= o.remaining_work + self.margin(o)

    def may_wait(self, o):
        return o.remaining_time - o.length >= o.remaining_work + self.margin(o)


class Greedy:
    """The greedy policy (Sec. 3.4): stay on any available spot until it is preempted (Exploitation
    Rule, Sec. 3.3), wait idle while no spot is available, and go on-demand for good when the Safety
    Net Rule fires (Sec. 3.3). Idle once the work is done (Thrifty Rule, Sec. 3.3)."""

    name = "greedy"

    def __init__(self, safety_factor=2.0):
        self.net = SafetyNet(safety_factor)

    def decide(self, o):
        if o.remaining_work <= 0:
            return IDLE  # Thrifty Rule
        if self.net.latched:
            return ON_DEMAND
        if o.held == SPOT:
            return SPOT  # Exploitation Rule
        if o.spot and self.net.may_take_spot(o):
            return SPOT
        if not o.spot and self.net.may_wait(o):
            return IDLE
        self.net.latched = True  # Safety Net Rule
        return ON_DEMAND


class UniformProgress:
    """Uniform Progress (Sec. 5.2.2) on the progress line ep(t) = t C(0) / R(0) (Eq. 5), with
    cp(t) = C(0) - C(t) (Sec. 5.2.1):
      1. Uniform Progress: when the job is idle and cp(t) < ep(t), go on-demand and stay on it to
         catch up;
      2. Taking Risks: take spot whenever it is available, even when cp(t) < ep(t), and stay on it
         until it is preempted (Exploitation Rule, Sec. 3.3);
      3. Hysteresis: on on-demand, stay on it until cp(t) >= ep(t + 2d) (the 2 is
         `hysteresis_factor`; None leaves the rule out: "Uniform Progress (plain)", which leaves
         on-demand as soon as spot appears);
    with the Safety Net Rule (Sec. 3.3, `safety_factor` the 2 of 2d) on top, checked whenever the
    job is not on spot: it is "not safe to move from idle to spot" once R(t) < C(t) + 2d, and from
    on-demand to spot it is the same move.

    On-demand is left only for spot (Sec. 5.2.2: "when the job is on on-demand, and a spot becomes
    available, our policy will immediately switch to spot"; Fig. 10), and rule 3 ranks above rule
    2 while the job is on on-demand. The authors' simulator does the same (an on-demand job with
    no spot available keeps its instance). `release_to_idle` is the other reading of rule 3: once
    ahead by the margin with no spot available, the job goes idle (and pays another changeover
    when it falls behind again)."""

    name = "uniform_progress"

    def __init__(self, hysteresis_factor=2.0, safety_factor=2.0, release_to_idle=False,
                 name=None):
        self.hysteresis_factor = hysteresis_factor
        self.release_to_idle = release_to_idle
        self.net = SafetyNet(safety_factor)
        if name:
            self.name = name

    def decide(self, o):
        if o.remaining_work <= 0:
            return IDLE  # Thrifty Rule
        if self.net.latched:
            return ON_DEMAND
        if o.held == SPOT:
            return SPOT  # rule 2, Exploitation Rule
        if o.held == ON_DEMAND:
            if self.hysteresis_factor is not None:
                ahead_by = o.t + self.hysteresis_factor * o.job.overhead
                if o.progress < o.expected_progress(ahead_by):
                    return ON_DEMAND  # rule 3
            if not o.spot and not self.release_to_idle:
                return ON_DEMAND  # left only for spot
        if o.spot:
            if self.net.may_take_spot(o):
                return SPOT  # rule 2
            self.net.latched = True
            return ON_DEMAND
        if o.progress < o.expected_progress(o.t):
            return ON_DEMAND  # rule 1
        if self.net.may_wait(o):
            return IDLE
        self.net.latched = True
        return ON_DEMAND


class Plan:
    """Replays the ideal's choices (see ideal())."""

    name = "ideal"

    def __init__(self, table):
        self.table = table  # (tick, held, overhead_left, remaining_work) -> mode

    def decide(self, o):
        if o.remaining_work <= 0:
            return IDLE
        return self.table(o.i, o.held, o.overhead_left, o.remaining_work)


# --- Simulation -----------------------------------------------------------------------------------


class Result:
    def __init__(self, policy, cost, finish, met, work, spot_work, changeovers, timeline):
        self.policy, self.cost, self.finish, self.met = policy, cost, finish, met
        self.spot_work, self.changeovers, self.timeline = spot_work, changeovers, timeline
        self.spot_share = spot_work / work

    def as_dict(self):
        return {"policy": self.policy, "cost": self.cost, "finish_seconds": self.finish,
                "deadline_met": self.met, "spot_share": self.spot_share,
                "changeovers": self.changeovers}


def tick_length(job, gap, t):
    """Ticks are `gap` long; the one holding the deadline ends at it."""
    return min(gap, job.deadline - t) if t < job.deadline else gap


def simulate(policy, spot_at, job, gap, max_ticks=None):
    """Runs one policy; spot_at(i) says whether spot is available during tick i."""
    if max_ticks is None:
        max_ticks = 4 * (job.deadline + job.work + 4 * job.overhead) // gap + 16
    held, overhead_left, done, t, cost = IDLE, 0, 0, 0, 0.0
    spot_work, changeovers, timeline = 0, 0, []
    o = Observation()
    o.job = job
    for i in range(max_ticks):
        length = tick_length(job, gap, t)
        available = spot_at(i)
        if held == SPOT and not available:
            held, overhead_left = IDLE, 0  # preempted
        o.i, o.t, o.length, o.spot = i, t, length, available
        o.remaining_time, o.remaining_work = job.deadline - t, job.work - done
        o.held, o.overhead_left = held, overhead_left
        choice = policy.decide(o)
        if choice == SPOT and not available:
            raise AssertionError("%s took spot at tick %d without any" % (policy.name, i))
        if choice != held:
            overhead_left = job.overhead if choice != IDLE else 0
            changeovers += choice != IDLE
        held = choice
        timeline.append(held)
        if held != IDLE:
            spent = min(overhead_left, length)
            overhead_left -= spent
            progress = min(length - spent, job.work - done)
            billed = spent + progress if done + progress == job.work else length
            cost += job.price[held] * billed
            done += progress
            if held == SPOT:
                spot_work += progress
            if done == job.work:
                finish = t + billed
                return Result(policy.name, cost, finish, finish <= job.deadline, job.work,
                              spot_work, changeovers, timeline)
        t += length
    raise RuntimeError("%s did not finish within %d ticks" % (policy.name, max_ticks))


def ideal(spot_at, job, gap):
    """The omniscient policy (Sec. 5.3.1) on the tick model above: the minimum-cost schedule that
    finishes by the deadline, knowing the whole trace. The paper writes it as an integer program
    (Eqs. 6-10: one instance type at a time, spot only when available, time on instances >= the
    computation plus d per changeover); here the same optimum is found exactly by dynamic
    programming backwards over ticks, on the state (instance held, changeover delay left, work
    left). Work moves in whole units of gcd(gap, d, W, D) seconds, so the state space is finite.

    Returns a Plan (replay it with simulate()) and its cost, or (None, inf) if no schedule meets
    the deadline (D < W + d with no spot to help is one such case)."""
    g, d, W, D = gap, job.overhead, job.work, job.deadline
    unit = math.gcd(math.gcd(g, d), math.gcd(W, D))
    ticks = -(-D // g)
    lengths = [min(g, D - i * g) for i in range(ticks)]
    # The changeover delay left at a tick start: d less whole ticks already spent on it.
    lefts = sorted({max(0, d - k * g) for k in range(1, d // g + 2)})
    states = [(IDLE, 0)] + [(m, left) for m in (SPOT, ON_DEMAND) for left in lefts]
    full = W // unit

    # Work left (in units) at tick i lies in [lo(i), hi(i)]: at most i ticks of work are done, and
    # no more can be left than time remains. Outside the band the value is not needed or infinite.
    def lo(i):
        return max(1, -(-(W - i * g) // unit))

    def hi(i):
        return min(full, (D - i * g) // unit) if i < ticks else 0

    value_next = {s: [] for s in states}  # at tick `ticks`: nothing left to do is free, else inf
    choices = [None] * ticks
    for i in range(ticks - 1, -1, -1):
        length, available = lengths[i], spot_at(i)
        l0, h0, l1, h1 = lo(i), hi(i), lo(i + 1), hi(i + 1)

        def after(state, w):
            if w <= 0:
                return 0.0
            if w < l1 or w > h1:
                return INF
            return value_next[state][w - l1]

        values, picks = {}, {}
        for state in states:
            held, left = state
            if held == SPOT and not available:
                held, left = IDLE, 0
            options = [(IDLE, (IDLE, 0), 0, 0)]
            for mode in ((SPOT, ON_DEMAND) if available else (ON_DEMAND,)):
                delay = left if held == mode else d
                spent = min(delay, length)
                options.append((mode, (mode, delay - spent), spent, (length - spent) // unit))
            row, pick = [], []
            for w in range(l0, h0 + 1):
                best, best_mode = INF, IDLE
                for mode, nxt, spent, step in options:
                    if mode == IDLE:
                        c = after(nxt, w)
                    elif w <= step:
                        c = job.price[mode] * (spent + w * unit)
                    else:
                        c = job.price[mode] * length + after(nxt, w - step)
                    if c < best:
                        best, best_mode = c, mode
                row.append(best)
                pick.append(best_mode)
            values[state], picks[state] = row, pick
        value_next, choices[i] = values, picks
    start = value_next[(IDLE, 0)][full - lo(0)] if lo(0) <= full <= hi(0) else INF
    if start == INF:
        return None, INF

    def table(i, held, left, remaining):
        if i >= ticks:
            return ON_DEMAND  # cannot happen on the plan; keeps a replay finite
        return choices[i][(held, left)][remaining // unit - lo(i)]

    return Plan(table), start


POLICIES = {
    "on_demand": lambda a: OnDemand(),
    "greedy": lambda a: Greedy(safety_factor=a.safety_factor),
    "uniform_progress": lambda a: UniformProgress(a.hysteresis_factor, a.safety_factor,
                                                  a.release_to_idle),
    "up_plain": lambda a: UniformProgress(None, a.safety_factor, a.release_to_idle,
                                          name="up_plain"),
}


def run_all(trace, start_tick, job, names, args):
    """Results per policy name (the ideal as "ideal"; None for it when infeasible)."""
    spot_at = trace.availability(start_tick, args.instances)
    out = {}
    for name in names:
        if name == "ideal":
            plan, expected = ideal(spot_at, job, trace.gap)
            if plan is None:
                out[name] = None
                continue
            r = simulate(plan, spot_at, job, trace.gap)
            if abs(r.cost - expected) > 1e-6 * max(1.0, expected):
                raise AssertionError("ideal replay cost %r != planned %r" % (r.cost, expected))
            out[name] = r
        else:
            out[name] = simulate(POLICIES[name](args), spot_at, job, trace.gap)
    return out


# --- Command line ---------------------------------------------------------------------------------


def parse_list(text):
    return [float(x) for x in str(text).split(",") if x.strip()]


def defaults(**kw):
    """The policy parameters as run_all() takes them, with the paper's defaults."""
    a = argparse.Namespace(hysteresis_factor=2.0, safety_factor=2.0, release_to_idle=False,
                           instances=1)
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def summarize(rows, names):
    """rows: list of dicts name -> Result (and "on_demand_cost")."""
    lines = ["%-17s %5s %9s %9s %7s %6s %11s" % ("policy", "runs", "cost/OD", "P50", "misses",
                                                 "spot", "vs ideal")]
    for name in names:
        ratios, misses, shares, gaps = [], 0, [], []
        for row in rows:
            r = row.get(name)
            if r is None:
                continue
            ratios.append(r.cost / row["on_demand_cost"])
            misses += not r.met
            shares.append(r.spot_share)
            if row.get("ideal") is not None:
                gaps.append(r.cost / row["ideal"].cost)
        if not ratios:
            continue
        lines.append("%-17s %5d %9.3f %9.3f %7d %5.0f%% %10.3fx" % (
            name, len(ratios), statistics.mean(ratios), statistics.median(ratios), misses,
            100 * statistics.mean(shares), statistics.mean(gaps) if gaps else float("nan")))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+", help="Kiln spot trace files")
    p.add_argument("--work-hours", type=float, default=48.0)
    p.add_argument("--deadline-hours", default="52",
                   help="hours after the start; with --windows, a comma list to draw from")
    p.add_argument("--overhead-hours", default="0.2",
                   help="changeover delay d; with --windows, a comma list to draw from")
    p.add_argument("--start-tick", type=int, default=0)
    p.add_argument("--prices", default="%g,%g" % DEFAULT_PRICES, help="spot,on-demand in $/h")
    p.add_argument("--instances", type=int, default=1,
                   help="instances the job needs; spot is available when the count reaches it")
    p.add_argument("--invert", action="store_true",
                   help="the trace marks unavailable ticks with 1 (launch-failure traces)")
    p.add_argument("--hysteresis-factor", type=float, default=2.0,
                   help="Uniform Progress stays on on-demand until cp(t) >= ep(t + F*d)")
    p.add_argument("--release-to-idle", action="store_true",
                   help="Uniform Progress leaves on-demand for idle once ahead by the margin")
    p.add_argument("--safety-factor", type=float, default=2.0,
                   help="the safety net fires when idle and R(t) < C(t) + F*d")
    p.add_argument("--policies", default="on_demand,greedy,uniform_progress,up_plain,ideal")
    p.add_argument("--windows", type=int, default=0,
                   help="draw this many random start ticks (and deadlines, overheads) per trace")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="one JSON object per run and policy")
    args = p.parse_args(argv)

    prices = tuple(parse_list(args.prices))
    if len(prices) != 2:
        p.error("--prices takes spot,on-demand")
    names = [n for n in args.policies.split(",") if n]
    for n in names:
        if n != "ideal" and n not in POLICIES:
            p.error("unknown policy %r" % n)
    if "on_demand" not in names:
        names.insert(0, "on_demand")  # the normaliser
    deadlines, overheads = parse_list(args.deadline_hours), parse_list(args.overhead_hours)
    work = hours_to_seconds(args.work_hours)
    rng = random.Random(args.seed)
    all_rows = []
    for path in args.traces:
        trace = Trace.load(path, invert=args.invert)
        runs = []
        if args.windows:
            for _ in range(args.windows):
                runs.append((rng.randrange(len(trace.counts)), rng.choice(deadlines),
                             rng.choice(overheads)))
        else:
            runs.append((args.start_tick, deadlines[0], overheads[0]))
        rows = []
        for start, deadline, overhead in runs:
            job = Job(work, hours_to_seconds(deadline), hours_to_seconds(overhead), prices)
            row = run_all(trace, start, job, names, args)
            row["on_demand_cost"] = row["on_demand"].cost
            rows.append(row)
            if args.json or not args.windows:
                for name in names:
                    r = row[name]
                    d = {"trace": path, "start_tick": start, "work_hours": args.work_hours,
                         "deadline_hours": deadline, "overhead_hours": overhead}
                    if r is None:
                        d.update(policy=name, feasible=False)
                    else:
                        d.update(r.as_dict())
                        d["cost_vs_on_demand"] = r.cost / row["on_demand_cost"]
                    if args.json:
                        print(json.dumps(d, sort_keys=True))
                    else:
                        print("%-17s cost $%8.2f  %.3f of on-demand  deadline %s  spot %3.0f%%"
                              % (name, r.cost, d["cost_vs_on_demand"],
                                 "met" if r.met else "MISSED", 100 * r.spot_share)
                              if r else "%-17s infeasible" % name)
        if args.windows and not args.json:
            print("%s: %d windows, available %.0f%% of ticks, W=%gh, D in %s h, d in %s h" % (
                path, len(rows), 100 * trace.available_fraction(args.instances), args.work_hours,
                args.deadline_hours, args.overhead_hours))
            print(summarize(rows, names))
            print()
        all_rows.extend(rows)
    if args.windows and not args.json and len(args.traces) > 1:
        print("all traces: %d windows" % len(all_rows))
        print(summarize(all_rows, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
