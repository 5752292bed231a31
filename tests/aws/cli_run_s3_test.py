#!/usr/bin/env python3
"""`kiln run` with s3:// channels (File, FastFile and Pipe), output and checks, against moto.

Starts moto on a free loopback port, seeds a bucket with the aws CLI (an
independent client), runs one job whose File, FastFile (a FUSE view) and Pipe
channels come from s3:// and whose model goes to s3://, reads the model back with the aws
CLI; then checks the refusals that must come before a job starts: an empty
S3 prefix and missing credentials.

    cli_run_s3_test.py KILN_BINARY
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

TRAIN = """#!/bin/sh
echo "file channel: $(cat "$SM_CHANNEL_TRAIN"/part-*.csv | wc -l) lines"
echo "fastfile channel: $(cat "$SM_CHANNEL_FAST"/part-*.csv | wc -l) lines"
for epoch in 0 1; do
  echo "pipe epoch $epoch: $(cat "$SM_INPUT_DIR/data/stream_$epoch" | wc -l) lines"
done
echo trained > "$SM_MODEL_DIR/model.txt"
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def main():
    kiln = os.path.abspath(sys.argv[1])
    if shutil.which("aws") is None:
        fail("the aws CLI is not installed (cmake/install-deps.sh installs it)")
    work = tempfile.mkdtemp(prefix="kiln-cli-s3-")
    os.chmod(work, 0o755)  # run as root, the containers run as nobody
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        moto = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as e:
        fail(f"cannot start moto: {e}")
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1)
                break
            except OSError:
                if moto.poll() is not None:
                    fail("moto exited at start (is python3-moto installed?)")
                time.sleep(0.05)
        else:
            fail("moto did not come up")
        env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                   AWS_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint, HOME=work)

        def aws(*args):
            subprocess.run(["aws", *args], env=env, check=True, stdout=subprocess.DEVNULL)

        aws("s3", "mb", "s3://data")
        for i, rows in enumerate([3, 4]):
            path = os.path.join(work, f"part-{i}.csv")
            with open(path, "w") as f:
                f.writelines(f"{i},{r}\n" for r in range(rows))
            aws("s3", "cp", path, f"s3://data/train/part-{i}.csv")
        stream = os.path.join(work, "stream.txt")
        with open(stream, "w") as f:
            f.writelines(f"{r}\n" for r in range(1000))
        aws("s3", "cp", stream, "s3://data/stream/records.txt")

        image = os.path.join(work, "image")
        os.makedirs(image)
        with open(os.path.join(image, "train"), "w") as f:
            f.write(TRAIN)
        os.chmod(os.path.join(image, "train"), 0o755)

        def job(name, train_uri):
            s3 = lambda uri: {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": uri}}
            request = {
                "TrainingJobName": name,
                "RoleArn": "arn:aws:iam::000000000000:role/test",
                "AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": "File"},
                "InputDataConfig": [
                    {"ChannelName": "train", "DataSource": s3(train_uri)},
                    {"ChannelName": "fast", "InputMode": "FastFile",
                     "DataSource": s3("s3://data/train/")},
                    {"ChannelName": "stream", "InputMode": "Pipe",
                     "DataSource": s3("s3://data/stream/")},
                ],
                "OutputDataConfig": {"S3OutputPath": "s3://data/out"},
                "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1,
                                   "VolumeSizeInGB": 1},
                "StoppingCondition": {"MaxRuntimeInSeconds": 120},
            }
            path = os.path.join(work, name + ".json")
            with open(path, "w") as f:
                json.dump(request, f)
            return path

        def run(path, run_env):
            return subprocess.run([kiln, "run", "--state-dir", os.path.join(work, "state"), path],
                                  env=run_env, capture_output=True, text=True, timeout=120)

        # A job with both modes from s3:// and its model to s3://.
        r = run(job("s3-job", "s3://data/train/"), env)
        if r.returncode != 0:
            fail(f"kiln run exited {r.returncode}:\n{r.stderr}\n{r.stdout}")
        described = json.loads(r.stdout.splitlines()[0])
        if described["TrainingJobStatus"] != "Completed":
            fail(f"status {described['TrainingJobStatus']}: {described.get('FailureReason')}")
        with open("/proc/self/mountinfo") as f:
            if work + "/" in f.read():
                fail("kiln run left a FastFile mount behind")
        for line in ["file channel: 7 lines", "fastfile channel: 7 lines", "pipe epoch 0: 1000 lines", "pipe epoch 1: 1000 lines"]:
            if line not in r.stderr:
                fail(f"the container did not print '{line}':\n{r.stderr}")
        model_uri = described["ModelArtifacts"]["S3ModelArtifacts"]
        if model_uri != "s3://data/out/s3-job/output/model.tar.gz":
            fail(f"ModelArtifacts {model_uri}")
        model = os.path.join(work, "model.tar.gz")
        aws("s3", "cp", model_uri, model)
        with tarfile.open(model) as t:
            member = t.extractfile("model.txt")
            if member is None or member.read() != b"trained\n":
                fail("model.tar.gz does not hold model.txt = 'trained'")

        # An empty prefix is refused by CreateTrainingJob: the job never starts.
        r = run(job("empty-prefix", "s3://data/nothing/"), env)
        if r.returncode == 0 or 'No S3 objects found under S3 URL "s3://data/nothing/"' not in r.stderr:
            fail(f"empty prefix: exit {r.returncode}, stderr:\n{r.stderr}")
        if "InProgress" in r.stderr:
            fail(f"a job started despite the empty prefix:\n{r.stderr}")

        # Missing credentials are refused before any job starts.
        bare = {k: v for k, v in env.items() if not k.startswith("AWS_ACCESS") and
                not k.startswith("AWS_SECRET")}
        r = run(job("no-credentials", "s3://data/train/"), bare)
        if r.returncode == 0 or "no AWS credentials" not in r.stderr:
            fail(f"missing credentials: exit {r.returncode}, stderr:\n{r.stderr}")
        print("PASS")
    finally:
        moto.terminate()
        try:
            moto.wait(timeout=10)
        except subprocess.TimeoutExpired:
            moto.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
