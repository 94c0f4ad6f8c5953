"""`paramserv local --checkpoint_dir=D --summary_dir=S -- CMD`: the program's
Client finds D and S without being told (PARAMSERV_CHECKPOINT_DIR,
PARAMSERV_SUMMARY_DIR), the chief saves checkpoints in D and writes the
losses the program reports as TensorBoard summaries in S (D when S is not
given), and a program that reports no loss shows none (not a loss of 0)."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import paramserv
from paramserv import _client

PROGRAM = textwrap.dedent('''
    import json, math, os, sys, urllib.request
    import numpy as np
    import paramserv

    out, report = sys.argv[1], sys.argv[2] == "report"
    c = paramserv.Client(variables={"w": 8}, optimizer="sgd", learning_rate=0.1, quiet=True)
    c.start(init={"w": np.zeros(8, np.float32)} if c.is_chief else None)
    params, grads = {"w": np.zeros(8, np.float32)}, {"w": np.ones(8, np.float32)}
    c.pull(params)
    for i in range(40):
        if report:
            c.report_loss(100.0 - i, examples=4)
        c.push_pull(grads, params)
    text = urllib.request.urlopen("http://%s/metrics" % c.metrics_addr, timeout=30).read().decode()
    loss = [l for l in text.splitlines() if l.startswith("paramserv_worker_loss ")]
    with open(os.path.join(out, "worker%d.json" % c.worker), "w") as f:
        json.dump({k: os.environ.get(k) for k in ("PARAMSERV_CHECKPOINT_DIR", "PARAMSERV_SUMMARY_DIR",
                   "PARAMSERV_SAVE_SUMMARIES_STEPS")} | {"loss": loss}, f)
    c.done()
    c.close()
''')


def _local(paramserv_bin, tmp_path, flags, mode):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(paramserv.__file__)))
    env = dict(os.environ, PYTHONPATH=pkg, PARAMSERV_LIB=os.path.abspath(_client._library_path()))
    for k in ("TF_CONFIG", "PARAMSERV_METRICS_ADDR", "PARAMSERV_CHECKPOINT_DIR", "PARAMSERV_SUMMARY_DIR"):
        env.pop(k, None)
    out = subprocess.run([paramserv_bin, "local", "--ps=1", "--workers=2", "--save_summaries_steps=10", *flags, "--",
                          sys.executable, str(prog), str(tmp_path), mode],
                         env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    return [json.loads((tmp_path / f"worker{i}.json").read_text()) for i in range(2)], out.stdout + out.stderr


def _events(d):
    files = glob.glob(os.path.join(d, "events.out.tfevents.*"))
    assert len(files) == 1, f"want one event file in {d}, found {files}"
    with open(files[0], "rb") as f:
        return f.read()


def test_checkpoint_and_summary_dirs_reach_the_program(paramserv_bin, tmp_path):
    ckpt = tmp_path / "ckpt"
    workers, log = _local(paramserv_bin, tmp_path, ["--checkpoint_dir=" + str(ckpt)], "report")
    for w in workers:
        assert w["PARAMSERV_CHECKPOINT_DIR"] == str(ckpt), w
        assert w["PARAMSERV_SUMMARY_DIR"] == str(ckpt), w  # --summary_dir defaults to --checkpoint_dir
        assert w["PARAMSERV_SAVE_SUMMARIES_STEPS"] == "10", w
    # The chief saved (at done()) into the directory it was never given.
    assert glob.glob(str(ckpt / "ckpt-*")), f"no checkpoint in {ckpt}: {os.listdir(ckpt)}\n{log}"
    ev = _events(str(ckpt))
    for tag in (b"loss", b"global_step/sec", b"examples/sec", b"learning_rate"):
        assert tag in ev, f"summary {tag!r} not written"


def test_no_loss_when_none_is_reported(paramserv_bin, tmp_path):
    summaries, ckpt = tmp_path / "summaries", tmp_path / "ckpt"
    workers, log = _local(paramserv_bin, tmp_path, ["--summary_dir=" + str(summaries), "--checkpoint_dir=" + str(ckpt)],
                          "silent")
    for w in workers:
        assert w["loss"] == ["paramserv_worker_loss NaN"], w
    assert "loss 0" not in log
    ev = _events(str(summaries))
    assert b"global_step/sec" in ev and b"loss" not in ev
    assert not glob.glob(str(ckpt / "events.out.tfevents.*")), "summaries in the checkpoint dir too"
