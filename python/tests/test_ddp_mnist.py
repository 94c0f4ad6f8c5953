"""scripts/ddp_mnist.py, the PyTorch DDP baseline of issue 18, runs and
prints its JSON (a 20-step smoke run; the figures come from
scripts/bench/ddp_vs_local.sh)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def data_dir():
    d = os.environ.get("PARAMSERV_DATA") or os.path.join(REPO, "..", "shared", "data")
    if not os.path.exists(os.path.join(d, "mnist")):
        if os.environ.get("CI") == "true":
            pytest.fail(f"dataset mnist missing under CI in {d} (set PARAMSERV_DATA)")
        pytest.skip(f"dataset mnist not found in {d}; set PARAMSERV_DATA")
    return d


def test_ddp_mnist_runs_and_prints_json(tmp_path):
    result = tmp_path / "ddp.json"
    p = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "ddp_mnist.py"), "--steps=20",
                        "--data_dir=" + data_dir(), "--result_file=" + str(result)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out == json.loads(result.read_text())
    assert out["workers"] == 2 and out["batches_total"] == 40 and out["threads_per_process"] == 1
    assert out["examples_per_s"] > 0 and out["train_s"] > 0
    assert 0.5 < out["test_accuracy"] <= 1  # 20 steps of Adam 0.01 pass 50%


def test_ddp_mnist_missing_data_exits_2(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "ddp_mnist.py"), "--steps=1",
                        "--data_dir=" + str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "t10k-labels-idx1-ubyte" in p.stderr
