#!/usr/bin/python3
"""The Python client's speed beside the Go client's, in the same run.

Alternating rounds of (a) `paramserv bench` (the Go client) and (b) this
package's Client against a ps of the same binary, for a dense push+pull of
16 MiB, of a tiny variable (one float32: the per-call overhead) and a
sparse 100k-key round (push of the rows' gradients and pull of the rows);
prints each round's medians and the ratios Python/Go.

    PARAMSERV_LIB=... PYTHONPATH=python /usr/bin/python3 python/bench_client.py --paramserv=./paramserv

Both sides' sparse case is one push+pull round trip with no dense part: the
Go bench's request pushes the rows' gradients and pulls the rows; the
Python side's is ``push_pull({}, {}, rows=..., pull_rows=...)`` on a Client
that declares the table and no variable, as the Go bench's does. Each
round's ps is a fresh process; the medians are over --reps calls after 3
warm-up calls.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

import paramserv


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def go_round(binary, reps):
    res = {}
    for cases, extra in (("dense,sparse", [f"--reps={reps}"]), ("tiny", [f"--reps={reps * 10}", "--warmup=50"])):
        out = subprocess.run([binary, "bench", "--ps=1", "--workers=1", "--cases=" + cases, "--dense_bytes=16M",
                              "--sparse_keys=100k", "--dim=1", "--op=pushpull", *extra, "--baseline=false", "--json"],
                             check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            d = json.loads(line)
            res[d["case"]] = d["median_ms"]
    return res


def python_round(binary, reps):
    ps_port, w_port = free_ports(2)
    ps, w = f"127.0.0.1:{ps_port}", f"127.0.0.1:{w_port}"
    proc = subprocess.Popen([binary, "train", "--job_name=ps", "--task_index=0", "--ps_hosts=" + ps, "--worker_hosts=" + w],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        n = 4 << 20  # 16 MiB of float32
        keys = np.random.default_rng(1).choice(1 << 40, 100_000, replace=False).astype(np.uint64)
        tf = {"cluster": {"ps": [ps], "worker": [w]}, "task": {"type": "worker", "index": 0}}
        with paramserv.Client(variables={"dense": n}, tables={"rows": 1}, optimizer="sgd", learning_rate=1.0,
                              tf_config=tf, quiet=True) as c:
            params = {"dense": np.zeros(n, np.float32)}
            grads = {"dense": np.ones(n, np.float32)}
            c.start(init={"dense": np.zeros(n, np.float32)})
            c.pull(params)
            dense = []
            for i in range(reps + 3):
                t = time.perf_counter()
                c.push_pull(grads, params)
                if i >= 3:
                    dense.append(time.perf_counter() - t)
            c.done()
        proc.wait(30)
        tiny = one_variable_round(binary, reps * 10)
        # sparse: a job of its own with the table alone (the Go bench's
        # sparse case has no dense variable): the rows' gradients pushed
        # and the rows pulled in one request.
        ps_port, w_port = free_ports(2)
        ps, w = f"127.0.0.1:{ps_port}", f"127.0.0.1:{w_port}"
        proc = subprocess.Popen([binary, "train", "--job_name=ps", "--task_index=0", "--ps_hosts=" + ps, "--worker_hosts=" + w],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tf = {"cluster": {"ps": [ps], "worker": [w]}, "task": {"type": "worker", "index": 0}}
        with paramserv.Client(variables={}, tables={"rows": 1}, optimizer="sgd", learning_rate=1.0,
                              tf_config=tf, quiet=True) as c:
            c.start(init={})
            rows = np.empty((len(keys), 1), np.float32)
            g = np.ones((len(keys), 1), np.float32)
            sparse = []
            for i in range(reps + 3):
                t = time.perf_counter()
                c.push_pull({}, {}, rows=[("rows", keys, g)], pull_rows=[("rows", keys, rows)])
                if i >= 3:
                    sparse.append(time.perf_counter() - t)
            c.done()
        return {"dense": 1000 * statistics.median(dense), "tiny": tiny, "sparse": 1000 * statistics.median(sparse)}
    finally:
        proc.wait(30)


def one_variable_round(binary, reps):
    """The tiny case: median ms of a push+pull of one float32 (after 50
    untimed ones), against a fresh ps."""
    ps_port, w_port = free_ports(2)
    ps, w = f"127.0.0.1:{ps_port}", f"127.0.0.1:{w_port}"
    proc = subprocess.Popen([binary, "train", "--job_name=ps", "--task_index=0", "--ps_hosts=" + ps, "--worker_hosts=" + w],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        tf = {"cluster": {"ps": [ps], "worker": [w]}, "task": {"type": "worker", "index": 0}}
        with paramserv.Client(variables={"tiny": 1}, optimizer="sgd", learning_rate=1.0, tf_config=tf, quiet=True) as c:
            params, grads = {"tiny": np.zeros(1, np.float32)}, {"tiny": np.ones(1, np.float32)}
            c.start(init={"tiny": np.zeros(1, np.float32)})
            times = []
            for i in range(reps + 50):
                t = time.perf_counter()
                c.push_pull(grads, params)
                if i >= 50:
                    times.append(time.perf_counter() - t)
            c.done()
        return 1000 * statistics.median(times)
    finally:
        proc.wait(30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paramserv", default="paramserv", help="the paramserv binary")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    ratios = {"dense": [], "tiny": [], "sparse": []}
    for r in range(a.rounds):
        g = go_round(a.paramserv, a.reps)
        p = python_round(a.paramserv, a.reps)
        for case in ratios:
            ratios[case].append(p[case] / g[case])
        print(f"round {r + 1}: dense 16 MiB push+pull Go {g['dense']:.2f} ms, Python {p['dense']:.2f} ms; "
              f"tiny Go {1000 * g['tiny']:.0f} us, Python {1000 * p['tiny']:.0f} us; "
              f"sparse 100k Go {g['sparse']:.3f} ms, Python {p['sparse']:.3f} ms", flush=True)
    for case, rs in ratios.items():
        print(f"{case}: Python/Go median {statistics.median(rs):.2f}x (rounds {', '.join(f'{x:.2f}' for x in rs)})")


if __name__ == "__main__":
    sys.exit(main())
