#!/usr/bin/env python3
"""Checks bench/spot_reference.py (the reference of the Can't-Be-Late policies) and
bench/spot_traces.py on tiny traces whose right answers are worked out by hand."""

import contextlib
import io
import json
import os
import random
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import spot_reference as ref  # noqa: E402
import spot_traces  # noqa: E402

H = 3600
SPOT_PRICE, OD_PRICE = ref.DEFAULT_PRICES
IDLE, SPOT, OD = ref.IDLE, ref.SPOT, ref.ON_DEMAND
POLICY_NAMES = ["on_demand", "greedy", "uniform_progress", "up_plain"]


def run(counts, work_h, deadline_h, overhead_h, gap=H, names=None, **params):
    trace = ref.Trace(gap, counts)
    job = ref.Job(work_h * H, deadline_h * H, overhead_h * H)
    return ref.run_all(trace, 0, job, names or POLICY_NAMES + ["ideal"], ref.defaults(**params))


class AlwaysAvailable(unittest.TestCase):
    def test_no_overhead_costs_spot_price_times_work(self):
        out = run([1], 4, 8, 0)
        for name in ("greedy", "uniform_progress", "ideal"):
            self.assertAlmostEqual(out[name].cost, SPOT_PRICE * 4, places=9, msg=name)
            self.assertTrue(out[name].met)
            self.assertEqual(out[name].spot_share, 1.0)

    def test_overhead_is_paid_once_at_spot_price(self):
        out = run([1], 4, 8, 0.5)
        for name in ("greedy", "uniform_progress", "ideal"):
            self.assertAlmostEqual(out[name].cost, SPOT_PRICE * 4.5, places=9, msg=name)
            self.assertEqual(out[name].changeovers, 1)
        # The policies start at once; the optimum may as well wait.
        self.assertAlmostEqual(out["greedy"].finish, 4.5 * H)
        self.assertAlmostEqual(out["uniform_progress"].finish, 4.5 * H)


class NeverAvailable(unittest.TestCase):
    def test_all_on_demand_and_on_time(self):
        out = run([0], 4, 8, 0.5)
        for name in POLICY_NAMES + ["ideal"]:
            self.assertTrue(out[name].met, name)
            self.assertEqual(out[name].spot_share, 0.0, name)
            self.assertGreaterEqual(out[name].cost, OD_PRICE * 4.5 - 1e-9, name)
        # Greedy waits, Uniform Progress falls behind after a tick; both then run on on-demand
        # once: the on-demand price for W + d.
        for name in ("greedy", "uniform_progress", "up_plain"):
            self.assertAlmostEqual(out[name].cost, OD_PRICE * 4.5, places=9, msg=name)
            self.assertEqual(out[name].changeovers, 1, name)
        self.assertEqual(out["uniform_progress"].timeline, [IDLE] + [OD] * 5)
        self.assertAlmostEqual(out["ideal"].cost, OD_PRICE * 4.5, places=9)

    def test_released_to_idle_pays_more_changeovers(self):
        # The other reading of the hysteresis rule: ahead by 2d with no spot, go idle.
        out = run([0], 4, 8, 0.5, names=["uniform_progress"], release_to_idle=True)
        r = out["uniform_progress"]
        self.assertTrue(r.met)
        self.assertGreater(r.changeovers, 1)
        self.assertIn(IDLE, r.timeline[2:])


class GreedyWaitsUniformProgressCatchesUp(unittest.TestCase):
    # W = 6 h, D = 12 h, d = 1 h, ticks of 1 h; no spot for 6 h, then spot to the deadline.
    COUNTS = [0] * 6 + [1] * 6

    def test_by_hand(self):
        out = run(self.COUNTS, 6, 12, 1)
        # Greedy waits while R - 1h >= C + 2d, i.e. through tick 3; at tick 4 (R = 8, C = 6) it
        # goes on-demand for good: 1 h of delay and 6 h of work, done at 11 h, no spot used.
        g = out["greedy"]
        self.assertEqual(g.timeline, [IDLE] * 4 + [OD] * 7)
        self.assertAlmostEqual(g.cost, OD_PRICE * 7, places=9)
        self.assertEqual(g.spot_share, 0.0)
        # Uniform Progress is behind the line at tick 1 (cp 0 < ep 0.5) and goes on-demand; it
        # stays there until cp >= ep(t + 2d): at tick 6, cp = 4 = ep(8). Spot is there, R = 6 >=
        # C + 2d = 4, so it takes spot: 1 h of delay, 2 h of work, done at 9 h.
        u = out["uniform_progress"]
        self.assertEqual(u.timeline, [IDLE] + [OD] * 5 + [SPOT] * 3)
        self.assertAlmostEqual(u.cost, OD_PRICE * 5 + SPOT_PRICE * 3, places=9)
        self.assertAlmostEqual(u.spot_share, 2 / 6)
        self.assertTrue(u.met and g.met)
        self.assertLess(u.cost, g.cost)
        # The optimum: 1 h of work on on-demand (after its delay) just before the spot comes,
        # then spot to the deadline (1 h delay + 5 h of work).
        self.assertAlmostEqual(out["ideal"].cost, OD_PRICE * 2 + SPOT_PRICE * 6, places=9)
        self.assertTrue(out["ideal"].met)

    def test_hysteresis_keeps_on_demand_while_spot_is_there(self):
        # With spot from tick 3, Uniform Progress is still on on-demand (cp 1 < ep(3 + 2) = 2.5)
        # and stays; without hysteresis it jumps to spot at once.
        counts = [0] * 3 + [1] * 9
        out = run(counts, 6, 12, 1)
        self.assertEqual(out["uniform_progress"].timeline[3], OD)
        self.assertEqual(out["up_plain"].timeline[3], SPOT)


class SafetyNet(unittest.TestCase):
    def test_fires_when_slack_reaches_2d(self):
        # W = 4 h, D = 10 h, d = 1 h, no spot: slack 6 h falls 1 h a tick while idle. At tick 4 the
        # slack is 2 h = 2d, and waiting another tick would leave less: on-demand from there.
        out = run([0], 4, 10, 1, names=["greedy"])
        g = out["greedy"]
        self.assertEqual(g.timeline.index(OD), 4)
        self.assertEqual(g.timeline[4:], [OD] * 5)
        self.assertAlmostEqual(g.finish, 9 * H)
        self.assertTrue(g.met)

    def test_slack_below_2d_means_no_spot_even_when_available(self):
        # W = 4 h, D = 5 h, d = 1 h: slack d < 2d from the start, so taking spot is not safe.
        out = run([1], 4, 5, 1)
        for name in ("greedy", "uniform_progress", "up_plain"):
            self.assertEqual(out[name].timeline, [OD] * 5, name)
            self.assertTrue(out[name].met, name)
        # The optimum takes the risk it can see is none: spot throughout.
        self.assertAlmostEqual(out["ideal"].cost, SPOT_PRICE * 5, places=9)

    def test_after_a_preemption_on_demand_to_the_end(self):
        # W = 4 h, D = 7 h, d = 1 h; spot at ticks 0-1, gone at 2, back from 3. After the
        # preemption the slack is 2d: waiting is not safe, and on-demand lasts to the end.
        out = run([1, 1, 0, 1, 1, 1, 1], 4, 7, 1)
        for name in ("greedy", "uniform_progress"):
            r = out[name]
            self.assertEqual(r.timeline[:2], [SPOT, SPOT], name)
            self.assertEqual(r.timeline[2:], [OD] * 4, name)
            self.assertTrue(r.met, name)


class RandomTraces(unittest.TestCase):
    def cases(self, n, seed):
        rng = random.Random(seed)
        for k in range(n):
            gap = rng.choice([600, 1800, 3600])
            doc = spot_traces.generate(seed=seed * 1000 + k, days=3, gap_seconds=gap,
                                       availability=rng.choice([0.2, 0.5, 0.8]),
                                       mean_up_hours=rng.choice([1, 3]), max_count=2)
            trace = ref.Trace(gap, doc["data"])
            work = rng.randint(2, 8) * 1800
            overhead = rng.choice([0, 600, 1200, 1800, 3600])
            deadline = work + overhead + rng.randint(0, 16) * 1800
            start = rng.randrange(len(trace.counts))
            instances = rng.choice([1, 1, 2])
            yield trace, start, ref.Job(work, deadline, overhead), instances

    def test_no_policy_misses_a_deadline_on_demand_could_meet(self):
        # D >= W + d: on-demand from the start would meet it.
        for k, (trace, start, job, instances) in enumerate(self.cases(60, 1)):
            out = ref.run_all(trace, start, job, POLICY_NAMES + ["ideal"],
                              ref.defaults(instances=instances, release_to_idle=k % 2 == 1))
            for name in POLICY_NAMES + ["ideal"]:
                self.assertIsNotNone(out[name], name)
                self.assertTrue(out[name].met, "%s W=%d D=%d d=%d gap=%d start=%d" % (
                    name, job.work, job.deadline, job.overhead, trace.gap, start))

    def test_ideal_is_never_more_expensive(self):
        for trace, start, job, instances in self.cases(60, 2):
            best = ref.run_all(trace, start, job, ["ideal"], ref.defaults(instances=instances))
            best = best["ideal"]
            self.assertTrue(best.met)
            for hysteresis, idle in ((None, False), (0.0, True), (1.0, False), (2.0, False),
                                     (2.0, True), (4.0, False)):
                out = ref.run_all(trace, start, job, POLICY_NAMES,
                                  ref.defaults(instances=instances, hysteresis_factor=hysteresis,
                                               release_to_idle=idle))
                for name in POLICY_NAMES:
                    self.assertLessEqual(best.cost, out[name].cost + 1e-9, name)

    def test_infeasible_deadline(self):
        # D < W + d with no spot: no schedule meets it; on-demand finishes late.
        out = run([0], 4, 4, 1)
        self.assertIsNone(out["ideal"])
        self.assertFalse(out["on_demand"].met)
        self.assertAlmostEqual(out["on_demand"].finish, 5 * H)


class Traces(unittest.TestCase):
    def test_load_wraps_inverts_and_counts_instances(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"metadata": {"gap_seconds": 600}, "data": [0, 2, 1]}, f)
        try:
            t = ref.Trace.load(f.name)
            self.assertEqual(t.gap, 600)
            one = t.availability(1)
            self.assertEqual([one(i) for i in range(5)], [True, True, False, True, True])
            two = t.availability(0, instances=2)
            self.assertEqual([two(i) for i in range(3)], [False, True, False])
            inv = ref.Trace.load(f.name, invert=True).availability(0)
            self.assertEqual([inv(i) for i in range(3)], [True, False, False])
        finally:
            os.unlink(f.name)

    def test_generator_is_seeded_and_hits_its_availability(self):
        a = spot_traces.generate(seed=5, days=400, availability=0.6, mean_up_hours=3)
        b = spot_traces.generate(seed=5, days=400, availability=0.6, mean_up_hours=3)
        self.assertEqual(a, b)
        self.assertEqual(a["metadata"]["gap_seconds"], 600)
        self.assertEqual(len(a["data"]), 400 * 144)
        frac = sum(1 for c in a["data"] if c > 0) / len(a["data"])
        self.assertAlmostEqual(frac, 0.6, delta=0.08)
        p = spot_traces.generate(seed=5, days=400, availability=0.3, dist="pareto", spread=1.8,
                                 max_count=4)
        frac = sum(1 for c in p["data"] if c > 0) / len(p["data"])
        self.assertAlmostEqual(frac, 0.3, delta=0.1)
        self.assertTrue(all(0 <= c <= 4 for c in p["data"]))

    def test_command_line_table(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(spot_traces.generate(seed=1, days=2, gap_seconds=1800), f)
        try:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                ref.main([f.name, "--windows", "3", "--work-hours", "4", "--deadline-hours",
                          "5,6", "--overhead-hours", "0.5"])
            text = out.getvalue()
            for name in POLICY_NAMES + ["ideal"]:
                self.assertIn(name, text)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                ref.main([f.name, "--work-hours", "4", "--deadline-hours", "6",
                          "--overhead-hours", "0.5", "--json"])
            rows = [json.loads(line) for line in out.getvalue().splitlines()]
            self.assertEqual([r["policy"] for r in rows], POLICY_NAMES + ["ideal"])
            self.assertTrue(all(r["deadline_met"] for r in rows))
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
