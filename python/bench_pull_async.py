#!/usr/bin/python3
"""How much of a row pull Client.pull_rows_async hides behind Python work.

Against one ps of the given binary, each round times, per iteration (the
medians of --reps), a pull of --keys rows of 8 floats alone; --work_ms of
Python busy work (holding the GIL) then the same pull; and the pull started
with pull_rows_async before the busy work and its result read after. The
hidden part is (work + pull) - (work || pull); the pull costs the caller's
core some CPU too (starting it, reading its result), so on a busy machine
less is hidden.

    PARAMSERV_LIB=... PYTHONPATH=python /usr/bin/python3 python/bench_pull_async.py --paramserv=./paramserv
"""
import argparse
import statistics
import subprocess
import sys
import time

import numpy as np

import paramserv
from bench_client import free_ports


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paramserv", default="paramserv", help="the paramserv binary")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--keys", type=int, default=800, help="rows per pull (a batch of 100 rows of 8 fields)")
    ap.add_argument("--work_ms", type=float, default=1.0)
    a = ap.parse_args()
    ps_port, w_port = free_ports(2)
    ps, w = f"127.0.0.1:{ps_port}", f"127.0.0.1:{w_port}"
    proc = subprocess.Popen([a.paramserv, "train", "--job_name=ps", "--task_index=0", "--ps_hosts=" + ps, "--worker_hosts=" + w],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work = a.work_ms / 1000
    try:
        tf = {"cluster": {"ps": [ps], "worker": [w]}, "task": {"type": "worker", "index": 0}}
        with paramserv.Client(variables={"b": 1}, tables={"emb": 8}, tf_config=tf, quiet=True) as c:
            c.start(init={"b": np.zeros(1, np.float32)})
            keys = np.arange(a.keys, dtype=np.uint64)
            out = np.empty((a.keys, 8), np.float32)
            hidden = []
            for r in range(a.rounds):
                t = {"pull": [], "work+pull": [], "work||pull": []}
                for _ in range(a.reps):
                    s = time.perf_counter()
                    c.pull_rows("emb", keys, out)
                    t["pull"].append(time.perf_counter() - s)
                    s = time.perf_counter()
                    busy(work)
                    c.pull_rows("emb", keys, out)
                    t["work+pull"].append(time.perf_counter() - s)
                    s = time.perf_counter()
                    fut = c.pull_rows_async("emb", keys, out)
                    busy(work)
                    fut.result()
                    t["work||pull"].append(time.perf_counter() - s)
                m = {k: 1e6 * statistics.median(v) for k, v in t.items()}
                hidden.append((m["work+pull"] - m["work||pull"]) / m["pull"])
                print(f"round {r + 1}: pull {m['pull']:.0f} us, work+pull {m['work+pull']:.0f} us, "
                      f"work||pull {m['work||pull']:.0f} us: {100 * hidden[-1]:.0f}% of the pull hidden", flush=True)
            c.done()
        print(f"hidden: median {100 * statistics.median(hidden):.0f}% of the pull "
              f"(rounds {', '.join(f'{100 * x:.0f}%' for x in hidden)})")
    finally:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
