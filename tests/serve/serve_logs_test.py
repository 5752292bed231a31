#!/usr/bin/env python3
"""Training logs through `kiln serve`'s CloudWatch Logs API, read by clients
nobody on the project wrote: boto3 (as the SageMaker SDK reads a job's logs,
and as `aws logs tail --follow` follows a group), and the aws CLI.

Starts `kiln serve` on a free loopback port and stops it at the end, also
when a test fails.

    serve_logs_test.py KILN_BINARY
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import botocore.exceptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_test  # noqa: E402  (the server and the clients)

GROUP = "/aws/sagemaker/TrainingJobs"

# Prints KILN_TEST_LINES lines, one every KILN_TEST_PAUSE seconds, on each
# host, then one last line without a newline.
CHATTY = """#!/bin/sh
i=1
while [ $i -le "${KILN_TEST_LINES:-5}" ]; do
  echo "epoch $i host $(hostname 2>/dev/null || echo ?) loss 0.$i"
  i=$((i + 1))
  sleep "${KILN_TEST_PAUSE:-0}"
done
echo "ERROR nothing wrong, just a word to find"
printf 'the end'
"""


class ServeLogsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kiln-serve-logs-")
        os.chmod(cls.work, 0o755)  # run as root, the containers run as nobody
        with open(os.path.join(cls.work, "keys"), "w") as f:
            for key, (secret, account) in serve_test.KEYS.items():
                f.write(f"{key} {secret} {account}\n")
        os.makedirs(os.path.join(cls.work, "chatty"))
        path = os.path.join(cls.work, "chatty", "train")
        with open(path, "w") as f:
            f.write(CHATTY)
        os.chmod(path, 0o755)
        cls.server = serve_test.Server(cls.work)
        cls.server.start()
        cls.sm = serve_test.client(cls.server.endpoint)
        cls.logs = serve_test.client(cls.server.endpoint, service="logs")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def create(self, name, lines=5, pause=0, count=1):
        self.sm.create_training_job(
            TrainingJobName=name,
            RoleArn="arn:aws:iam::111122223333:role/test",
            AlgorithmSpecification={"TrainingImage": os.path.join(self.work, "chatty"),
                                    "TrainingInputMode": "File"},
            OutputDataConfig={"S3OutputPath": f"file://{self.work}/out"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": count,
                            "VolumeSizeInGB": 1},
            StoppingCondition={"MaxRuntimeInSeconds": 120},
            Environment={"KILN_TEST_LINES": str(lines), "KILN_TEST_PAUSE": str(pause)})

    def wait(self, name):
        self.sm.get_waiter("training_job_completed_or_stopped").wait(
            TrainingJobName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        return self.sm.describe_training_job(TrainingJobName=name)

    def error(self, call, **kwargs):
        with self.assertRaises(botocore.exceptions.ClientError) as caught:
            call(**kwargs)
        return caught.exception.response["Error"]

    def expected(self, lines):
        return [f"epoch {i} host" for i in range(1, lines + 1)]

    def container_lines(self, messages):
        return [m for m in messages if not m.startswith("[kiln] ")]

    # --- the SageMaker SDK's way: the job's streams, each read from its head

    def sdk_read(self, name, positions):
        """One round of sagemaker.logs' multi-stream loop: new lines of each
        stream from where the last round stopped."""
        streams = self.logs.describe_log_streams(
            logGroupName=GROUP, logStreamNamePrefix=name + "/", orderBy="LogStreamName",
            limit=50)["logStreams"]
        lines = []
        for s in streams:
            stream = s["logStreamName"]
            token = positions.get(stream)
            while True:
                kwargs = {"nextToken": token} if token else {}
                page = self.logs.get_log_events(logGroupName=GROUP, logStreamName=stream,
                                                startTime=0, startFromHead=True, **kwargs)
                lines += [e["message"] for e in page["events"]]
                if page["nextForwardToken"] == token:
                    break
                token = page["nextForwardToken"]
            positions[stream] = token
        return lines

    def test_the_sdks_log_loop_follows_a_running_job_to_its_end(self):
        self.create("logs-sdk", lines=12, pause=0.25)
        positions, lines = {}, []
        while True:
            status = self.sm.describe_training_job(TrainingJobName="logs-sdk")["TrainingJobStatus"]
            lines += self.sdk_read("logs-sdk", positions)
            if status != "InProgress":
                break
            time.sleep(0.3)
        lines += self.sdk_read("logs-sdk", positions)  # (what came after the last look)
        container = self.container_lines(lines)
        self.assertEqual([m[:len(p)] for m, p in zip(container, self.expected(12))],
                         self.expected(12))
        # The last line, which never got its newline, is whole once the run ended.
        self.assertEqual(container[-2:],
                         ["ERROR nothing wrong, just a word to find", "the end"])
        self.assertEqual(len(container), 14)  # once each
        self.assertTrue(any(m.startswith("[kiln] ") for m in lines))

    # --- a job's streams and their events

    def test_streams_are_described_and_read_both_ways(self):
        self.create("logs-two", lines=4, count=2)
        self.wait("logs-two")
        before = int(time.time() * 1000)
        streams = self.logs.describe_log_streams(logGroupName=GROUP,
                                                 logStreamNamePrefix="logs-two/")["logStreams"]
        self.assertEqual([s["logStreamName"].split("-")[2] for s in streams], ["1", "2"])
        for s in streams:
            self.assertRegex(s["logStreamName"], r"^logs-two/algo-[12]-\d+$")
            self.assertEqual(s["arn"], "arn:aws:logs:us-east-1:111122223333:log-group:"
                             f"{GROUP}:log-stream:{s['logStreamName']}")
            self.assertLessEqual(s["creationTime"], s["firstEventTimestamp"] + 1000)
            self.assertLessEqual(s["firstEventTimestamp"], s["lastEventTimestamp"])
            self.assertLessEqual(s["lastEventTimestamp"], before)
        stream = streams[0]["logStreamName"]

        # The tail: the last events, then back page by page.
        # (The last is Kiln's line about the exit.)
        page = self.logs.get_log_events(logGroupName=GROUP, logStreamName=stream, limit=3)
        messages = [e["message"] for e in page["events"]]
        self.assertEqual(messages[:2], ["ERROR nothing wrong, just a word to find", "the end"])
        self.assertTrue(messages[2].startswith("[kiln] algo-1 exited with 0"), messages[2])
        back = self.logs.get_log_events(logGroupName=GROUP, logStreamName=stream, limit=2,
                                        nextToken=page["nextBackwardToken"])
        self.assertEqual(len(back["events"]), 2)
        self.assertTrue(back["events"][1]["message"].startswith("epoch 4 "))
        # From the head, every event once, in order, timestamps never going back.
        head = self.logs.get_log_events(logGroupName=GROUP, logStreamName=stream,
                                        startFromHead=True)
        events = head["events"]
        self.assertEqual([e["message"] for e in events[-3:]], messages)
        self.assertEqual([e["timestamp"] for e in events],
                         sorted(e["timestamp"] for e in events))
        again = self.logs.get_log_events(logGroupName=GROUP, logStreamName=stream,
                                         nextToken=head["nextForwardToken"])
        self.assertEqual(again["events"], [])
        self.assertEqual(again["nextForwardToken"], head["nextForwardToken"])
        # A time range.
        last = events[-1]["timestamp"]
        timed = self.logs.get_log_events(logGroupName=GROUP, logStreamName=stream,
                                         startFromHead=True, startTime=last)
        self.assertTrue(all(e["timestamp"] >= last for e in timed["events"]))
        self.assertEqual(timed["events"][-1]["message"], messages[-1])
        none = self.logs.get_log_events(logGroupName=GROUP, logStreamName=stream,
                                        startFromHead=True, endTime=events[0]["timestamp"])
        self.assertEqual(none["events"], [])

    def test_filter_interleaves_streams_and_finds_terms(self):
        self.create("logs-filter", lines=3, count=2)
        self.wait("logs-filter")
        events = [e for page in self.logs.get_paginator("filter_log_events").paginate(
                      logGroupName=GROUP, logStreamNamePrefix="logs-filter/",
                      PaginationConfig={"PageSize": 2})
                  for e in page["events"]]
        container = [e for e in events if not e["message"].startswith("[kiln] ")]
        self.assertEqual(len(container), 10)  # 5 lines on each of 2 hosts
        self.assertEqual([e["timestamp"] for e in events],
                         sorted(e["timestamp"] for e in events))
        self.assertEqual(len({e["eventId"] for e in events}), len(events))
        self.assertEqual({e["logStreamName"].split("/")[1].split("-")[1] for e in container},
                         {"1", "2"})

        def find(pattern):
            return [e["message"] for e in self.logs.filter_log_events(
                logGroupName=GROUP, logStreamNamePrefix="logs-filter/",
                filterPattern=pattern)["events"]]
        self.assertEqual(find("ERROR"), ["ERROR nothing wrong, just a word to find"] * 2)
        self.assertEqual(len(find('"epoch 2"')), 2)
        self.assertEqual(len(find("?epoch ?ERROR -host")), 2)
        self.assertEqual(find("epoch 0.3"), [m for m in find("epoch") if "0.3" in m])
        e = self.error(self.logs.filter_log_events, logGroupName=GROUP,
                       filterPattern='{ $.level = "ERROR" }')
        self.assertEqual(e["Code"], "InvalidParameterException")
        self.assertIn("filterPattern", e["Message"])
        # By names.
        names = [s["logStreamName"] for s in self.logs.describe_log_streams(
            logGroupName=GROUP, logStreamNamePrefix="logs-filter/")["logStreams"]]
        one = self.logs.filter_log_events(logGroupName=GROUP, logStreamNames=names[1:],
                                          filterPattern="epoch")
        self.assertEqual({e["logStreamName"] for e in one["events"]}, {names[1]})
        self.assertEqual(one["searchedLogStreams"],
                         [{"logStreamName": names[1], "searchedCompletely": True}])

    def test_following_the_group_as_aws_logs_tail_does(self):
        """`aws logs tail --follow` (aws CLI v2): filter_log_events from a start
        time, page by page, again every few seconds; events already shown are
        told apart by their eventId."""
        start = int(time.time() * 1000) - 1000
        self.create("logs-tail", lines=10, pause=0.2)
        seen, shown = set(), []
        while True:
            done = self.sm.describe_training_job(
                TrainingJobName="logs-tail")["TrainingJobStatus"] != "InProgress"
            for page in self.logs.get_paginator("filter_log_events").paginate(
                    logGroupName=GROUP, logStreamNamePrefix="logs-tail/", startTime=start):
                for e in page["events"]:
                    if e["eventId"] not in seen:
                        seen.add(e["eventId"])
                        shown.append(e["message"])
            if done:
                break
            time.sleep(0.5)
        container = self.container_lines(shown)
        self.assertEqual(len(container), 12)
        self.assertEqual([m.split(" host")[0] for m in container[:10]],
                         [f"epoch {i}" for i in range(1, 11)])

    # --- refusals

    def test_unknown_groups_and_streams_and_other_accounts(self):
        self.create("logs-mine", lines=1)
        self.wait("logs-mine")
        e = self.error(self.logs.describe_log_streams, logGroupName="/aws/lambda/x")
        self.assertEqual(e["Code"], "ResourceNotFoundException")
        e = self.error(self.logs.get_log_events, logGroupName=GROUP,
                       logStreamName="logs-mine/algo-9-1")
        self.assertEqual(e["Code"], "ResourceNotFoundException")
        e = self.error(self.logs.get_log_events, logGroupName=GROUP,
                       logStreamName="../../keys")
        self.assertEqual(e["Code"], "ResourceNotFoundException")
        stream = self.logs.describe_log_streams(
            logGroupName=GROUP, logStreamNamePrefix="logs-mine/")["logStreams"][0]["logStreamName"]
        e = self.error(self.logs.get_log_events, logGroupName=GROUP, logStreamName=stream,
                       nextToken="not-a-token")
        self.assertEqual(e["Code"], "InvalidParameterException")
        e = self.error(self.logs.describe_log_streams, logGroupName=GROUP,
                       logStreamNamePrefix="logs-", orderBy="LastEventTime")
        self.assertEqual(e["Code"], "InvalidParameterException")
        other = serve_test.client(self.server.endpoint, "AKIDTWO", service="logs")
        self.assertEqual(other.describe_log_streams(
            logGroupName=GROUP, logStreamNamePrefix="logs-mine/")["logStreams"], [])
        e = self.error(other.get_log_events, logGroupName=GROUP, logStreamName=stream)
        self.assertEqual(e["Code"], "ResourceNotFoundException")
        # A Logs call signed for SageMaker is refused before it is read.
        status, body = serve_test.ServeTest.raw(
            self, json.dumps({"logGroupName": GROUP}).encode(), {},
            target="Logs_20140328.DescribeLogStreams")
        self.assertEqual((status, body["__type"]), (400, "InvalidSignatureException"))
        self.assertIn("us-east-1/logs", body["message"])
        by_time = self.logs.describe_log_streams(logGroupName=GROUP, orderBy="LastEventTime",
                                                 descending=True, limit=1)["logStreams"]
        self.assertEqual(len(by_time), 1)

    # --- kiln logs over the API

    def kiln(self, *args, key="AKIDONE"):
        env = dict(os.environ, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=serve_test.KEYS[key][0],
                   AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/dev/null",
                   AWS_SHARED_CREDENTIALS_FILE="/dev/null", KILN_ENDPOINT=self.server.endpoint)
        return subprocess.run([serve_test.KILN] + list(args), env=env, capture_output=True,
                              text=True, timeout=120)

    def test_kiln_logs_follows_a_job_on_the_server(self):
        self.create("logs-verb", lines=6, pause=0.2, count=2)
        out = self.kiln("logs", "--follow", "--host", "algo-2", "logs-verb")
        self.assertEqual(out.returncode, 0, out.stderr)
        container = self.container_lines(out.stdout.splitlines())
        self.assertEqual([m.split(" host")[0] for m in container[:6]],
                         [f"epoch {i}" for i in range(1, 7)])
        self.assertEqual(container[6:], ["ERROR nothing wrong, just a word to find", "the end"])
        # Both hosts: each line says its stream.
        out = self.kiln("logs", "logs-verb")
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(len([l for l in lines if " epoch " in l]), 12)
        self.assertTrue(all(l.startswith("logs-verb/algo-") for l in lines), lines)
        out = self.kiln("logs", "--host", "algo-3", "logs-verb")
        self.assertEqual(out.returncode, 1)
        self.assertIn("has no host 'algo-3'", out.stderr)
        out = self.kiln("logs", "logs-verb", key="AKIDTWO")
        self.assertEqual(out.returncode, 1)
        self.assertIn("ValidationException", out.stderr)

    # --- the aws CLI

    def test_the_aws_cli_reads_the_logs(self):
        if shutil.which("aws") is None:
            self.skipTest("the aws CLI is not installed (cmake/install-deps.sh installs it)")
        self.create("logs-cli", lines=3)
        self.wait("logs-cli")
        env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDONE", AWS_SECRET_ACCESS_KEY="secret-one",
                   AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/dev/null",
                   AWS_SHARED_CREDENTIALS_FILE="/dev/null")
        base = ["aws", "logs", "--endpoint-url", self.server.endpoint, "--output", "json"]

        def aws(*args):
            out = subprocess.run(base + list(args), env=env, capture_output=True, text=True,
                                 timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            return json.loads(out.stdout)
        streams = aws("describe-log-streams", "--log-group-name", GROUP,
                      "--log-stream-name-prefix", "logs-cli/")["logStreams"]
        self.assertEqual(len(streams), 1)
        events = aws("get-log-events", "--log-group-name", GROUP, "--log-stream-name",
                     streams[0]["logStreamName"], "--start-from-head")["events"]
        self.assertEqual(self.container_lines([e["message"] for e in events])[-1], "the end")
        found = aws("filter-log-events", "--log-group-name", GROUP, "--log-stream-name-prefix",
                    "logs-cli/", "--filter-pattern", "epoch")["events"]
        self.assertEqual(len(found), 3)


if __name__ == "__main__":
    serve_test.KILN = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
