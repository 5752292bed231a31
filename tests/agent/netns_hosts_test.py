#!/usr/bin/env python3
"""Hosts as network namespaces on a bridge, each running `kiln agent`, and a
`kiln serve --agents` controller outside them: hosts join with one-time
tokens, `kiln hosts` lists them with their addresses, a host whose link goes
down is lost within the silence timeout and comes back when the link does,
an agent SIGKILLed and started again rejoins without a token, and a reused
token and a CA that is not the controller's are refused.

Needs root and network namespaces (ip, nsenter); exits 77 (skipped) with the
reason where they cannot be made. Everything it makes (namespaces, bridge,
links, processes) is removed at the end, also when a check fails.

Usage: netns_hosts_test.py KILN
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

KILN = sys.argv[1]
SKIP = 77
TAG = os.getpid() % 10000
SUBNET = f"10.213.{os.getpid() % 250}"
BRIDGE = f"kb{TAG}"
SILENCE = 2  # --agent-silence-timeout

made_netns = []
made_links = []
procs = []


def sh(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


def make_network(hosts):
    """A bridge at SUBNET.1 and `hosts` namespaces at SUBNET.11, .12, ..."""
    if os.geteuid() != 0:
        skip("network namespaces need root")
    for tool in ("ip", "nsenter"):
        if shutil.which(tool) is None:
            skip(f"{tool} is not installed")
    probe = f"kp{TAG}"
    r = sh("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        skip(f"cannot make a network namespace: {r.stderr.strip()}")
    sh("ip", "netns", "del", probe, check=False)
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    made_links.append(BRIDGE)
    sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for i in range(1, hosts + 1):
        ns, outer, inner = f"kh{TAG}-{i}", f"kv{TAG}o{i}", f"kv{TAG}i{i}"
        sh("ip", "netns", "add", ns)
        made_netns.append(ns)
        sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        made_links.append(outer)
        sh("ip", "link", "set", inner, "netns", ns)
        sh("ip", "link", "set", outer, "master", BRIDGE)
        sh("ip", "link", "set", outer, "up")
        sh("ip", "-n", ns, "addr", "add", f"{SUBNET}.{10 + i}/24", "dev", inner)
        sh("ip", "-n", ns, "link", "set", inner, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def teardown():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for ns in made_netns:
        sh("ip", "netns", "del", ns, check=False)
    for link in made_links:
        sh("ip", "link", "del", link, check=False)


def start(args, log, netns=None):
    prefix = ["nsenter", f"--net=/run/netns/{netns}"] if netns else []
    p = subprocess.Popen(prefix + [KILN] + args, stdout=subprocess.PIPE,
                         stderr=open(log, "ab"), text=True)
    procs.append(p)
    return p


def token(pki):
    return sh(KILN, "token", "create", "--pki", pki).stdout.strip()


def main():
    work = tempfile.mkdtemp(prefix="kiln-netns-")
    os.chmod(work, 0o755)  # the local backend's containers (nobody) reach below it
    try:
        make_network(hosts=4)
        run(work)
    finally:
        teardown()
        shutil.rmtree(work, ignore_errors=True)


def run(work):
    pki = os.path.join(work, "pki")
    keys = os.path.join(work, "keys")
    with open(keys, "w") as f:
        f.write("AKIDNETNS EXAMPLEKEY 111122223333\n")
    env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDNETNS", AWS_SECRET_ACCESS_KEY="EXAMPLEKEY",
               AWS_DEFAULT_REGION="us-east-1")
    env.pop("AWS_PROFILE", None)

    serve = start(["serve", "--credentials", keys, "--listen", "127.0.0.1:0", "--state-dir",
                   os.path.join(work, "state"), "--agents", f"{SUBNET}.1:0", "--pki", pki,
                   "--agent-silence-timeout", str(SILENCE)], os.path.join(work, "serve.log"))
    first = serve.stdout.readline()
    second = serve.stdout.readline()
    assert first.startswith(f"listening for agents at {SUBNET}.1:"), first
    assert second.startswith("listening on http://"), second
    controller = first.split()[-1]
    endpoint = second.split()[-1]

    def hosts():
        r = subprocess.run([KILN, "hosts", "--endpoint", endpoint, "--json"], env=env,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return {h["HostName"]: h for h in json.loads(r.stdout)["Hosts"]}

    def wait_for(name, state, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            h = hosts().get(name)
            if h is not None and h["State"] == state:
                return h
            time.sleep(0.05)
        raise AssertionError(f"{name} never became {state}: {hosts().get(name)}")

    def agent(i, extra, ca=os.path.join(pki, "ca.pem")):
        return start(["agent", "--controller", controller, "--ca", ca, "--state-dir",
                      os.path.join(work, f"agent{i}"), "--host-name", f"host-{i}",
                      "--offers", "ml.m5.large:2"] + extra,
                     os.path.join(work, f"agent{i}.log"), netns=f"kh{TAG}-{i}")

    # Three hosts join, each with its own token.
    tokens = {i: token(pki) for i in (1, 2, 3)}
    agents = {i: agent(i, ["--token", tokens[i]]) for i in (1, 2, 3)}
    for i in (1, 2, 3):
        h = wait_for(f"host-{i}", "Connected")
        assert h["Address"] == f"{SUBNET}.{10 + i}", h
        assert h["Offers"] == [{"InstanceType": "ml.m5.large", "Count": 2}], h
        assert h["Cpus"] > 0 and h["MemoryBytes"] > 0 and h["Sessions"] == 1, h
    table = subprocess.run([KILN, "hosts", "--endpoint", endpoint], env=env,
                           capture_output=True, text=True, check=True).stdout
    assert "host-2" in table and f"{SUBNET}.12" in table and "Connected" in table, table

    # host-1's link goes down: lost after the silence timeout; back with the link.
    down = time.monotonic()
    sh("ip", "link", "set", f"kv{TAG}o1", "down")
    wait_for("host-1", "Lost", timeout=SILENCE + 10)
    detected = time.monotonic() - down
    # (The last heartbeat came up to one interval, 1 s, before the link went down.)
    assert SILENCE - 1.1 <= detected <= SILENCE + 3, detected
    assert hosts()["host-2"]["State"] == "Connected"
    sh("ip", "link", "set", f"kv{TAG}o1", "up")
    h = wait_for("host-1", "Connected", timeout=30)
    assert h["Sessions"] == 2, h
    print(f"lost-host detection after the link went down: {detected:.2f} s "
          f"(silence timeout {SILENCE} s)")

    # host-2's agent is SIGKILLed and started again: no token needed.
    agents[2].send_signal(signal.SIGKILL)
    agents[2].wait()
    agents[2] = agent(2, [])
    wait_for("host-2", "Connected")
    deadline = time.monotonic() + 20
    while hosts()["host-2"]["Sessions"] != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hosts()["host-2"]["Sessions"] == 2, hosts()["host-2"]

    # A reused token is refused, and the host never joins.
    reused = agent(4, ["--token", tokens[1]])
    assert reused.wait(timeout=30) == 1
    log = open(os.path.join(work, "agent4.log")).read()
    assert "already" in log or "used" in log, log
    assert "host-4" not in hosts()

    # An agent that trusts another CA does not accept this controller.
    other = os.path.join(work, "other-pki")
    foreign_token = token(other)
    shutil.rmtree(os.path.join(work, "agent4"), ignore_errors=True)
    foreign = agent(4, ["--token", foreign_token], ca=os.path.join(other, "ca.pem"))
    assert foreign.wait(timeout=30) == 1
    log = open(os.path.join(work, "agent4.log")).read()
    assert "joining the controller at" in log, log
    assert "host-4" not in hosts()

    # A clean stop of the controller: the agents keep dialling.
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=30) == 0
    for i in (1, 2, 3):
        assert agents[i].poll() is None, f"agent {i} exited with the controller"
    for i in (1, 2, 3):
        agents[i].send_signal(signal.SIGTERM)
        assert agents[i].wait(timeout=30) == 0
    print("ok")


if __name__ == "__main__":
    main()
