#!/usr/bin/python3
"""A small call's cost from Python beside Go's, in CPU as well as time.

Alternating rounds of (a) scripts/bench/callcpu, a worker of the Go public
package, and (b) this package's Client, each against a fresh ps of the same
binary, making --reps push+pulls of one float32 variable (after 200 untimed
ones). Each side measures its own process with getrusage: the median
call's time, the CPU (user + system, all threads, the Go library's
included) and the voluntary context switches a call. Prints each round and
the medians of the ratios Python/Go. On a loaded machine the CPU a call
is the steadier figure: the median time mostly says how long the ps and the
worker waited for a core.

    go build -o /tmp/paramserv ./cmd/paramserv && go build -o /tmp/callcpu ./scripts/bench/callcpu
    PARAMSERV_LIB=... PYTHONPATH=python /usr/bin/python3 python/bench_call_cpu.py \\
        --paramserv=/tmp/paramserv --callcpu=/tmp/callcpu
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

import paramserv
from bench_client import free_ports


def with_ps(binary, run):
    ps_port, w_port = free_ports(2)
    ps, w = f"127.0.0.1:{ps_port}", f"127.0.0.1:{w_port}"
    proc = subprocess.Popen([binary, "train", "--job_name=ps", "--task_index=0", "--ps_hosts=" + ps, "--worker_hosts=" + w],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return run({"cluster": {"ps": [ps], "worker": [w]}, "task": {"type": "worker", "index": 0}})
    finally:
        proc.wait(30)


def go_round(binary, callcpu, reps):
    def run(tf):
        env = dict(os.environ, TF_CONFIG=json.dumps(tf))
        out = subprocess.run([callcpu, f"--reps={reps}"], env=env, check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    return with_ps(binary, run)


def python_round(binary, reps):
    def run(tf):
        with paramserv.Client(variables={"tiny": 1}, optimizer="sgd", learning_rate=1.0, tf_config=tf, quiet=True) as c:
            params, grads = {"tiny": np.zeros(1, np.float32)}, {"tiny": np.ones(1, np.float32)}
            c.start(init={"tiny": np.zeros(1, np.float32)})
            for _ in range(200):
                c.push_pull(grads, params)
            times = []
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            for _ in range(reps):
                t = time.perf_counter()
                c.push_pull(grads, params)
                times.append(time.perf_counter() - t)
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            c.done()
        cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
        return {"median_us": 1e6 * statistics.median(times), "cpu_us": 1e6 * cpu / reps,
                "nvcsw_per_call": (r1.ru_nvcsw - r0.ru_nvcsw) / reps}
    return with_ps(binary, run)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paramserv", default="paramserv", help="the paramserv binary (the ps)")
    ap.add_argument("--callcpu", required=True, help="scripts/bench/callcpu built")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5000)
    a = ap.parse_args()
    ratios = {"median_us": [], "cpu_us": []}
    for r in range(a.rounds):
        load = os.getloadavg()[0]
        g = go_round(a.paramserv, a.callcpu, a.reps)
        p = python_round(a.paramserv, a.reps)
        for k in ratios:
            ratios[k].append(p[k] / g[k])
        print(f"round {r + 1} (load {load:.1f}): Go {g['median_us']:.0f} us, {g['cpu_us']:.0f} CPU us, "
              f"{g['nvcsw_per_call']:.1f} switches a call; Python {p['median_us']:.0f} us, {p['cpu_us']:.0f} CPU us, "
              f"{p['nvcsw_per_call']:.1f} switches", flush=True)
    for k, rs in ratios.items():
        print(f"{k}: Python/Go median {statistics.median(rs):.2f}x (rounds {', '.join(f'{x:.2f}' for x in rs)})")


if __name__ == "__main__":
    sys.exit(main())
