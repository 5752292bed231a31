#!/usr/bin/env python3
"""S3 download throughput, Kiln against the aws CLI, on one moto server.

Starts moto on a free loopback port, seeds a set of objects (default 256 MiB
in 8 objects) and one large object with the aws CLI, then times, best of
--runs each:

  File mode:  `aws s3 cp --recursive s3://bench/set/ DIR`   vs
              `s3_download_bench file s3://bench/set/ DIR` (ObjectStore::GetToFile,
              4 objects at once, parallel ranged GETs per object)
  Pipe mode:  `aws s3 cp s3://bench/one/big - > /dev/null`   vs
              `s3_download_bench pipe s3://bench/one/ DIR` (ObjectStore::Read
              streamed into a FIFO drained by a reader)

and prints MiB/s and the ratio Kiln / aws CLI. Downloads are checked byte
for byte against the seeded files. Then FastFile start: the local data
channel's Deliver-to-ready time for a FastFile channel over s3:// (a FUSE view:
needs root and /dev/fuse), for a 1 MiB set (one object) and the --mib set,
and the time of the first 4 KiB read through the view; median of --runs.
Target: start time does not grow with the set's size.

  python3 bench/s3_download_bench.py --build-dir build [--runs 3] [--mib 256] [--fastfile-only]
"""
import argparse
import filecmp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(cmd, env, **kw):
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, **kw)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--objects", type=int, default=8)
    ap.add_argument("--fastfile-only", action="store_true",
                    help="only the FastFile start figures (no File/Pipe comparison)")
    args = ap.parse_args()
    kiln = os.path.join(args.build_dir, "bench", "s3_download_bench")
    if not os.access(kiln, os.X_OK):
        sys.exit(f"{kiln} not built (cmake --build {args.build_dir} --target s3_download_bench)")

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp(prefix="kiln-s3-bench-")
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                   AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint,
                   AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
        aws = ["aws", "--endpoint-url", endpoint]
        subprocess.run(aws + ["s3", "mb", "s3://bench"], env=env, check=True, stdout=subprocess.DEVNULL)
        seed = os.path.join(tmp, "seed")
        os.makedirs(os.path.join(seed, "set"))
        os.makedirs(os.path.join(seed, "one"))
        size = args.mib * 2**20 // args.objects
        for i in range(args.objects):
            with open(os.path.join(seed, "set", f"part-{i:03d}"), "wb") as f:
                f.write(os.urandom(size))
        with open(os.path.join(seed, "one", "big"), "wb") as f:
            f.write(os.urandom(args.mib * 2**20))
        os.makedirs(os.path.join(seed, "small"))
        with open(os.path.join(seed, "small", "part-000"), "wb") as f:
            f.write(os.urandom(2**20))
        subprocess.run(aws + ["s3", "cp", "--quiet", "--recursive", seed, "s3://bench/"], env=env, check=True)
        total = args.mib * 2**20

        def fresh(name):
            d = os.path.join(tmp, name)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            return d

        def same(dir_a, dir_b):
            names = sorted(os.listdir(dir_a))
            match, mismatch, errors = filecmp.cmpfiles(dir_a, dir_b, names, shallow=False)
            return not mismatch and not errors and sorted(os.listdir(dir_b)) == names

        cli_file, kiln_file, cli_pipe, kiln_pipe = [], [], [], []
        for _ in range(0 if args.fastfile_only else args.runs):
            d = fresh("cli")
            cli_file.append(timed(aws + ["s3", "cp", "--quiet", "--recursive", "s3://bench/set/", d], env))
            assert same(os.path.join(seed, "set"), d), "aws CLI download differs"
            d = fresh("kiln")
            start = time.perf_counter()
            subprocess.run([kiln, "file", "s3://bench/set/", d], env=env, check=True, stdout=subprocess.DEVNULL)
            kiln_file.append(time.perf_counter() - start)
            assert same(os.path.join(seed, "set"), d), "Kiln download differs"
            shutil.rmtree(d)
            with open(os.devnull, "wb") as null:
                cli_pipe.append(timed(aws + ["s3", "cp", "s3://bench/one/big", "-"], env, stdout=null))
            d = fresh("pipe")
            start = time.perf_counter()
            subprocess.run([kiln, "pipe", "s3://bench/one/", d], env=env, check=True, stdout=subprocess.DEVNULL)
            kiln_pipe.append(time.perf_counter() - start)

        mib = total / 2**20
        if not args.fastfile_only:
            print(f"moto {endpoint}, {args.mib} MiB: File set of {args.objects} objects, Pipe one "
                  f"object; best of {args.runs} (wall time, process start included)")
            print(f"{'mode':<6}{'aws CLI MiB/s':>15}{'Kiln MiB/s':>12}{'Kiln/CLI':>10}")
            for mode, cli, k in (("File", cli_file, kiln_file), ("Pipe", cli_pipe, kiln_pipe)):
                c, kk = mib / min(cli), mib / min(k)
                print(f"{mode:<6}{c:>15.1f}{kk:>12.1f}{kk / c:>9.2f}x")

        ff = {"small": [], "set": []}
        for _ in range(args.runs):
            for name in ff:
                out = subprocess.run([kiln, "fastfile", f"s3://bench/{name}/", fresh("ff-state")],
                                     env=env, check=True, capture_output=True, text=True).stdout
                _, nbytes, deliver, first = out.split()
                ff[name].append((float(deliver), float(first), int(nbytes)))
        med = lambda xs: sorted(xs)[len(xs) // 2]
        print(f"FastFile start over s3:// (median of {args.runs}): Deliver until ready / first 4 KiB read")
        for name, runs in ff.items():
            print(f"  {runs[0][2] / 2**20:7.1f} MiB set: {med([r[0] for r in runs]) * 1e3:8.2f} ms"
                  f" / {med([r[1] for r in runs]) * 1e3:8.2f} ms")
        ratio = med([r[0] for r in ff["set"]]) / med([r[0] for r in ff["small"]])
        print(f"  start time ratio large/small: {ratio:.2f}x (target: no growth with size)")
    finally:
        moto.terminate()
        moto.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
