"""paramserv.torch.Embedding.prefetch against real ps processes (skipped
without torch)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pst = pytest.importorskip("paramserv.torch")
from paramserv import Client  # noqa: E402


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)



class Net(torch.nn.Module):
    def __init__(self, dim=3):
        super().__init__()
        self.emb = pst.Embedding("emb", dim, init="normal", init_stddev=0.5, seed=3)
        self.lin = torch.nn.Linear(dim, 1)

    def forward(self, ids):
        return self.lin(self.emb(ids).sum(1)).reshape(-1)


def _module(cl, index=0, **kw):
    torch.manual_seed(0)
    kw.setdefault("optimizer", "sgd")
    kw.setdefault("learning_rate", 0.1)
    # A call that waited for a ps gone at the end fails in 20 s, not 5 min.
    return pst.DistributedModule(Net(), tf_config=cl.tf_config(index), startup_timeout=60, recovery_timeout=20,
                                 quiet=True, **kw)


def test_prefetch_then_forward_equals_forward(make_cluster):
    cl = make_cluster(num_ps=2, num_workers=1)
    m = _module(cl)
    ids = torch.tensor([[1, 5, 9], [5, 2**40, 1]])
    m(ids).sum().backward()
    m.step()  # rows not at their initial values
    m.module.emb.prefetch(ids)
    with_prefetch = m(ids)
    assert (m.module.emb.prefetch_hits, m.module.emb.prefetch_misses) == (1, 0)
    without = m(ids)  # nothing pushed in between
    assert m.module.emb.prefetch_hits == 1
    np.testing.assert_array_equal(_bits(with_prefetch.detach().numpy()), _bits(without.detach().numpy()))
    # The same distinct keys in another order and count: still a hit.
    m.module.emb.prefetch(np.array([9, 1, 5, 2**40, 1, 1], np.uint64))
    again = m(ids)
    assert m.module.emb.prefetch_hits == 2
    np.testing.assert_array_equal(_bits(again.detach().numpy()), _bits(without.detach().numpy()))
    # The prefetched rows train as pulled ones: their gradients are pushed.
    (with_prefetch.sum() + again.sum()).backward()
    assert m.step() == 2
    m.done()
    m.close()
    assert cl.wait() == [0, 0]


def test_prefetch_of_other_ids_falls_back(make_cluster):
    cl = make_cluster(num_ps=1, num_workers=1)
    m = _module(cl)
    emb = m.module.emb
    ids = torch.tensor([[1, 2, 3]])
    want = m(ids).detach().numpy()
    for other in ([[1, 2, 4]], [[1, 2]], [[1, 2, 3, 4]]):
        emb.prefetch(torch.tensor(other))
        got = m(ids).detach().numpy()
        np.testing.assert_array_equal(_bits(got), _bits(want))
    assert (emb.prefetch_hits, emb.prefetch_misses) == (0, 3)
    # A prefetch serves one forward pass only: the next one pulls.
    emb.prefetch(ids)
    m(ids)
    m(ids)
    assert (emb.prefetch_hits, emb.prefetch_misses) == (1, 3)
    with pytest.raises(ValueError, match="ids of dtype float32: want integers"):
        emb.prefetch(np.zeros(3, np.float32))
    m.done()
    m.close()
    assert cl.wait() == [0]


def test_prefetches_queue(make_cluster):
    cl = make_cluster(num_ps=1, num_workers=1)
    m = _module(cl)
    emb = m.module.emb
    a, b = torch.tensor([[1, 2]]), torch.tensor([[3, 4]])
    want_a, want_b = m(a).detach().numpy(), m(b).detach().numpy()
    emb.prefetch(a)
    emb.prefetch(b)
    np.testing.assert_array_equal(_bits(m(a).detach().numpy()), _bits(want_a))
    np.testing.assert_array_equal(_bits(m(b).detach().numpy()), _bits(want_b))
    assert (emb.prefetch_hits, emb.prefetch_misses) == (2, 0)
    # Out of order: a's prefetch is dropped by b's forward pass, which
    # pulls; b's stays for the next one.
    emb.prefetch(a)
    emb.prefetch(b)
    np.testing.assert_array_equal(_bits(m(b).detach().numpy()), _bits(want_b))
    assert (emb.prefetch_hits, emb.prefetch_misses) == (2, 1)
    np.testing.assert_array_equal(_bits(m(b).detach().numpy()), _bits(want_b))
    assert (emb.prefetch_hits, emb.prefetch_misses) == (3, 1) and not emb._prefetched
    m.done()
    m.close()
    assert cl.wait() == [0]


def test_prefetch_outside_a_module_is_refused():
    with pytest.raises(RuntimeError, match="not inside a started DistributedModule"):
        pst.Embedding("emb", 2).prefetch(torch.tensor([1]))


def _rows_now(m, keys):
    rows = np.empty((len(keys), 3), np.float32)
    m.client.pull_rows("emb", np.array(keys, np.uint64), rows)
    return rows


@pytest.mark.parametrize("sync", [True, False])
def test_prefetch_across_a_step(make_cluster, sync):
    # Batch t looks up key 5, and so does batch t+1, prefetched after batch
    # t's forward pass. Sync: the prefetch waits for the step and t+1 sees
    # key 5 after step t, exactly as without a prefetch. Async: the rows
    # are read before step t's push (calls run after the pulls started
    # before them), one push short.
    cl = make_cluster(num_ps=1, num_workers=1)
    m = _module(cl, sync=sync)
    emb = m.module.emb
    before = _rows_now(m, [5, 6])
    out = m(torch.tensor([[5, 7]]))
    emb.prefetch(torch.tensor([[5, 6]]))
    if sync:
        assert emb._prefetched[0].future is None  # held until the step completes
    out.sum().backward()
    assert m.step() == 1
    after = _rows_now(m, [5, 6])
    assert not np.array_equal(after[0], before[0]) and np.array_equal(after[1], before[1])
    rows = m.module.emb(torch.tensor([[5, 6]]))[0].detach().numpy()
    assert emb.prefetch_hits == 1
    np.testing.assert_array_equal(_bits(rows), _bits(after if sync else before))
    m.done()
    m.close()
    assert cl.wait() == [0]


def test_sync_prefetch_made_between_steps_starts_at_once(make_cluster):
    cl = make_cluster(num_ps=1, num_workers=1)
    m = _module(cl, sync=True)
    emb = m.module.emb
    m(torch.tensor([[5, 7]])).sum().backward()
    m.step()
    emb.prefetch(torch.tensor([[5, 6]]))  # no step under way: nothing to wait for
    assert emb._prefetched[0].future is not None
    emb._prefetched[0].future.result(timeout=60)
    np.testing.assert_array_equal(_bits(m.module.emb(torch.tensor([[6, 5]]))[0].detach().numpy()),
                                  _bits(_rows_now(m, [6, 5])))
    assert emb.prefetch_hits == 1
    m.done()
    m.close()
    assert cl.wait() == [0]


def _train(make_cluster, prefetch, overlap=False, steps=150, sync=False, out=None, with_step=False):
    """A linear model over an embedding: the label is the sum of the batch
    row's per-key targets plus noise (variance 0.09, the loss it can reach).
    Returns the mean loss of the last 30 steps and of the first 10; out,
    if given, receives every step's."""
    cl = make_cluster(num_ps=1, num_workers=1)
    m = _module(cl, optimizer="adagrad", learning_rate=0.3, overlap=overlap, sync=sync)
    pulls, riders = [], []
    if prefetch:
        real = m.client.pull_rows_async

        def counted(*args):
            pulls.append(args[1])
            return real(*args)
        m.client.pull_rows_async = counted
        for name in ("push_pull", "push_pull_async"):
            def riding(*args, _real=getattr(m.client, name), **kw):
                riders.extend(kw.get("pull_rows") or ())
                return _real(*args, **kw)
            setattr(m.client, name, riding)
    rng = np.random.default_rng(1)
    target = rng.normal(size=50).astype(np.float32)
    batches = [rng.integers(0, 50, size=(16, 4)) for _ in range(steps + 1)]
    labels = [target[b].sum(1) + rng.normal(scale=0.3, size=16).astype(np.float32) for b in batches]
    losses = []
    if prefetch:
        m.module.emb.prefetch(batches[0])
    for t in range(steps):
        if prefetch:  # the next batch's rows, during this one's computation or with its step
            m.module.emb.prefetch(batches[t + 1], with_step=with_step)
        ids = torch.from_numpy(batches[t])
        loss = torch.nn.functional.mse_loss(m(ids), torch.from_numpy(labels[t]))
        loss.backward()
        m.step()
        losses.append(loss.item())
    if prefetch:
        assert (m.module.emb.prefetch_hits, m.module.emb.prefetch_misses) == (steps, 0)
        # Each prefetch pulled once: on its own, or (held until the step
        # in sync mode, or with_step) with the step's push+pull.
        assert len(pulls) + len(riders) == steps + 1, (len(pulls), len(riders))
        if sync or with_step:
            assert len(riders) == steps, len(riders)
    m.done()
    m.close()
    assert cl.wait() == [0]
    if out is not None:
        out.extend(losses)
    return float(np.mean(losses[-30:])), float(np.mean(losses[:10]))


@pytest.mark.parametrize("overlap", [False, True])
def test_training_with_prefetch_converges_as_without(make_cluster, overlap):
    base, start = _train(make_cluster, prefetch=False, overlap=overlap)
    got, _ = _train(make_cluster, prefetch=True, overlap=overlap)
    assert base < start / 10, (base, start)
    assert abs(got - base) <= 0.2 * base, (got, base)


def test_sync_step_pulls_a_prefetch_made_before_it_again(make_cluster):
    # Synchronous, 2 workers: the chief prefetches (no step under way, so
    # the pull runs at once), then takes part in a step whose other push,
    # worker 1's, changes key 5: the prefetch is pulled again after it.
    cl = make_cluster(num_ps=1, num_workers=2)
    m = _module(cl, 0, sync=True)
    emb = m.module.emb
    other = Client(variables={"lin.weight": (1, 3), "lin.bias": 1}, tables={"emb": 3},
                   tf_config=cl.tf_config(1), startup_timeout=60, quiet=True)
    try:
        other.start()
        params = {"lin.weight": np.empty((1, 3), np.float32), "lin.bias": np.empty(1, np.float32)}
        zeros = {n: np.zeros_like(a) for n, a in params.items()}
        other.pull(params)
        emb.prefetch(torch.tensor([[5, 6]]))
        emb._prefetched[0].future.result(timeout=60)
        before = _rows_now(m, [5, 6])
        fut = other.push_pull_async(zeros, params, rows=[("emb", np.array([5], np.uint64), np.ones((1, 3), np.float32))])
        assert m.step() == 1
        assert fut.result(timeout=60) == 1
        after = _rows_now(m, [5, 6])
        assert not np.array_equal(after[0], before[0])
        rows = emb(torch.tensor([[5, 6]]))[0].detach().numpy()
        assert emb.prefetch_hits == 1
        np.testing.assert_array_equal(_bits(rows), _bits(after))
        other.done()
        m.done()
    finally:
        other.close()
        m.close()
    assert cl.wait() == [0]


def test_prefetch_with_overlap_is_read_after_the_push_in_flight(make_cluster):
    # overlap=True: step() leaves its push+pull in flight; a prefetch made
    # then is read after it (and before the next step's), every time.
    cl = make_cluster(num_ps=1, num_workers=1)
    m = _module(cl, overlap=True)
    emb = m.module.emb
    rng = np.random.default_rng(0)
    batches = [torch.from_numpy(rng.integers(0, 20, size=(4, 3))) for _ in range(51)]
    emb.prefetch(batches[0])
    for t in range(50):
        emb.prefetch(batches[t + 1])
        in_flight = m._future
        emb._prefetched[-1].future.result(timeout=60)
        assert in_flight is None or in_flight.done(), f"step {t}: the prefetch was read before the push in flight"
        m(batches[t]).sum().backward()
        m.step()
    assert (emb.prefetch_hits, emb.prefetch_misses) == (50, 0)
    m.done()
    m.close()
    assert cl.wait() == [0]


def test_sync_training_with_prefetch_is_exact(make_cluster):
    base, got = [], []
    _train(make_cluster, prefetch=False, sync=True, steps=60, out=base)
    _train(make_cluster, prefetch=True, sync=True, steps=60, out=got)
    assert got == base


@pytest.mark.parametrize("overlap", [False, True])
def test_prefetch_with_step_converges_as_without(make_cluster, overlap):
    base, start = _train(make_cluster, prefetch=False, overlap=overlap)
    got, _ = _train(make_cluster, prefetch=True, overlap=overlap, with_step=True)
    assert base < start / 10, (base, start)
    assert abs(got - base) <= 0.2 * base, (got, base)


def test_prefetch_with_step_reads_after_the_push(make_cluster):
    # Asynchronous: a prefetch with_step rides on the step's push+pull, so
    # the rows it reads hold that step's gradients (a background prefetch
    # made before the step would read them one push short).
    cl = make_cluster(num_ps=1, num_workers=1)
    m = _module(cl)
    emb = m.module.emb
    ids = torch.tensor([[5, 6]])
    m(ids).sum().backward()
    emb.prefetch(ids, with_step=True)
    assert emb._prefetched[0].future is None  # not pulled before the step
    m.step()
    rows = emb(ids)[0].detach().numpy()
    assert (emb.prefetch_hits, emb.prefetch_misses) == (1, 0)
    np.testing.assert_array_equal(_bits(rows), _bits(_rows_now(m, [5, 6])))
    m.done()
    m.close()
    assert cl.wait() == [0]


def test_sync_training_with_prefetch_with_step_is_exact(make_cluster):
    base, got = [], []
    _train(make_cluster, prefetch=False, sync=True, steps=60, out=base)
    _train(make_cluster, prefetch=True, sync=True, steps=60, out=got, with_step=True)
    assert got == base


def test_prefetches_of_the_same_ids_share_their_distinct_keys():
    # A wide and a deep table prefetched with the same array: the second
    # prefetch takes the first's distinct keys, unless the values changed.
    ids = np.array([[5, 3], [5, 9]], np.int64)
    k1, i1 = pst._unique(ids, pst._flat_ids(ids, copy=True))
    k2, i2 = pst._unique(ids, pst._flat_ids(ids, copy=True))
    assert k2 is k1 and i2 is i1
    np.testing.assert_array_equal(k1[i1], [5, 3, 5, 9])
    ids[0, 0] = 7  # the same array, another value
    k3, i3 = pst._unique(ids, pst._flat_ids(ids, copy=True))
    np.testing.assert_array_equal(k3, [3, 5, 7, 9])
    np.testing.assert_array_equal(k3[i3], [7, 3, 5, 9])
    k4, _ = pst._unique(ids.copy(), pst._flat_ids(ids, copy=True))
    assert k4 is not k3
    # A forward pass reads int64 ids in place: no copy.
    t = torch.tensor([[1, 2], [3, 4]])
    assert np.shares_memory(pst._flat_ids(t, copy=False), t.numpy())
    assert not np.shares_memory(pst._flat_ids(t, copy=True), t.numpy())
    with pytest.raises(ValueError, match="negative"):
        pst._flat_ids(torch.tensor([1, -2]), copy=False)


class _Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = pst.Embedding("a", 1, init="normal", init_stddev=0.5, seed=1)
        self.b = pst.Embedding("b", 2, init="normal", init_stddev=0.5, seed=2)
        self.lin = torch.nn.Linear(2, 1)

    def forward(self, ids):
        return self.a(ids), self.b(ids)


def test_two_tables_prefetched_with_the_same_ids(make_cluster):
    cl = make_cluster(num_ps=1, num_workers=1)
    m = pst.DistributedModule(_Two(), tf_config=cl.tf_config(0), optimizer="sgd", learning_rate=0.1,
                              startup_timeout=60, quiet=True)
    try:
        ids = np.array([[4, 9], [4, 2]], np.int64)
        for with_step in (False, True):
            m.module.a.prefetch(ids, with_step=with_step)
            m.module.b.prefetch(ids, with_step=with_step)
            if with_step:
                m.step()
            a, b = m(torch.from_numpy(ids))
            for table, got, dim in (("a", a, 1), ("b", b, 2)):
                want = np.empty((3, dim), np.float32)
                m.client.pull_rows(table, np.array([2, 4, 9], np.uint64), want)
                np.testing.assert_array_equal(got.detach().numpy(), want[[[1, 2], [1, 0]]])
            (a.sum() + b.sum()).backward()
        assert m.module.a.prefetch_hits == 2 and m.module.b.prefetch_hits == 2
        m.step()
        m.done()
    finally:
        m.close()
    assert cl.wait() == [0]
