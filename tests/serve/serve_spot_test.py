#!/usr/bin/env python3
"""A spot job with an injected interruption, through `kiln serve`: boto3 creates
the job, Kiln.InjectSpotInterruption (a raw request signed by botocore's
signer, and `kiln interrupt`) interrupts it, boto3's waiter sees it complete
from its checkpoint.

Starts `kiln serve --allow-fault-injection` on a free loopback port, and for
one test a server without the flag; every server is stopped with SIGTERM at
the end, also when a test fails.

    serve_spot_test.py KILN_BINARY
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import botocore.exceptions

import serve_test
from serve_test import KEYS, client

KILN = None

# Resumable: the first attempt saves its step on SIGTERM (the interruption);
# the next attempt finds it restored and finishes.
RESUMABLE = """#!/bin/sh
ckpt="$SAGEMAKER_BASE_DIR/checkpoints"
if [ -f "$ckpt/step" ]; then
  echo "resumed at step $(cat "$ckpt/step")"
  echo "resumed at step $(cat "$ckpt/step")" > "$SM_MODEL_DIR/model.txt"
  exit 0
fi
trap 'echo 7 > "$ckpt/step"; exit 0' TERM
echo running
while true; do sleep 0.05; done
"""


class ServeSpotTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kiln-serve-spot-")
        os.chmod(cls.work, 0o755)  # run as root, the containers run as nobody
        with open(os.path.join(cls.work, "keys"), "w") as f:
            for key, (secret, account) in KEYS.items():
                f.write(f"{key} {secret} {account}\n")
        os.makedirs(os.path.join(cls.work, "image"))
        path = os.path.join(cls.work, "image", "train")
        with open(path, "w") as f:
            f.write(RESUMABLE)
        os.chmod(path, 0o755)
        os.makedirs(os.path.join(cls.work, "data"))
        with open(os.path.join(cls.work, "data", "a.csv"), "w") as f:
            f.write("1\n")
        cls.server = serve_test.Server(cls.work, ["--allow-fault-injection"], grace=5)
        cls.server.start()
        cls.sm = client(cls.server.endpoint)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def request(self, name, spot=True):
        r = serve_test.job_request(self.work, name)
        if spot:
            r["EnableManagedSpotTraining"] = True
            r["StoppingCondition"]["MaxWaitTimeInSeconds"] = 300
            r["CheckpointConfig"] = {"S3Uri": f"file://{self.work}/ckpt/{name}/"}
        return r

    def until_training(self, name):
        for _ in range(300):
            d = self.sm.describe_training_job(TrainingJobName=name)
            if d["SecondaryStatus"] == "Training":
                return d
            self.assertEqual(d["TrainingJobStatus"], "InProgress", d.get("FailureReason"))
            time.sleep(0.1)
        self.fail(f"{name} never started Training")

    def wait(self, name):
        self.sm.get_waiter("training_job_completed_or_stopped").wait(
            TrainingJobName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
        return self.sm.describe_training_job(TrainingJobName=name)

    def inject(self, body, key="AKIDONE", endpoint=None):
        """Kiln.InjectSpotInterruption as a raw request, signed by botocore."""
        endpoint = endpoint or self.server.endpoint
        request = botocore.awsrequest.AWSRequest(
            method="POST", url=endpoint + "/", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/x-amz-json-1.1",
                     "X-Amz-Target": "Kiln.InjectSpotInterruption"})
        botocore.auth.SigV4Auth(botocore.credentials.Credentials(key, KEYS[key][0]),
                                "sagemaker", "us-east-1").add_auth(request)
        prepared = request.prepare()
        conn = http.client.HTTPConnection(endpoint.split("//")[1], timeout=10)
        conn.request("POST", "/", body=prepared.body, headers=dict(prepared.headers))
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, json.loads(data) if data else {}

    def kiln(self, *args):
        env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDONE",
                   AWS_SECRET_ACCESS_KEY=KEYS["AKIDONE"][0], AWS_DEFAULT_REGION="us-east-1",
                   AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null",
                   KILN_ENDPOINT=self.server.endpoint)
        return subprocess.run([KILN] + list(args), env=env, capture_output=True, text=True,
                              timeout=60)

    def assert_resumed_after_one_interruption(self, name):
        d = self.wait(name)
        self.assertEqual(d["TrainingJobStatus"], "Completed", d.get("FailureReason"))
        transitions = d["SecondaryStatusTransitions"]
        interrupted = [t for t in transitions if t["Status"] == "Interrupted"]
        self.assertEqual(len(interrupted), 1, [t["Status"] for t in transitions])
        self.assertIn("Spot interruption 1 (instance algo-1)", interrupted[0]["StatusMessage"])
        # Training again after the interruption, then done.
        statuses = [t["Status"] for t in transitions]
        self.assertIn("Training", statuses[statuses.index("Interrupted"):])
        self.assertEqual(statuses[-1], "Completed")
        self.assertLessEqual(d["BillableTimeInSeconds"], d["TrainingTimeInSeconds"])
        with tarfile.open(os.path.join(self.work, "out", name, "output", "model.tar.gz")) as t:
            self.assertEqual(t.extractfile("model.txt").read(), b"resumed at step 7\n")
        return d

    def test_an_interrupted_spot_job_resumes_from_its_checkpoint(self):
        # Two jobs, side by side (the engine waits before it asks for spot
        # capacity again): one interrupted by a raw signed request, one by
        # `kiln interrupt`.
        self.sm.create_training_job(**self.request("spot-raw"))
        self.sm.create_training_job(**self.request("spot-cli"))
        self.until_training("spot-raw")
        self.until_training("spot-cli")
        status, body = self.inject({"TrainingJobName": "spot-raw", "Host": "algo-1"})
        self.assertEqual((status, body), (200, {}))
        out = self.kiln("interrupt", "spot-cli")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assert_resumed_after_one_interruption("spot-raw")
        self.assert_resumed_after_one_interruption("spot-cli")
        # Ended: refused, with the service's code, exit 2.
        out = self.kiln("interrupt", "--host", "algo-1", "spot-cli")
        self.assertEqual(out.returncode, 2)
        self.assertIn("ValidationException: ", out.stderr)
        self.assertIn("not running", out.stderr)

    def test_refusals_name_the_field_and_another_account_cannot_interrupt(self):
        self.sm.create_training_job(**self.request("spot-refusals"))
        self.sm.create_training_job(**self.request("on-demand", spot=False))
        self.until_training("spot-refusals")
        self.until_training("on-demand")

        status, body = self.inject({"Host": "algo-1"})
        self.assertEqual((status, body["__type"]), (400, "ValidationException"))
        self.assertIn("TrainingJobName", body["message"])
        status, body = self.inject({"TrainingJobName": 5})
        self.assertEqual((status, body["__type"]), (400, "ValidationException"))
        self.assertIn("Invalid type for parameter TrainingJobName", body["message"])
        status, body = self.inject({"TrainingJobName": "spot-refusals", "Bogus": 1})
        self.assertEqual((status, body["__type"]), (400, "ValidationException"))
        self.assertIn("Bogus", body["message"])
        status, body = self.inject({"TrainingJobName": "spot-refusals", "Host": "algo-9"})
        self.assertEqual((status, body["__type"]), (400, "ValidationException"))
        self.assertIn("Host", body["message"])
        self.assertIn("algo-9", body["message"])
        status, body = self.inject({"TrainingJobName": "on-demand"})
        self.assertEqual((status, body["__type"]), (400, "ValidationException"))
        self.assertIn("EnableManagedSpotTraining", body["message"])

        unknown = self.inject({"TrainingJobName": "spot-nobody"})
        self.assertEqual((unknown[0], unknown[1]["__type"]), (400, "ResourceNotFound"))
        # Another account's job is, to the caller, a job that does not exist.
        status, body = self.inject({"TrainingJobName": "spot-refusals"}, key="AKIDTWO")
        self.assertEqual((status, body["__type"]), (unknown[0], unknown[1]["__type"]))
        self.assertEqual(body["message"], unknown[1]["message"].replace("spot-nobody",
                                                                       "spot-refusals"))

        # None of that touched the job.
        d = self.sm.describe_training_job(TrainingJobName="spot-refusals")
        self.assertEqual(d["SecondaryStatus"], "Training")
        self.assertNotIn("Interrupted", [t["Status"] for t in d["SecondaryStatusTransitions"]])
        for name in ("spot-refusals", "on-demand"):
            self.sm.stop_training_job(TrainingJobName=name)
        for name in ("spot-refusals", "on-demand"):
            self.assertEqual(self.wait(name)["TrainingJobStatus"], "Stopped")

    def test_without_the_flag_the_operation_does_not_exist(self):
        plain = serve_test.Server(self.work, state="plain", grace=5)
        plain.start()
        try:
            status, body = self.inject({"TrainingJobName": "spot-any"}, endpoint=plain.endpoint)
            self.assertEqual((status, body["__type"]), (400, "UnknownOperationException"))
            env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDONE",
                       AWS_SECRET_ACCESS_KEY=KEYS["AKIDONE"][0], AWS_DEFAULT_REGION="us-east-1",
                       AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
            out = subprocess.run([KILN, "interrupt", "--endpoint", plain.endpoint, "spot-any"],
                                 env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 2)
            self.assertIn("UnknownOperationException", out.stderr)
        finally:
            self.assertEqual(plain.stop(), 0)


if __name__ == "__main__":
    KILN = serve_test.KILN = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
