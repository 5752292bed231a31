#!/usr/bin/env python3
"""`kiln serve --tls-cert --tls-key`: HTTPS for boto3, the aws CLI and kiln's own
verbs, with a self-signed certificate made by the `openssl` command.

Starts `kiln serve` on a free loopback port with TLS and stops it with SIGTERM
at the end, also when a test fails. Skipped when there is no `openssl` command
(cmake/install-deps.sh installs it).

    serve_tls_test.py KILN_BINARY
"""
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import boto3
import botocore.config
import botocore.exceptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_test  # noqa: E402  (its Server, its client and the job's files)
from serve_test import KEYS, Server, client  # noqa: E402

KILN = None

AWS_ENV = {"AWS_ACCESS_KEY_ID": "AKIDONE", "AWS_SECRET_ACCESS_KEY": "secret-one",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null",
           "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}


def make_certificate(work):
    """A self-signed certificate for 127.0.0.1 and localhost, and its key."""
    cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60)
    return cert, key


def env_without_ca_bundle(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_CA_BUNDLE", "KILN_ENDPOINT")}
    env.update(AWS_ENV)
    env.update(extra)
    return env


class ServeTlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("openssl") is None:
            raise unittest.SkipTest(
                "no openssl command to make a certificate (cmake/install-deps.sh installs it)")
        cls.work = tempfile.mkdtemp(prefix="kiln-serve-tls-")
        cls.server = None
        try:
            os.chmod(cls.work, 0o755)  # run as root, the containers run as nobody
            with open(os.path.join(cls.work, "keys"), "w") as f:
                for key, (secret, account) in KEYS.items():
                    f.write(f"{key} {secret} {account}\n")
            os.makedirs(os.path.join(cls.work, "image"))
            train = os.path.join(cls.work, "image", "train")
            with open(train, "w") as f:
                f.write(serve_test.TRAIN)
            os.chmod(train, 0o755)
            os.makedirs(os.path.join(cls.work, "data"))
            with open(os.path.join(cls.work, "data", "a.csv"), "w") as f:
                f.write("1\n2\n")
            cls.cert, cls.key = make_certificate(cls.work)
            cls.server = Server(cls.work, ["--tls-cert", cls.cert, "--tls-key", cls.key])
            cls.server.start()
            cls.port = int(cls.server.endpoint.rsplit(":", 1)[1])
            # (verify=FILE: boto3 trusts the certificates of FILE only.)
            cls.sm = boto3.client(
                "sagemaker", endpoint_url=cls.server.endpoint, region_name="us-east-1",
                aws_access_key_id="AKIDONE", aws_secret_access_key=KEYS["AKIDONE"][0],
                verify=cls.cert, config=botocore.config.Config(retries={"max_attempts": 1}))
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def request(self, name):
        return serve_test.job_request(self.work, name)

    def created_job(self):
        """One job made over HTTPS and run to its end (made once)."""
        if not hasattr(type(self), "job"):
            created = self.sm.create_training_job(**self.request("tls-job"))
            self.assertTrue(created["TrainingJobArn"].endswith(
                ":111122223333:training-job/tls-job"))
            self.sm.get_waiter("training_job_completed_or_stopped").wait(
                TrainingJobName="tls-job", WaiterConfig={"Delay": 1, "MaxAttempts": 60})
            type(self).job = "tls-job"
        return type(self).job

    def test_boto3_trusting_the_certificate_creates_and_describes(self):
        self.assertTrue(self.server.endpoint.startswith("https://127.0.0.1:"))
        name = self.created_job()
        d = self.sm.describe_training_job(TrainingJobName=name)
        self.assertEqual(d["TrainingJobStatus"], "Completed")

    def test_the_aws_cli_describes_with_its_ca_bundle(self):
        if shutil.which("aws") is None:
            self.skipTest("the aws CLI is not installed (cmake/install-deps.sh installs it)")
        name = self.created_job()
        out = subprocess.run(
            ["aws", "sagemaker", "--endpoint-url", self.server.endpoint, "--ca-bundle", self.cert,
             "--output", "json", "describe-training-job", "--training-job-name", name],
            env=env_without_ca_bundle(), capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["TrainingJobStatus"], "Completed")

    def test_a_client_that_does_not_trust_the_certificate_is_refused(self):
        with mock.patch.dict(os.environ, {}, clear=False):
            os.environ.pop("AWS_CA_BUNDLE", None)
            untrusting = client(self.server.endpoint)  # the system's authorities
            with self.assertRaises(botocore.exceptions.SSLError):
                untrusting.list_training_jobs()
        # Python's own TLS says why.
        context = ssl.create_default_context()
        with self.assertRaises(ssl.SSLCertVerificationError):
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=10)
            try:
                conn.request("POST", "/", body=b"{}")
            finally:
                conn.close()
        # The server goes on.
        self.assertIn("TrainingJobSummaries", self.sm.list_training_jobs())

    def test_plain_http_to_the_tls_port_fails_and_the_server_goes_on(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        with self.assertRaises((http.client.HTTPException, ConnectionError)):
            conn.request("POST", "/", body=b"{}",
                         headers={"Content-Type": "application/x-amz-json-1.1"})
            conn.getresponse()
        conn.close()
        # A peer that connects and sends nothing, then goes.
        with socket.create_connection(("127.0.0.1", self.port), timeout=10):
            pass
        self.assertIn("TrainingJobSummaries", self.sm.list_training_jobs())

    def kiln(self, *args, **env):
        return subprocess.run([KILN] + list(args), env=env_without_ca_bundle(**env),
                              capture_output=True, text=True, timeout=120)

    def test_kiln_describe_trusts_aws_ca_bundle(self):
        name = self.created_job()
        out = self.kiln("describe", name, "--endpoint", self.server.endpoint,
                        AWS_CA_BUNDLE=self.cert)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["TrainingJobStatus"], "Completed")
        # Without it, the system's authorities do not know the certificate.
        out = self.kiln("describe", name, "--endpoint", self.server.endpoint)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("certificate", out.stderr)
        # A bundle that is not there is named.
        missing = os.path.join(self.work, "no-such-bundle.pem")
        out = self.kiln("describe", name, "--endpoint", self.server.endpoint,
                        AWS_CA_BUNDLE=missing)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("AWS_CA_BUNDLE", out.stderr)
        self.assertIn("no-such-bundle.pem", out.stderr)

    def serve(self, *flags):
        """`kiln serve` with `flags` that should make it refuse to start."""
        out = subprocess.run(
            [KILN, "serve", "--credentials", os.path.join(self.work, "keys"), "--listen",
             "127.0.0.1:0", "--state-dir", os.path.join(self.work, "state-bad")] + list(flags),
            capture_output=True, text=True, timeout=60)
        self.assertNotEqual(out.returncode, 0, out.stdout)
        self.assertNotIn("listening", out.stdout)
        return out.stderr

    def test_bad_tls_flags_are_refused_naming_the_flag_or_file(self):
        self.assertIn("--tls-cert needs --tls-key", self.serve("--tls-cert", self.cert))
        self.assertIn("--tls-key needs --tls-cert", self.serve("--tls-key", self.key))
        missing = os.path.join(self.work, "missing.pem")
        err = self.serve("--tls-cert", missing, "--tls-key", self.key)
        self.assertIn("--tls-cert", err)
        self.assertIn("missing.pem", err)
        err = self.serve("--tls-cert", self.cert, "--tls-key", os.path.join(self.work, "keys"))
        self.assertIn("--tls-key", err)
        self.assertIn("keys", err)
        other = os.path.join(self.work, "other-key.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-out", other],
                       check=True, capture_output=True, timeout=60)
        err = self.serve("--tls-cert", self.cert, "--tls-key", other)
        self.assertIn("other-key.pem", err)
        self.assertIn("is not the key of the certificate", err)


if __name__ == "__main__":
    KILN = os.path.abspath(sys.argv.pop(1))
    serve_test.KILN = KILN
    unittest.main(verbosity=2)
