"""paramserv.torch against real ps processes (skipped without torch)."""

import numpy as np
import pytest

import paramserv

torch = pytest.importorskip("torch")
pst = pytest.importorskip("paramserv.torch")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = pst.Embedding("emb", 2, init="zeros")
        self.lin = torch.nn.Linear(2, 1)

    def forward(self, ids):
        return self.lin(self.emb(ids).sum(1))


def test_module_and_embedding_follow_sgd(make_cluster):
    torch.manual_seed(0)
    cl = make_cluster(num_ps=2, num_workers=1)
    net = Net()
    init = {n: p.detach().clone() for n, p in net.named_parameters()}
    m = pst.DistributedModule(net, optimizer="sgd", learning_rate=0.5, sync=True,
                              tf_config=cl.tf_config(0), startup_timeout=60, quiet=True)
    assert m.is_chief and m.global_step == 0
    assert sorted(m.client.variables) == ["lin.bias", "lin.weight"]
    assert m.client.tables == {"emb": 2}
    ids = torch.tensor([[1, 5], [5, 9]])
    out = m(ids)
    for n, p in net.named_parameters():
        assert torch.equal(p.detach(), init[n]), n
    out.sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in net.named_parameters()}
    # d(sum)/d(row k) = lin.weight times the number of times k is looked up.
    w = init["lin.weight"].numpy()[0]
    assert m.step() == 1
    for n, p in net.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), (init[n] - 0.5 * grads[n]).numpy(), rtol=0, atol=0, err_msg=n)
        assert not p.grad.any(), f"{n}: gradient not zeroed after step"
    rows = np.empty((3, 2), np.float32)
    m.client.pull_rows("emb", np.array([1, 5, 9], np.uint64), rows)
    np.testing.assert_allclose(rows, -0.5 * np.array([1, 2, 1], np.float32)[:, None] * w[None, :], rtol=1e-6)
    # Parameters are views of the client's buffers: a pull changes them in place.
    assert net.lin.weight.data_ptr() == m._params["lin.weight"].ctypes.data
    m.done()
    m.close()
    assert cl.wait() == [0, 0]


class TwoFields(torch.nn.Module):
    """Two Embeddings on one table: ids of two fields in one vocabulary."""

    def __init__(self, dim_b=2):
        super().__init__()
        self.a = pst.Embedding("vocab", 2, init="zeros")
        self.b = pst.Embedding("vocab", dim_b, init="zeros")

    def forward(self, ids_a, ids_b):
        return self.a(ids_a).sum() + 2 * self.b(ids_b).sum()


def test_embeddings_sharing_a_table_push_it_once(make_cluster):
    cl = make_cluster(num_ps=2, num_workers=1)
    # Adagrad, asynchronous, so that one update of gradient 3 differs from
    # two of 1 and 2 (a synchronous ps sums a step's gradients per key).
    m = pst.DistributedModule(TwoFields(), optimizer="adagrad", learning_rate=1.0, sync=False,
                              optimizer_options={"initial_accumulator": 0.1},
                              tf_config=cl.tf_config(0), startup_timeout=60, quiet=True)
    assert m.client.tables == {"vocab": 2}
    # Key 5 is looked up by both: its gradient is 1 (from a) + 2 (from b).
    m(torch.tensor([1, 5]), torch.tensor([5, 9])).backward()
    assert m.step() == 1
    rows = np.empty((3, 2), np.float32)
    m.client.pull_rows("vocab", np.array([1, 5, 9], np.uint64), rows)
    g = np.array([1, 3, 2], np.float64)
    np.testing.assert_allclose(rows, np.repeat((-g / np.sqrt(0.1 + g * g))[:, None], 2, 1), rtol=1e-5)
    m.done()
    m.close()
    assert cl.wait() == [0, 0]


def test_embeddings_sharing_a_table_must_agree():
    with pytest.raises(ValueError, match="two Embeddings of table 'vocab' differ: dim 2 .* and dim 3"):
        pst.DistributedModule(TwoFields(dim_b=3), tf_config={})


def test_overlap_pushes_in_the_background(make_cluster):
    cl = make_cluster(num_ps=1, num_workers=1)
    torch.manual_seed(0)
    lin = torch.nn.Linear(2, 1)
    w0, b0 = lin.weight.detach().clone(), lin.bias.detach().clone()
    m = pst.DistributedModule(lin, optimizer="sgd", learning_rate=0.5, overlap=True,
                              tf_config=cl.tf_config(0), startup_timeout=60, quiet=True)
    assert m.overlapping
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    gw, gb = torch.tensor([[4.0, 6.0]]), torch.tensor([2.0])  # of sum(lin(x)), whatever the values
    m(x).sum().backward()
    # The first step's push+pull runs in the background: no call has
    # completed, and the module computes on at the values it had.
    assert m.step() == 0
    assert torch.equal(lin.weight.detach(), w0) and not lin.weight.grad.any()
    m(x).sum().backward()
    # The second waits for the first: the values of one push.
    assert m.step() == 1
    torch.testing.assert_close(lin.weight.detach(), w0 - 0.5 * gw)
    assert m.pull() == 2 and m.global_step == 2
    torch.testing.assert_close(lin.weight.detach(), w0 - gw)
    torch.testing.assert_close(lin.bias.detach(), b0 - gb)
    m.done()
    m.close()
    assert cl.wait() == [0]


def test_overlap_is_ignored_when_sync(make_cluster):
    cl = make_cluster(num_ps=1, num_workers=1)
    lin = torch.nn.Linear(2, 1)
    m = pst.DistributedModule(lin, optimizer="sgd", learning_rate=0.5, sync=True, overlap=True,
                              tf_config=cl.tf_config(0), startup_timeout=60, quiet=True)
    assert not m.overlapping
    m(torch.ones(1, 2)).sum().backward()
    assert m.step() == 1
    m.done()
    m.close()
    assert cl.wait() == [0]


def test_rejects_non_float32_parameters():
    with pytest.raises(ValueError, match="'lin.weight' is torch.float64"):
        pst.DistributedModule(_double(), tf_config={})


def _double():
    m = torch.nn.Module()
    m.lin = torch.nn.Linear(2, 1).double()
    return m


def test_report_loss_reaches_the_metrics(make_cluster):
    import urllib.request
    cl = make_cluster(num_ps=1, num_workers=1)
    m = pst.DistributedModule(torch.nn.Linear(2, 1), optimizer="sgd", learning_rate=0.1,
                              tf_config=cl.tf_config(0), startup_timeout=60, quiet=True, metrics_addr="127.0.0.1:0")
    m(torch.ones(3, 2)).sum().backward()
    m.report_loss(torch.tensor(0.375), 3)
    m.step()
    text = urllib.request.urlopen(f"http://{m.client.metrics_addr}/metrics", timeout=30).read().decode()
    for line in ("paramserv_worker_loss 0.375", "paramserv_worker_examples_total 3", "paramserv_worker_steps_total 1"):
        assert line in text.splitlines(), line
    with pytest.raises(ValueError, match="examples"):
        m.report_loss(1.0, -1)
    m.done()
    m.close()


@pytest.mark.parametrize("kwargs", [
    dict(optimizer="nope", startup_timeout=0.5),  # refused by the Client
    dict(optimizer="sgd", startup_timeout=0.5),  # no ps answers: start() fails
])
def test_failed_module_keeps_its_values(kwargs):
    # The parameters became views of uninitialised buffers before the
    # client was made: a DistributedModule that failed left garbage.
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    before = {n: p.detach().clone() for n, p in lin.named_parameters()}
    one = {"cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}
    with pytest.raises((ValueError, paramserv.ParamservError)):
        pst.DistributedModule(lin, tf_config=one, quiet=True, **kwargs)
    for n, p in lin.named_parameters():
        assert torch.equal(p.detach(), before[n]), n


def test_embedding_ids_of_any_kind(make_cluster):
    # A list of ids was pulled, then failed on ids.shape (AttributeError).
    cl = make_cluster(num_ps=1, num_workers=1)
    net = Net()
    m = pst.DistributedModule(net, optimizer="sgd", learning_rate=0.5, tf_config=cl.tf_config(0),
                              startup_timeout=60, quiet=True)
    for ids, shape in (([[1, 2], [3, 4]], (2, 2, 2)), (np.array([1, 2], np.int32), (2, 2)),
                       (torch.tensor([7], dtype=torch.uint8), (1, 2)), (torch.zeros(0, dtype=torch.int64), (0, 2))):
        assert tuple(net.emb(ids).shape) == shape, ids
    with pytest.raises(ValueError, match="want integers"):
        net.emb(torch.tensor([1.0]))
    # A negative id wrapped to 2**64-1, another row, silently.
    with pytest.raises(ValueError, match="id -1 at flat position 1 is negative"):
        net.emb(torch.tensor([3, -1]))
    m.done()
