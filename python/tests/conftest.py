"""Fixtures: a ps cluster of real paramserv processes on loopback ports.

The paramserv binary comes from $PARAMSERV_BIN, else `go build` of the
checkout (once per session, into pytest's temporary folder). The client
library comes from the installed package or $PARAMSERV_LIB.
"""

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _ports_below_ephemeral():
    """[lo, hi): from 10000 up to the start of the kernel's ephemeral range."""
    lo, hi = 10000, 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            hi = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return lo, hi


_handed_out = set()


def free_ports(n):
    """n distinct free ports on 127.0.0.1 for ps processes to listen on.

    As Go's local.FreePorts: from below the kernel's ephemeral range, so that
    nothing binding port 0 or connecting out (a ps's metrics endpoint, a
    client's connection) is given one of them between now and the moment
    its ps binds it, which ports chosen by binding port 0 and closing could
    be. Each is checked by binding it, and none is handed out twice in this
    session. Where there is no such range the kernel chooses."""
    lo, hi = _ports_below_ephemeral()
    candidates = [0] * n
    if hi - lo >= 4 * n + 1000:
        start = random.randrange(hi - lo)
        candidates = (lo + (start + i) % (hi - lo) for i in range(hi - lo))
    socks, ports = [], []
    try:
        for p in candidates:
            if len(ports) == n:
                break
            if p in _handed_out:
                continue
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                s.close()
                continue  # in use
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    if len(ports) < n:
        raise RuntimeError(f"found only {len(ports)} of {n} free ports in {lo}-{hi - 1}")
    _handed_out.update(ports)
    return ports


@pytest.fixture(scope="session")
def paramserv_bin(tmp_path_factory):
    path = os.environ.get("PARAMSERV_BIN")
    if path:
        return path
    if shutil.which("go") is None:
        pytest.skip("no PARAMSERV_BIN and no go on PATH to build the paramserv binary")
    out = str(tmp_path_factory.mktemp("bin") / "paramserv")
    subprocess.run(["go", "build", "-o", out, "./cmd/paramserv"], cwd=REPO, check=True)
    return out


class Cluster:
    """num_ps ps processes for num_workers workers; tf_config(i) is worker i's."""

    def __init__(self, binary, num_ps, num_workers, log_dir, ps_args=()):
        ports = free_ports(num_ps + num_workers)
        self.ps = [f"127.0.0.1:{p}" for p in ports[:num_ps]]
        self.workers = [f"127.0.0.1:{p}" for p in ports[num_ps:]]
        self.procs = []
        for i in range(num_ps):
            log = open(os.path.join(log_dir, f"ps{i}.log"), "wb")
            self.procs.append(subprocess.Popen(
                [binary, "train", "--job_name=ps", f"--task_index={i}",
                 "--ps_hosts=" + ",".join(self.ps), "--worker_hosts=" + ",".join(self.workers), *ps_args],
                stdout=log, stderr=subprocess.STDOUT, env={k: v for k, v in os.environ.items() if k != "TF_CONFIG"}))

    def tf_config(self, index):
        return {"cluster": {"ps": self.ps, "worker": self.workers}, "task": {"type": "worker", "index": index}}

    def wait(self, timeout=30):
        """Waits for every ps to exit (after every worker's done) and returns their codes."""
        deadline = time.time() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(max(0.1, deadline - time.time())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        return codes

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def make_cluster(paramserv_bin, tmp_path):
    made = []

    def make(num_ps=1, num_workers=1, ps_args=()):
        c = Cluster(paramserv_bin, num_ps, num_workers, str(tmp_path), ps_args)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
