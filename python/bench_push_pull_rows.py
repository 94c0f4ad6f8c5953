#!/usr/bin/python3
"""A CTR-style worker step in Python, two calls against one, in the same run.

Each step pushes the gradients of a batch's rows (and of a small dense
variable) and reads the next batch's rows: as two calls (``push_pull(...,
rows=...)`` then ``pull_rows``) or as one (``push_pull(..., rows=...,
pull_rows=...)``). Rounds alternate the two against one ps process; it
prints the median wall and CPU microseconds a step (CPU: this process's
threads, the Go library's included).

    PARAMSERV_LIB=... PYTHONPATH=python /usr/bin/python3 python/bench_push_pull_rows.py --paramserv=./paramserv
"""
import argparse
import statistics
import subprocess
import sys
import time

import numpy as np

import paramserv
from bench_client import free_ports


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paramserv", default="paramserv", help="the paramserv binary")
    ap.add_argument("--keys", type=int, default=800, help="keys drawn per batch (distinct ones kept)")
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=100, help="steps per round")
    a = ap.parse_args()
    ps_port, w_port = free_ports(2)
    ps, w = f"127.0.0.1:{ps_port}", f"127.0.0.1:{w_port}"
    proc = subprocess.Popen([a.paramserv, "train", "--job_name=ps", "--task_index=0", "--ps_hosts=" + ps, "--worker_hosts=" + w],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        tf = {"cluster": {"ps": [ps], "worker": [w]}, "task": {"type": "worker", "index": 0}}
        rng = np.random.default_rng(1)
        with paramserv.Client(variables={"b": 10}, tables={"emb": a.dim}, optimizer="sgd", learning_rate=0.01,
                              tf_config=tf, quiet=True) as c:
            c.start(init={"b": np.zeros(10, np.float32)})
            g, p = {"b": np.zeros(10, np.float32)}, {"b": np.zeros(10, np.float32)}
            batches = [np.unique(rng.integers(0, 100 * a.keys, a.keys)).astype(np.uint64) for _ in range(50)]
            res = {"two calls": [], "one call": []}
            for _ in range(a.rounds):
                for mode, v in res.items():
                    walls, c0 = [], time.process_time()
                    for i in range(a.steps):
                        k, nk = batches[i % 50], batches[(i + 1) % 50]
                        grads, out = np.ones((len(k), a.dim), np.float32), np.empty((len(nk), a.dim), np.float32)
                        t = time.perf_counter()
                        if mode == "two calls":
                            c.push_pull(g, p, rows=[("emb", k, grads)])
                            c.pull_rows("emb", nk, out)
                        else:
                            c.push_pull(g, p, rows=[("emb", k, grads)], pull_rows=[("emb", nk, out)])
                        walls.append(time.perf_counter() - t)
                    v.append((1e6 * statistics.median(walls), 1e6 * (time.process_time() - c0) / a.steps))
            for mode, v in res.items():
                print(f"{mode}: median {statistics.median(x[0] for x in v):.0f} us a step "
                      f"(rounds {', '.join(f'{x[0]:.0f}' for x in v)}), {statistics.median(x[1] for x in v):.0f} CPU us")
            c.done()
    finally:
        proc.wait(30)


if __name__ == "__main__":
    sys.exit(main())
