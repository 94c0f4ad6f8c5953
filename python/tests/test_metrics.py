"""A Python worker's Prometheus metrics under `paramserv local -- CMD`."""

import json
import os
import subprocess
import sys
import textwrap

import paramserv
from paramserv import _client

# The program every worker runs: a few steps reporting their loss, then it
# reads its own /metrics (at the address local gave it) into a file.
PROGRAM = textwrap.dedent('''
    import json, os, sys, urllib.request
    import numpy as np
    import paramserv

    c = paramserv.Client(variables={"w": 8}, tables={"emb": 2}, optimizer="sgd", learning_rate=0.1, quiet=True)
    c.start(init={"w": np.zeros(8, np.float32)} if c.is_chief else None)
    params, grads = {"w": np.zeros(8, np.float32)}, {"w": np.ones(8, np.float32)}
    keys, rows = np.array([1, 2, 3], np.uint64), np.ones((3, 2), np.float32)
    c.pull(params)
    for i in range(10):
        c.report_loss(10 - i, examples=4)
        c.push_pull(grads, params, rows=[("emb", keys, rows)])
    c.report_loss(0.25, examples=4)
    text = urllib.request.urlopen("http://%s/metrics" % c.metrics_addr, timeout=30).read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("paramserv_worker_"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    with open(os.path.join(sys.argv[1], "worker%d.json" % c.worker), "w") as f:
        json.dump({"addr": c.metrics_addr, "env": os.environ.get("PARAMSERV_METRICS_ADDR"), "values": values}, f)
    c.done()
    c.close()
''')


def test_python_worker_serves_metrics_under_local(paramserv_bin, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(paramserv.__file__)))
    env = dict(os.environ, PYTHONPATH=pkg, PARAMSERV_LIB=os.path.abspath(_client._library_path()))
    env.pop("TF_CONFIG", None)
    env.pop("PARAMSERV_METRICS_ADDR", None)
    out = subprocess.run([paramserv_bin, "local", "--ps=1", "--workers=2", "--", sys.executable, str(prog), str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    addrs = set()
    for i in range(2):
        got = json.loads((tmp_path / f"worker{i}.json").read_text())
        assert got["addr"] == got["env"] and got["addr"].startswith("127.0.0.1:"), got
        addrs.add(got["addr"])
        v = got["values"]
        want = {
            'paramserv_worker_calls_total{call="pull"}': 1,
            'paramserv_worker_calls_total{call="push_pull"}': 10,
            'paramserv_worker_call_seconds_count{call="push_pull"}': 10,
            'paramserv_worker_push_bytes_total{kind="dense"}': 10 * 8 * 4,
            'paramserv_worker_push_bytes_total{kind="sparse"}': 10 * (3 * 8 + 6 * 4),
            'paramserv_worker_pull_bytes_total{kind="dense"}': 11 * 8 * 4,
            "paramserv_worker_steps_total": 10,
            "paramserv_worker_loss": 0.25,
            "paramserv_worker_examples_total": 44,
        }
        for name, value in want.items():
            assert v.get(name) == value, f"worker {i}: {name} = {v.get(name)}, want {value}"
        assert 10 <= v["paramserv_worker_global_step"] <= 20, v
    assert len(addrs) == 2, f"the two workers share a metrics address: {addrs}"
