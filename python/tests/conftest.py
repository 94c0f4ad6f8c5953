"""Fixtures: a ps cluster of real paramserv processes on loopback ports.

The paramserv binary comes from $PARAMSERV_BIN, else `go build` of the
checkout (once per session, into pytest's temporary folder). The client
library comes from the installed package or $PARAMSERV_LIB.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
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
