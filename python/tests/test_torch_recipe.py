"""The recipe kept on paramserv: a torch.optim optimizer and scheduler on the
worker, the process-group calls (rank, barrier, all_reduce, the sampler), a
state saved with each checkpoint, and a module on a device."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pst = pytest.importorskip("paramserv.torch")

from paramserv import Client, ParamservError  # noqa: E402

from conftest import REPO  # noqa: E402
from paramserv import _client  # noqa: E402


def _child_env(**extra):
    """The environment of a child Python program: it imports this same
    paramserv package and client library (the installed wheel under
    scripts/test, the source tree otherwise)."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(pst.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [pkg, os.environ.get("PYTHONPATH")])),
               PARAMSERV_LIB=os.path.abspath(_client._library_path()), **extra)
    env.pop("TF_CONFIG", None)
    return env


def _net():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _batches(n):
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(n)]


def _reference(batches, epochs_of=lambda t: t // 5):
    """The single-process run: Adadelta at 1.0, StepLR(1, 0.7) stepped every
    5 batches."""
    net = _net()
    opt = torch.optim.Adadelta(net.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    for t, (x, y) in enumerate(batches):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        if t % 5 == 4:
            sched.step()
    return net


@pytest.mark.parametrize("sync", [False, True])
def test_worker_optimizer_is_the_single_process_run(make_cluster, sync):
    batches = _batches(20)
    want = _reference(batches)
    cl = make_cluster(num_ps=2, num_workers=1)
    net = _net()
    opt = torch.optim.Adadelta(net.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    m = pst.DistributedModule(net, optimizer=opt, scheduler=sched, sync=sync,
                              tf_config=cl.tf_config(0), startup_timeout=60, quiet=True)
    assert m.optimizer is opt and m.client.sync == sync
    for t, (x, y) in enumerate(batches):
        torch.nn.functional.cross_entropy(m(x), y).backward()
        assert m.step() == t + 1
        if t % 5 == 4:
            sched.step()
    m.pull()
    for (n, p), q in zip(net.named_parameters(), want.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
    assert sched.get_last_lr()[0] == pytest.approx(0.7 ** 4)
    m.done()
    m.close()
    assert cl.wait() == [0, 0]


def test_worker_optimizer_is_checked():
    net = _net()
    other = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="not a parameter of the module"):
        pst.DistributedModule(net, optimizer=torch.optim.SGD(other.parameters(), lr=0.1), tf_config="{}")
    with pytest.raises(ValueError, match="learning_rate given with a torch.optim optimizer"):
        pst.DistributedModule(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), learning_rate=0.1,
                              tf_config="{}")
    with pytest.raises(ValueError, match="want the name of the ps's rule"):
        pst.DistributedModule(net, optimizer=42, tf_config="{}")
    tf = '{"cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}'
    c = Client({n: tuple(p.shape) for n, p in net.named_parameters()}, optimizer="adam", tf_config=tf)
    with pytest.raises(ValueError, match="the ps must run plain SGD at rate 1.0"):
        pst.DistributedModule(net, c, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    c.close()

    class WithEmb(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = pst.Embedding("e", 2)
            self.lin = torch.nn.Linear(2, 1)

    w = WithEmb()
    with pytest.raises(ValueError, match="give its table a rule of its own"):
        pst.DistributedModule(w, optimizer=torch.optim.SGD(w.parameters(), lr=0.1), tf_config="{}")


@pytest.mark.parametrize("worker_optimizer", [False, True])
def test_device_path_equals_the_cpu_path(make_cluster, monkeypatch, worker_optimizer):
    """The copies a GPU module makes (values to the device, gradients back),
    run on the CPU: the same values as the views, bit for bit."""
    results = []
    for copies in (False, True):
        monkeypatch.setattr(pst, "_FORCE_COPIES", copies)
        cl = make_cluster(num_ps=1, num_workers=1)
        net = _net()
        kw = (dict(optimizer=torch.optim.Adadelta(net.parameters(), lr=1.0)) if worker_optimizer
              else dict(optimizer="adam", learning_rate=0.01))
        m = pst.DistributedModule(net, tf_config=cl.tf_config(0), startup_timeout=60, quiet=True, **kw)
        assert m._copies == copies
        for x, y in _batches(6):
            torch.nn.functional.cross_entropy(m(x), y).backward()
            m.step()
        m.pull()
        if copies:
            assert all(p.data_ptr() != m._params[n].ctypes.data for n, p in net.named_parameters())
        results.append([p.detach().clone() for p in net.parameters()])
        m.done()
        m.close()
        assert cl.wait() == [0]
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_gpu_module_equals_the_cpu_one(make_cluster):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False): the GPU path ran on the CPU only "
                    "(test_device_path_equals_the_cpu_path)")
    results = []
    for device in ("cpu", "cuda"):
        cl = make_cluster(num_ps=1, num_workers=1)

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = pst.Embedding("e", 6, init="zeros", optimizer={"name": "adagrad", "learning_rate": 0.1})
                self.body = _net()

            def forward(self, ids, x):
                return self.body(x + self.emb(ids))

        net = Net().to(device)
        m = pst.DistributedModule(net, optimizer=torch.optim.Adadelta(net.parameters(), lr=1.0),
                                  tf_config=cl.tf_config(0), startup_timeout=60, quiet=True)
        assert m.device.type == device
        for i, (x, y) in enumerate(_batches(6)):
            ids = torch.arange(16, device=device) % 5
            torch.nn.functional.cross_entropy(m(ids, x.to(device)), y.to(device)).backward()
            m.step()
        m.pull()
        results.append([p.detach().cpu().clone() for p in net.parameters()])
        m.done()
        m.close()
        assert cl.wait() == [0]
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_rank_barrier_all_reduce(make_cluster):
    n = 3
    cl = make_cluster(num_ps=1, num_workers=n)
    out = [None] * n
    errs = [None] * n

    def worker(i):
        try:
            torch.manual_seed(0)
            m = pst.DistributedModule(torch.nn.Linear(2, 1), optimizer="sgd", learning_rate=0.1,
                                      tf_config=cl.tf_config(i), startup_timeout=60, quiet=True)
            got = [(m.rank, m.world_size, m.is_chief)]
            m.barrier()
            t = torch.tensor([float(i), 1.0], dtype=torch.float32)
            got.append(m.all_reduce(t) is t)
            got.append(t.tolist())
            got.append(m.all_reduce(float(i), op="mean"))
            got.append(m.all_reduce(torch.tensor([-i, i]), op="max").tolist())
            got.append(m.client.all_reduce([1, 2], op="sum").tolist())
            m.done()
            m.close()
            out[i] = got
        except BaseException as e:  # noqa: BLE001 (reported below)
            errs[i] = e

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errs == [None] * n
    for i in range(n):
        assert out[i] == [(i, n, i == 0), True, [3.0, 3.0], 1.0, [0, 2], [3.0, 6.0]]
    assert cl.wait() == [0]


def test_barrier_names_a_missing_worker(make_cluster):
    cl = make_cluster(num_ps=1, num_workers=2)
    m = pst.DistributedModule(torch.nn.Linear(2, 1), optimizer="sgd", learning_rate=0.1,
                              tf_config=cl.tf_config(0), startup_timeout=60, quiet=True)
    with pytest.raises(ParamservError, match=r"for worker\(s\) 1 of 2: worker 1 never heard from"):
        m.barrier(timeout=0.2)
    with pytest.raises(ValueError, match="op 'min'"):
        m.all_reduce(1.0, op="min")
    m.close()


def test_sampler_is_torchs(monkeypatch):
    data = list(range(23))
    for rank in range(3):
        mine = pst.DistributedSampler(data, num_replicas=3, rank=rank, seed=4)
        theirs = torch.utils.data.distributed.DistributedSampler(data, num_replicas=3, rank=rank, seed=4)
        for epoch in (0, 1, 2):
            mine.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(mine) == list(theirs) and len(mine) == len(theirs)
        mine.set_epoch(2, start=3)
        assert list(mine) == list(theirs)[3:] and len(mine) == len(theirs) - 3
    parts = []
    for rank in range(3):
        monkeypatch.setenv("TF_CONFIG", '{"cluster": {"ps": ["a:1"], "worker": ["b:1", "b:2", "b:3"]}, '
                                        f'"task": {{"type": "worker", "index": {rank}}}}}')
        s = pst.DistributedSampler(data, drop_last=True)
        assert (s.num_replicas, s.rank) == (3, rank)
        s.set_epoch(5)
        parts.append(list(s))
    assert len(set(sum(parts, []))) == 21  # disjoint parts
    loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=s)
    assert sum(len(b) for b in loader) == 7
    monkeypatch.delenv("TF_CONFIG")
    with pytest.raises(ValueError, match="run under paramserv local"):
        pst.DistributedSampler(data)


SCRIPT = r'''
import os, sys, torch
import paramserv.torch as pst
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recipe_common import net, batches
out, stop_at = sys.argv[1], int(os.environ.get("STOP_AT", "0"))
model = net()
opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
m = pst.DistributedModule(model, optimizer=opt, scheduler=sched, sync=True, checkpoint_dir=os.environ["CKPT"],
                          save_steps=4, quiet=True)
state = m.resumed or {"t": 0, "rng": torch.get_rng_state()}
torch.set_rng_state(state["rng"])
t = state["t"]
m.state = lambda: {"t": t + 1, "rng": torch.get_rng_state()}   # read inside step(): go on from t + 1
data = batches(20)
with open(out, "a") as f:
    print("start", t, m.global_step, m.resumed_step, flush=True, file=f)
while t < 20:
    x, y = data[t]
    x = x + 0.01 * torch.randn(x.shape)   # the RNG's state matters
    torch.nn.functional.cross_entropy(m(x), y).backward()
    m.step()
    t += 1
    if t % 5 == 0:
        sched.step()
    if t == stop_at:
        with open(out, "a") as f:
            print("stopped", t, flush=True, file=f)
        import time
        time.sleep(600)   # the test interrupts paramserv local here
m.pull()
torch.save([p.detach() for p in model.parameters()], out + ".params")
m.state = lambda: {"t": t, "rng": torch.get_rng_state()}
m.done()
'''

COMMON = r'''
import torch
def net():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
def batches(n):
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(n)]
'''


def test_interrupted_job_resumes_the_recipe(paramserv_bin, tmp_path):
    """Real processes: paramserv local -- python3 script, interrupted (Ctrl-C)
    after step 10, then the same command again: the script resumes from the
    checkpoint of step 8 with its optimizer, scheduler, data position and RNG
    state, and ends where an uninterrupted run ends."""
    (tmp_path / "recipe.py").write_text(SCRIPT)
    (tmp_path / "recipe_common.py").write_text(COMMON)
    env = _child_env(CKPT=str(tmp_path / "ckpt"))

    def run(out, stop_at=0):
        cmd = [paramserv_bin, "local", "--ps=1", "--workers=1", "--checkpoint_dir=" + env["CKPT"], "--",
               sys.executable, str(tmp_path / "recipe.py"), str(out)]
        log = open(str(out) + ".log", "ab")
        p = subprocess.Popen(cmd, env=dict(env, STOP_AT=str(stop_at)), stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        if stop_at:
            while "stopped" not in (out.read_text() if out.exists() else ""):
                if p.poll() is not None:
                    pytest.fail(f"the first run ended ({p.returncode}) before step {stop_at}: "
                                + open(str(out) + ".log").read()[-3000:])
                time.sleep(0.2)
            os.killpg(p.pid, signal.SIGINT)  # Ctrl-C
        try:
            rc = p.wait(300)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            raise
        return rc, open(str(out) + ".log").read()

    out = tmp_path / "run.txt"
    rc, log = run(out, stop_at=10)
    assert rc != 0, log
    rc, log = run(out)
    assert rc == 0, log[-3000:]
    lines = out.read_text().split("\n")
    assert lines[:2] == ["start 0 0 -1", "stopped 10"], lines
    # Resumed from the checkpoint of step 8 (saves every 4 steps).
    assert lines[2] == "start 8 8 8", lines
    got = torch.load(str(out) + ".params")

    # The same run, uninterrupted, in this process.
    sys.path.insert(0, str(tmp_path))
    try:
        import recipe_common
    finally:
        sys.path.pop(0)
    model = recipe_common.net()
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    data = recipe_common.batches(20)  # (the global RNG is as net() left it, as in the script)
    for t in range(20):
        x, y = data[t]
        x = x + 0.01 * torch.randn(x.shape)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if (t + 1) % 5 == 0:
            sched.step()
    for a, b in zip(got, model.parameters()):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


def _write_idx(path, a):
    import gzip
    import struct
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">HBB", 0, 0x08, a.ndim) + struct.pack(">" + "I" * a.ndim, *a.shape) + a.tobytes())


def test_mnist_cnn_example_runs(paramserv_bin, tmp_path):
    """examples/torch/mnist_cnn.py, the upstream CNN example ported, runs as
    two workers of paramserv local (on a small made-up MNIST)."""
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 256), ("t10k", 100)):
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", rng.integers(0, 10, n, dtype=np.uint8))
    env = _child_env()
    p = subprocess.run([paramserv_bin, "local", "--ps=1", "--workers=2", "--", sys.executable,
                        os.path.join(REPO, "examples", "torch", "mnist_cnn.py"), "--data_dir=" + str(tmp_path),
                        "--epochs=2", "--max_batches=2", "--batch-size=16"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:]
    assert p.stdout.count("Test set: Average loss") == 2, p.stdout[-3000:]
    assert "examples/s (this worker)" in p.stdout
