#!/usr/bin/env python3
"""`kiln serve` driven by clients nobody on the project wrote: boto3, the aws CLI,
and raw HTTP for the refusals.

Starts `kiln serve` on a free loopback port (port 0: it prints the one it got)
with two accounts, and stops it with SIGTERM at the end, also when a test fails.

    serve_test.py KILN_BINARY
"""
import datetime
import http.client
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

import boto3
import botocore
import botocore.auth
import botocore.awsrequest
import botocore.credentials
import botocore.exceptions

KILN = None

TRAIN = """#!/bin/sh
echo "rows: $(cat "$SM_CHANNEL_TRAIN"/*.csv | wc -l)"
sleep "${KILN_TEST_SLEEP:-0}"
echo trained > "$SM_MODEL_DIR/model.txt"
"""
SLEEPY = """#!/bin/sh
echo started
exec sleep 300
"""

KEYS = {
    "AKIDONE": ("secret-one", "111122223333"),
    "AKIDTWO": ("secret-two", "444455556666"),
}


class Server:
    """A `kiln serve` on the state directory `state` of `work`, started and
    stopped; `flags` are more of its flags (--tls-cert ...)."""

    def __init__(self, work, flags=(), open_files=None, state="state", grace=2):
        self.work = work
        self.state = state
        self.grace = grace
        self.flags = list(flags)
        self.open_files = open_files  # a soft limit to start it with
        self.proc = None
        self.endpoint = None

    def _limit(self):
        if self.open_files is not None:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, hard))

    def start(self):
        self.stderr = open(os.path.join(self.work, f"{self.state}.stderr"), "ab")
        self.proc = subprocess.Popen(
            [KILN, "serve", "--credentials", os.path.join(self.work, "keys"), "--listen",
             "127.0.0.1:0", "--state-dir", os.path.join(self.work, self.state),
             "--grace", str(self.grace)] + self.flags,
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, preexec_fn=self._limit)
        line = self.proc.stdout.readline()
        if not line.startswith(("listening on http://", "listening on https://")):
            self.proc.kill()
            raise RuntimeError(f"kiln serve did not start: {line!r}; see {self.stderr.name}")
        self.endpoint = line.split()[-1]

    def stop(self):
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            status = self.proc.wait()
        self.proc.stdout.close()
        self.proc = None
        self.stderr.close()
        return status


def client(endpoint, key="AKIDONE", secret=None, service="sagemaker"):
    return boto3.client(
        service, endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id=key, aws_secret_access_key=secret or KEYS[key][0],
        config=botocore.config.Config(retries={"max_attempts": 1}))


def job_request(work, name, image="image", **extra):
    """A CreateTrainingJob request for image `image` of `work`, reading
    work/data/ and writing work/out; `extra` replaces members."""
    r = {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::111122223333:role/test",
        "AlgorithmSpecification": {"TrainingImage": os.path.join(work, image),
                                   "TrainingInputMode": "File"},
        "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": f"file://{work}/data/"}}}],
        "OutputDataConfig": {"S3OutputPath": f"file://{work}/out"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1,
                           "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 120},
    }
    r.update(extra)
    return r


class ServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kiln-serve-")
        os.chmod(cls.work, 0o755)  # run as root, the containers run as nobody
        with open(os.path.join(cls.work, "keys"), "w") as f:
            f.write("# key id, secret, account\n")
            for key, (secret, account) in KEYS.items():
                f.write(f"{key}\t{secret}  {account}\n")
        for name, script in (("image", TRAIN), ("sleepy", SLEEPY)):
            os.makedirs(os.path.join(cls.work, name))
            path = os.path.join(cls.work, name, "train")
            with open(path, "w") as f:
                f.write(script)
            os.chmod(path, 0o755)
        os.makedirs(os.path.join(cls.work, "data"))
        with open(os.path.join(cls.work, "data", "a.csv"), "w") as f:
            f.write("1\n2\n")
        cls.server = Server(cls.work)
        cls.server.start()
        cls.sm = client(cls.server.endpoint)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def request(self, name, image="image", **extra):
        return job_request(self.work, name, image, **extra)

    def wait(self, name, sm=None):
        (sm or self.sm).get_waiter("training_job_completed_or_stopped").wait(
            TrainingJobName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        return (sm or self.sm).describe_training_job(TrainingJobName=name)

    def error(self, call, **kwargs):
        with self.assertRaises(botocore.exceptions.ClientError) as caught:
            call(**kwargs)
        return caught.exception.response

    # --- boto3

    def test_a_job_runs_to_completion_and_is_described_as_the_service_does(self):
        created = self.sm.create_training_job(**self.request("boto-complete"))
        self.assertEqual(created["TrainingJobArn"],
                         "arn:aws:sagemaker:us-east-1:111122223333:training-job/boto-complete")
        d = self.wait("boto-complete")
        self.assertEqual(d["TrainingJobStatus"], "Completed")
        self.assertEqual(d["SecondaryStatus"], "Completed")
        self.assertEqual(d["ModelArtifacts"]["S3ModelArtifacts"],
                         f"file://{self.work}/out/boto-complete/output/model.tar.gz")
        self.assertIsInstance(d["TrainingStartTime"], datetime.datetime)
        self.assertEqual([t["Status"] for t in d["SecondaryStatusTransitions"]][-1], "Completed")

    def test_list_pages_and_filters(self):
        for i in range(3):
            self.sm.create_training_job(**self.request(f"boto-list-{i}"))
        for i in range(3):
            self.wait(f"boto-list-{i}")
        names = []
        token = None
        while True:
            kwargs = {"MaxResults": 2, "NameContains": "boto-list-", "SortBy": "Name",
                      "SortOrder": "Ascending"}
            if token:
                kwargs["NextToken"] = token
            page = self.sm.list_training_jobs(**kwargs)
            self.assertLessEqual(len(page["TrainingJobSummaries"]), 2)
            names += [s["TrainingJobName"] for s in page["TrainingJobSummaries"]]
            token = page.get("NextToken")
            if not token:
                break
        self.assertEqual(names, ["boto-list-0", "boto-list-1", "boto-list-2"])
        completed = self.sm.list_training_jobs(StatusEquals="Completed", NameContains="boto-list-")
        self.assertEqual(len(completed["TrainingJobSummaries"]), 3)
        paginated = [s["TrainingJobName"]
                     for page in self.sm.get_paginator("list_training_jobs").paginate(
                         NameContains="boto-list-", PaginationConfig={"PageSize": 1})
                     for s in page["TrainingJobSummaries"]]
        self.assertEqual(sorted(paginated), names)

    def test_stop_ends_a_running_job_stopped(self):
        self.sm.create_training_job(**self.request("boto-stop", image="sleepy"))
        for _ in range(100):
            if self.sm.describe_training_job(
                    TrainingJobName="boto-stop")["SecondaryStatus"] == "Training":
                break
            time.sleep(0.1)
        self.sm.stop_training_job(TrainingJobName="boto-stop")
        d = self.wait("boto-stop")
        self.assertEqual(d["TrainingJobStatus"], "Stopped")
        # Stopping an ended job is refused as the service refuses it.
        e = self.error(self.sm.stop_training_job, TrainingJobName="boto-stop")
        self.assertEqual(e["Error"]["Code"], "ValidationException")

    def test_update_keep_alive_of_an_available_pool_and_reuse_it(self):
        pooled = self.request("boto-pool-1", ResourceConfig={
            "InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1,
            "KeepAlivePeriodInSeconds": 60})
        self.sm.create_training_job(**pooled)
        d = self.wait("boto-pool-1")
        self.assertEqual(d["WarmPoolStatus"]["Status"], "Available")
        self.sm.update_training_job(TrainingJobName="boto-pool-1",
                                    ResourceConfig={"KeepAlivePeriodInSeconds": 120})
        d = self.sm.describe_training_job(TrainingJobName="boto-pool-1")
        self.assertEqual(d["ResourceConfig"]["KeepAlivePeriodInSeconds"], 120)
        pooled["TrainingJobName"] = "boto-pool-2"
        self.sm.create_training_job(**pooled)
        self.wait("boto-pool-2")
        d = self.sm.describe_training_job(TrainingJobName="boto-pool-1")
        self.assertEqual(d["WarmPoolStatus"]["Status"], "Reused")
        self.assertEqual(d["WarmPoolStatus"]["ReusedByJob"], "boto-pool-2")

    def test_delete_forgets_an_ended_job(self):
        self.sm.create_training_job(**self.request("boto-delete"))
        self.wait("boto-delete")
        self.sm.delete_training_job(TrainingJobName="boto-delete")
        e = self.error(self.sm.describe_training_job, TrainingJobName="boto-delete")
        self.assertEqual(e["Error"]["Code"], "ValidationException")
        self.assertEqual(e["ResponseMetadata"]["HTTPStatusCode"], 400)

    def test_errors_come_with_the_services_codes(self):
        self.sm.create_training_job(**self.request("boto-twice"))
        e = self.error(self.sm.create_training_job, **self.request("boto-twice"))
        self.assertEqual(e["Error"]["Code"], "ResourceInUse")
        e = self.error(self.sm.describe_training_job, TrainingJobName="boto-nope")
        self.assertEqual(e["Error"]["Code"], "ValidationException")
        self.assertIn("boto-nope", e["Error"]["Message"])
        e = self.error(self.sm.stop_training_job, TrainingJobName="boto-nope")
        self.assertEqual(e["Error"]["Code"], "ResourceNotFound")
        e = self.error(self.sm.create_training_job,
                       **self.request("boto-bad", ResourceConfig={
                           "InstanceType": "ml.m5.large", "InstanceCount": 0,
                           "VolumeSizeInGB": 1}))
        self.assertEqual(e["Error"]["Code"], "ValidationException")
        self.assertIn("instanceCount", e["Error"]["Message"])
        self.wait("boto-twice")

    def test_an_account_never_sees_another_accounts_jobs(self):
        other = client(self.server.endpoint, "AKIDTWO")
        self.sm.create_training_job(**self.request("boto-mine"))
        self.assertNotIn("boto-mine", [s["TrainingJobName"] for s in
                                       other.list_training_jobs()["TrainingJobSummaries"]])
        e = self.error(other.describe_training_job, TrainingJobName="boto-mine")
        self.assertEqual(e["Error"]["Code"], "ValidationException")
        e = self.error(other.stop_training_job, TrainingJobName="boto-mine")
        self.assertEqual(e["Error"]["Code"], "ResourceNotFound")
        e = self.error(other.delete_training_job, TrainingJobName="boto-mine")
        self.assertEqual(e["Error"]["Code"], "ResourceNotFound")
        # A name is the account's own.
        theirs = self.request("boto-mine", RoleArn="arn:aws:iam::444455556666:role/test")
        arn = other.create_training_job(**theirs)["TrainingJobArn"]
        self.assertEqual(arn, "arn:aws:sagemaker:us-east-1:444455556666:training-job/boto-mine")
        self.assertEqual(self.wait("boto-mine", other)["TrainingJobStatus"], "Completed")
        self.assertEqual(self.wait("boto-mine")["TrainingJobStatus"], "Completed")

    # --- the aws CLI

    def test_the_aws_cli_creates_and_describes(self):
        if shutil.which("aws") is None:
            self.skipTest("the aws CLI is not installed (cmake/install-deps.sh installs it)")
        path = os.path.join(self.work, "cli-job.json")
        with open(path, "w") as f:
            json.dump(self.request("cli-job"), f)
        env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDONE", AWS_SECRET_ACCESS_KEY="secret-one",
                   AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/dev/null",
                   AWS_SHARED_CREDENTIALS_FILE="/dev/null")
        base = ["aws", "sagemaker", "--endpoint-url", self.server.endpoint, "--output", "json"]
        out = subprocess.run(base + ["create-training-job", "--cli-input-json", f"file://{path}"],
                             env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("training-job/cli-job", json.loads(out.stdout)["TrainingJobArn"])
        out = subprocess.run(base + ["wait", "training-job-completed-or-stopped",
                                     "--training-job-name", "cli-job"],
                             env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        out = subprocess.run(base + ["describe-training-job", "--training-job-name", "cli-job"],
                             env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["TrainingJobStatus"], "Completed")

    # --- kiln's own verbs over the API

    def kiln(self, *args, key="AKIDONE"):
        env = dict(os.environ, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=KEYS[key][0],
                   AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/dev/null",
                   AWS_SHARED_CREDENTIALS_FILE="/dev/null", KILN_ENDPOINT=self.server.endpoint)
        return subprocess.run([KILN] + list(args), env=env, capture_output=True, text=True,
                              timeout=120)

    def test_kilns_verbs_talk_to_the_server(self):
        path = os.path.join(self.work, "verbs.json")
        with open(path, "w") as f:
            json.dump(self.request("verbs-job", ResourceConfig={
                "InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1,
                "KeepAlivePeriodInSeconds": 60}), f)
        out = self.kiln("submit", "--wait", path)
        self.assertEqual(out.returncode, 0, out.stderr)
        arn, described = out.stdout.splitlines()
        self.assertTrue(arn.endswith(":111122223333:training-job/verbs-job"), arn)
        self.assertEqual(json.loads(described)["TrainingJobStatus"], "Completed")
        out = self.kiln("list", "--name-contains", "verbs-")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split("\t")[:3], ["verbs-job", "Completed", "Completed"])
        out = self.kiln("update", "--keep-alive", "90", "verbs-job")
        self.assertEqual(out.returncode, 0, out.stderr)
        out = self.kiln("describe", "verbs-job")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["ResourceConfig"]["KeepAlivePeriodInSeconds"], 90)
        out = self.kiln("stop", "verbs-job")
        self.assertEqual(out.returncode, 2)
        self.assertIn("ValidationException: ", out.stderr)
        out = self.kiln("describe", "verbs-nobody")
        self.assertEqual(out.returncode, 1)
        self.assertIn("ValidationException: ", out.stderr)
        out = self.kiln("describe", "verbs-job", key="AKIDTWO")
        self.assertEqual(out.returncode, 1)
        # Its pool is Available: the service refuses, so does kiln delete.
        out = self.kiln("delete", "verbs-job")
        self.assertEqual(out.returncode, 2)
        self.assertIn("ResourceInUse: ", out.stderr)
        self.assertEqual(self.kiln("update", "--keep-alive", "0", "verbs-job").returncode, 0)
        out = self.kiln("delete", "verbs-job")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(self.kiln("describe", "verbs-job").returncode, 1)

    # --- raw HTTP: what boto3 would never send

    def raw(self, body, headers, key="AKIDONE", secret=None, when=None, tamper=None,
            target="SageMaker.ListTrainingJobs"):
        url = self.server.endpoint + "/"
        request = botocore.awsrequest.AWSRequest(
            method="POST", url=url, data=body,
            headers=dict({"Content-Type": "application/x-amz-json-1.1",
                          "X-Amz-Target": target}, **headers))
        if key is not None:
            creds = botocore.credentials.Credentials(key, secret or KEYS.get(key, ("x",))[0])
            auth = botocore.auth.SigV4Auth(creds, "sagemaker", "us-east-1")
            if when is None:
                auth.add_auth(request)
            else:
                fake = mock.Mock(wraps=datetime.datetime)
                fake.utcnow.return_value = when
                fake.now.return_value = when
                with mock.patch.object(botocore.auth.datetime, "datetime", fake):
                    auth.add_auth(request)
        prepared = request.prepare()
        sent_body = prepared.body if tamper is None else tamper
        host = self.server.endpoint.split("//")[1]
        conn = http.client.HTTPConnection(host, timeout=10)
        conn.request("POST", "/", body=sent_body, headers=dict(prepared.headers))
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, json.loads(data) if data else {}

    def test_refusals_before_the_body_is_looked_at(self):
        status, body = self.raw(b"{}", {}, key=None)
        self.assertEqual((status, body["__type"]), (400, "MissingAuthenticationTokenException"))
        status, body = self.raw(b"{}", {}, tamper=b'{"MaxResults": 1}')
        self.assertEqual((status, body["__type"]), (400, "InvalidSignatureException"))
        status, body = self.raw(b"{}", {}, key="AKIDONE", secret="not-the-secret")
        self.assertEqual((status, body["__type"]), (400, "InvalidSignatureException"))
        status, body = self.raw(b"{}", {}, key="AKIDNOBODY", secret="x")
        self.assertEqual((status, body["__type"]), (400, "UnrecognizedClientException"))
        old = datetime.datetime.utcnow() - datetime.timedelta(minutes=20)
        status, body = self.raw(b"{}", {}, when=old)
        self.assertEqual((status, body["__type"]), (400, "InvalidSignatureException"))
        self.assertIn("Signature expired", body["message"])
        status, body = self.raw(b"{}", {}, target="SageMaker.CreateModel")
        self.assertEqual((status, body["__type"]), (400, "UnknownOperationException"))

    def test_bad_bodies_get_the_messages_kiln_validate_gives(self):
        status, body = self.raw(b'{"MaxResults": "two"}', {})
        self.assertEqual((status, body["__type"]), (400, "ValidationException"))
        self.assertIn("Invalid type for parameter MaxResults", body["message"])
        status, body = self.raw(b'{"Bogus": 1}', {})
        self.assertEqual((status, body["__type"]), (400, "ValidationException"))
        self.assertIn('Unknown parameter in input: "Bogus"', body["message"])
        status, body = self.raw(b'{"MaxResults": ', {})
        self.assertEqual((status, body["__type"]), (400, "ValidationException"))
        self.assertIn("Invalid JSON", body["message"])

    def test_an_oversized_body_is_refused_unread(self):
        host = self.server.endpoint.split("//")[1]
        conn = http.client.HTTPConnection(host, timeout=10)
        conn.putrequest("POST", "/")
        conn.putheader("Content-Type", "application/x-amz-json-1.1")
        conn.putheader("Content-Length", str(100 << 20))
        conn.endheaders()
        conn.send(b"{" * 1024)  # (and never the rest)
        response = conn.getresponse()
        self.assertEqual(response.status, 413)
        self.assertEqual(json.loads(response.read())["__type"], "ValidationException")
        conn.close()

    def test_the_open_files_limit_is_raised_for_many_jobs(self):
        work = tempfile.mkdtemp(prefix="kiln-serve-files-")
        os.chmod(work, 0o755)  # (the containers run as nobody)
        shutil.copy(os.path.join(self.work, "keys"), work)
        server = Server(work, open_files=256)
        try:
            server.start()
            with open(f"/proc/{server.proc.pid}/limits") as f:
                soft = [line.split()[3] for line in f if line.startswith("Max open files")][0]
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            self.assertEqual(int(soft), min(65536, hard))
        finally:
            server.stop()
            shutil.rmtree(work, ignore_errors=True)

    # --- last: a restart keeps the jobs (the journal)

    def test_z_a_restart_keeps_every_job(self):
        self.sm.create_training_job(**self.request("boto-restart"))
        self.wait("boto-restart")
        before = self.sm.describe_training_job(TrainingJobName="boto-restart")
        self.assertEqual(self.server.stop(), 0)
        self.server.start()
        type(self).sm = client(self.server.endpoint)
        after = self.sm.describe_training_job(TrainingJobName="boto-restart")
        before.pop("ResponseMetadata")
        after.pop("ResponseMetadata")
        self.assertEqual(before, after)


if __name__ == "__main__":
    KILN = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
