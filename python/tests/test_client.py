"""Unit tests of the Client's checks, and exchanges against real ps processes."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import paramserv
from paramserv import Client, ParamservError

ONE = {"cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]},
       "task": {"type": "worker", "index": 1}}


def test_cluster_from_argument_and_environment(monkeypatch):
    c = Client(variables={"w": (2, 3)}, tf_config=ONE, quiet=True)
    assert (c.worker, c.num_workers, c.num_ps, c.is_chief) == (1, 2, 1, False)
    assert c.variables == {"w": (2, 3)}
    c.close()
    c.close()  # twice is fine
    monkeypatch.setenv("TF_CONFIG", json.dumps(dict(ONE, task={"type": "worker", "index": 0})))
    with Client(variables={"w": 4}, quiet=True) as c:
        assert c.is_chief and c.variables == {"w": (4,)}


def test_no_cluster(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ParamservError, match="TF_CONFIG"):
        Client(variables={"w": 1})


def test_bad_cluster():
    with pytest.raises(ParamservError, match="TF_CONFIG"):
        Client(variables={"w": 1}, tf_config="{not json")
    with pytest.raises(ParamservError, match="want a worker task"):
        Client(variables={"w": 1}, tf_config=dict(ONE, task={"type": "ps", "index": 0}))


@pytest.mark.parametrize("kwargs, match", [
    (dict(variables=[("w", 3)]), "want a dict"),
    (dict(variables={"": 3}), "non-empty string"),
    (dict(variables={"w": (3, -1)}), "negative"),
    (dict(variables={"w": "abc"}), "tuple of ints"),
    (dict(variables={"w": 3}, tables={"t": 0}), "dim 0"),
    (dict(variables={"w": 3}, learning_rate=-1), "learning_rate"),
    (dict(variables={"w": 3}, replicas_to_aggregate=0), "replicas_to_aggregate"),
    (dict(variables={"w": 3}, tf_config=42), "tf_config"),
    # Found by trying the API as a user would: each was accepted, and
    # failed later (at start, with the ps's text) or never.
    (dict(variables={"w": (3, 0)}, tables={"t": 1}), r"shape \(3, 0\): want every dimension >= 1"),
    (dict(variables={"w": (2.7,)}), "tuple of ints"),  # was truncated to (2,)
    (dict(variables={"w": True}), "tuple of ints"),
    (dict(variables={"w": 3}, tables=[("t", 2)]), "tables: got list, want a dict"),  # was AttributeError
    (dict(variables={"w": 3}, learning_rate=True), "learning_rate"),
    (dict(variables={"w": 3}, optimizer="Adam"), "optimizer 'Adam': want one of sgd, momentum"),
    (dict(variables={"w": 3}, optimizer_options={"momentm": 0.9}), r"optimizer_options \['momentm'\]: unknown"),
    (dict(variables={"w": 3}, tables={"t": 2}, table_options={"u": {}}), r"table_options\['u'\]: no such table"),
    (dict(variables={"w": 3}, tables={"t": 2}, table_options={"t": {"inti": "normal"}}), r"\['inti'\]: unknown"),
    (dict(variables={"w": 3}, max_staleness=-1), "max_staleness -1: want an int >= 0"),
    (dict(variables={"w": 3}, startup_timeout=None), "startup_timeout None"),  # was TypeError
    (dict(variables={"w": 3}, sync=True, replicas_to_aggregate=3), "more than the cluster's 2 workers"),  # was at start()
])
def test_bad_declaration(kwargs, match):
    kwargs.setdefault("tf_config", ONE)
    with pytest.raises(ValueError, match=match):
        Client(**kwargs)


def test_numpy_scalars_are_numbers():
    # np.float32 is no Python float: it was refused ("learning_rate 0.1: want a finite number > 0").
    with Client(variables={"w": np.int64(3)}, tables={"t": np.int32(2)}, learning_rate=np.float32(0.1),
                tf_config=ONE, quiet=True, startup_timeout=np.float64(5)) as c:
        assert c.variables == {"w": (3,)} and c.tables == {"t": 2}


def test_library_that_cannot_load(tmp_path):
    # A file that is no shared library: a ParamservError naming PARAMSERV_LIB, not ctypes' OSError.
    bad = tmp_path / "libparamserv.so"
    bad.write_text("not a library")
    code = ("import paramserv\n"
            "try:\n"
            "    paramserv.Client(variables={'w': 1}, tf_config=%r)\n"
            "except paramserv.ParamservError as e:\n"
            "    print('ParamservError:', e)\n") % json.dumps(ONE)
    env = dict(os.environ, PARAMSERV_LIB=str(bad), PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "ParamservError:" in out.stdout and "PARAMSERV_LIB" in out.stdout and str(bad) in out.stdout, (out.stdout, out.stderr)


@pytest.fixture
def client():
    c = Client(variables={"w": (2, 3), "b": 3}, tables={"emb": 4}, tf_config=ONE, quiet=True)
    yield c
    c.close()


def good():
    return {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}


@pytest.mark.parametrize("change, match", [
    (lambda p: p.update(w=np.zeros((2, 3), np.float64)), r"params\['w'\]: dtype float64, want float32"),
    (lambda p: p.update(b=np.zeros(4, np.float32)), r"params\['b'\]: shape \(4,\), want \(3,\)"),
    (lambda p: p.update(w=np.zeros((3, 2), np.float32).T), r"params\['w'\]: not C-contiguous"),
    (lambda p: p.update(w=[[0.0] * 3] * 2), r"params\['w'\]: got list"),
    (lambda p: p.pop("b"), r"missing \['b'\]"),
    (lambda p: p.update(x=np.zeros(1, np.float32)), r"unknown variables \['x'\]"),
])
def test_bad_arrays(client, change, match):
    p = good()
    change(p)
    with pytest.raises(ValueError, match=match):
        client.pull(p)
    with pytest.raises(ValueError, match=match.replace("params", "grads")):
        client.push_pull(p, good())


def test_read_only_destination(client):
    p = good()
    p["b"].flags.writeable = False
    with pytest.raises(ValueError, match=r"params\['b'\]: read-only"):
        client.pull(p)


def test_arrays_checked_every_call(client):
    # The buffers' addresses are remembered between calls; their checks
    # are not: an array made read-only or reshaped after a call is refused.
    p = good()
    with pytest.raises(ParamservError, match="not started"):
        client.pull(p)  # the arrays pass and are remembered
    p["w"].shape = (3, 2)
    with pytest.raises(ValueError, match=r"params\['w'\]: shape \(3, 2\), want \(2, 3\)"):
        client.pull(p)
    p["w"].shape = (2, 3)
    p["b"].flags.writeable = False
    with pytest.raises(ValueError, match=r"params\['b'\]: read-only"):
        client.pull(p)
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        client.pull({"w": p["w"], "x": p["b"]})


def test_bad_rows(client):
    keys = np.array([1, 2], np.uint64)
    with pytest.raises(ValueError, match="unknown table 'nope'"):
        client.pull_rows("nope", keys, np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="uint64"):
        client.pull_rows("emb", keys.astype(np.int64), np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"shape \(2, 3\), want \(2, 4\)"):
        client.push_rows("emb", keys, np.zeros((2, 3), np.float32))


def test_chief_must_give_init():
    c = Client(variables={"w": 3}, tf_config=dict(ONE, task={"type": "worker", "index": 0}), quiet=True)
    with pytest.raises(ValueError, match="chief"):
        c.start()
    with pytest.raises(ValueError, match=r"init\['w'\]: dtype float64"):
        c.start(init={"w": np.zeros(3)})
    with pytest.raises(ParamservError, match="not started"):
        c.pull({"w": np.zeros(3, np.float32)})
    c.close()


def test_start_times_out_naming_the_ps(make_cluster):
    # No ps listens at these addresses.
    cfg = {"cluster": {"ps": ["127.0.0.1:9"], "worker": ["127.0.0.1:10"]}, "task": {"type": "worker", "index": 0}}
    with Client(variables={"w": 1}, tf_config=cfg, startup_timeout=1, quiet=True) as c:
        with pytest.raises(ParamservError, match="127.0.0.1:9"):
            c.start(init={"w": np.zeros(1, np.float32)})


def test_sync_one_worker_sgd_exact(make_cluster):
    cl = make_cluster(num_ps=2, num_workers=1)
    with Client(variables={"w": (2, 3), "b": 3}, optimizer="sgd", learning_rate=0.5, sync=True,
                tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        init = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -1, 0.25], np.float32)}
        assert c.start(init=init) == 0
        assert c.sync
        params = good()
        assert c.pull(params) == 0
        for n in init:
            np.testing.assert_array_equal(params[n], init[n])
        grads = {"w": np.full((2, 3), 0.5, np.float32), "b": np.array([2, 4, 8], np.float32)}
        want = {n: v.copy() for n, v in init.items()}
        for step in (1, 2):
            assert c.push_pull(grads, params) == step
            assert c.step == step
            for n in want:
                want[n] -= np.float32(0.5) * grads[n]
                np.testing.assert_array_equal(params[n], want[n], err_msg=f"{n} after step {step}")
        c.done()
    assert cl.wait() == [0, 0]


@pytest.mark.parametrize("sync", [False, True])
def test_push_without_pull(make_cluster, sync):
    # push() applies grads (and rows) as a step and reads nothing back; in
    # sync mode it returns once the step has completed, so pull() reads it.
    cl = make_cluster(num_ps=2, num_workers=1)
    with Client(variables={"w": (2, 3), "b": 3}, tables={"emb": 2}, optimizer="sgd", learning_rate=1.0,
                sync=sync, tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        init = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
        c.start(init=init)
        grads = {"w": np.full((2, 3), 0.5, np.float32), "b": np.array([2, 4, 8], np.float32)}
        keys = np.array([5, 2**63], np.uint64)
        assert c.push(grads) == 1
        assert c.push(grads, rows=[("emb", keys, np.array([[1, 2], [3, 4]], np.float32))]) == 2
        params = good()
        assert c.pull(params) == 2
        np.testing.assert_array_equal(params["w"], -1)
        np.testing.assert_array_equal(params["b"], [-4, -8, -16])
        out = np.empty((2, 2), np.float32)
        c.pull_rows("emb", keys, out)
        np.testing.assert_array_equal(out, [[-1, -2], [-3, -4]])
        with pytest.raises(ValueError, match="missing"):
            c.push({"w": grads["w"]})
        bad = {"w": grads["w"], "b": np.array([1, np.nan, 0], np.float32)}
        with pytest.raises(ParamservError, match="NaN"):
            c.push(bad)
        assert c.pull(params) == 2
        np.testing.assert_array_equal(params["b"], [-4, -8, -16])
        c.done()
    assert cl.wait() == [0, 0]


def test_push_pull_async_overlaps_and_gives_the_same_values(make_cluster):
    # A push_pull started in the background lands as push_pull does; the
    # caller runs meanwhile (here: it starts the next call before waiting),
    # and calls of one Client run in order.
    cl = make_cluster(num_ps=1, num_workers=1)
    with Client(variables={"w": 4}, optimizer="sgd", learning_rate=0.5, sync=True,
                tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        c.start(init={"w": np.zeros(4, np.float32)})
        a, b = {"w": np.zeros(4, np.float32)}, {"w": np.zeros(4, np.float32)}
        grads = {"w": np.ones(4, np.float32)}
        first = c.push_pull_async(grads, a)
        second = c.push_pull_async(grads, b)
        assert first.result(timeout=60) == 1
        np.testing.assert_array_equal(a["w"], np.full(4, -0.5, np.float32))
        assert second.result(timeout=60) == 2
        np.testing.assert_array_equal(b["w"], np.full(4, -1.0, np.float32))
        bad = c.push_pull_async({"w": np.ones(3, np.float32)}, a)
        with pytest.raises(ValueError, match="w"):
            bad.result(timeout=60)
        c.done()
    assert cl.wait() == [0]


def test_push_pull_async_sent_lands_whoever_waits(make_cluster):
    # Asynchronous training: push_pull_async sends the request on the
    # calling thread and the answers are read by whoever waits first: the
    # future's result(), a later call (which runs after it) or a poll of
    # done(). Each way gives the values push_pull gives.
    cl = make_cluster(num_ps=2, num_workers=1)
    with Client(variables={"w": 4, "v": 2}, tables={"e": 2}, optimizer="sgd", learning_rate=0.5,
                tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        c.start(init={"w": np.zeros(4, np.float32), "v": np.zeros(2, np.float32)})
        assert not c.sync
        params = {"w": np.zeros(4, np.float32), "v": np.zeros(2, np.float32)}
        grads = {"w": np.ones(4, np.float32), "v": np.ones(2, np.float32)}
        keys = np.array([3, 7, 11], np.uint64)
        row_grads = np.ones((3, 2), np.float32)
        rows = np.zeros((3, 2), np.float32)

        def start():
            return c.push_pull_async(grads, params, rows=[("e", keys, row_grads)], pull_rows=[("e", keys, rows)])

        first = start()
        out = np.zeros((3, 2), np.float32)
        c.pull_rows("e", keys, out)  # runs after first: reads its answers first
        assert first.done() and first.result() == 1
        np.testing.assert_array_equal(params["w"], np.full(4, -0.5, np.float32))
        np.testing.assert_array_equal(out, rows)
        base = rows[0, 0] + 0.5  # the initial value of the rows (normal init)
        second = start()
        for _ in range(100000):  # polled: it lands by itself
            if second.done():
                break
            time.sleep(0.001)
        assert second.result() == 2
        np.testing.assert_array_equal(params["v"], np.full(2, -1.0, np.float32))
        np.testing.assert_allclose(rows[0, 0], base - 1.0, rtol=1e-6)
        assert start().result(timeout=60) == 3
        assert start().exception(timeout=60) is None
        fourth = start()
        c.done()  # lands fourth first
        assert fourth.result() == 5
        np.testing.assert_array_equal(params["w"], np.full(4, -2.5, np.float32))
    assert cl.wait() == [0, 0]


def test_async_two_workers_each_push_applied(make_cluster):
    cl = make_cluster(num_ps=1, num_workers=2)
    kw = dict(variables={"w": 4}, optimizer="sgd", learning_rate=0.25, startup_timeout=60, quiet=True)
    chief = Client(tf_config=cl.tf_config(0), **kw)
    other = Client(tf_config=cl.tf_config(1), **kw)
    try:
        chief.start(init={"w": np.ones(4, np.float32)})
        other.start()
        assert not other.sync
        p0, p1 = {"w": np.empty(4, np.float32)}, {"w": np.empty(4, np.float32)}
        chief.pull(p0)
        other.pull(p1)
        g0, g1 = {"w": np.array([1, 2, 3, 4], np.float32)}, {"w": np.array([4, 4, 4, 4], np.float32)}
        assert chief.push_pull(g0, p0) == 1
        np.testing.assert_array_equal(p0["w"], 1 - 0.25 * g0["w"])
        assert other.push_pull(g1, p1) == 2
        np.testing.assert_array_equal(p1["w"], 1 - 0.25 * g0["w"] - 0.25 * g1["w"])
        chief.done()
        other.done()
    finally:
        chief.close()
        other.close()
    assert cl.wait() == [0]


def test_sparse_rows_round_trip(make_cluster):
    cl = make_cluster(num_ps=2, num_workers=1)
    with Client(variables={"b": 1}, tables={"emb": 3}, optimizer="sgd", learning_rate=1.0,
                tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        c.start(init={"b": np.zeros(1, np.float32)})
        keys = np.array([7, 1 << 40, 3, 2**64 - 1, 12345678901], np.uint64)
        out = np.full((len(keys), 3), 9, np.float32)
        c.pull_rows("emb", keys, out)
        np.testing.assert_array_equal(out, 0)  # a zeros table's new rows
        grads = np.arange(len(keys) * 3, dtype=np.float32).reshape(-1, 3)
        c.push_rows("emb", keys, grads)
        c.pull_rows("emb", keys[::-1].copy(), out)
        np.testing.assert_array_equal(out, -grads[::-1])
        c.pull_rows("emb", np.array([], np.uint64), np.empty((0, 3), np.float32))
        c.done()


def test_push_pull_arguments_change_between_calls(make_cluster):
    # push_pull hands the library a struct kept from call to call: each
    # call's buffers and rows are its own, not those of the call before.
    cl = make_cluster(num_ps=1, num_workers=1)
    with Client(variables={"b": 2}, tables={"emb": 2}, optimizer="sgd", learning_rate=1.0,
                tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        c.start(init={"b": np.zeros(2, np.float32)})
        keys = np.array([3, 9], np.uint64)
        ones, params = {"b": np.ones(2, np.float32)}, {"b": np.empty(2, np.float32)}
        out = np.empty((2, 2), np.float32)
        assert c.push_pull(ones, params, rows=[("emb", keys, np.ones((2, 2), np.float32))],
                           pull_rows=[("emb", keys, out)]) == 1
        np.testing.assert_array_equal(out, -1)
        np.testing.assert_array_equal(params["b"], -1)
        out[:] = 9
        assert c.push_pull(ones, params) == 2  # no rows: none pushed, out not written
        np.testing.assert_array_equal(out, 9)
        np.testing.assert_array_equal(params["b"], -2)
        params2 = {"b": np.empty(2, np.float32)}
        assert c.push_pull(ones, params2, pull_rows=[("emb", keys[:1].copy(), out[:1])]) == 3
        np.testing.assert_array_equal(out, [[-1, -1], [9, 9]])
        np.testing.assert_array_equal(params2["b"], -3)
        np.testing.assert_array_equal(params["b"], -2)  # the buffer of the call before, left alone
        twos = {"b": np.full(2, 2, np.float32)}
        assert c.push_pull(twos, params2) == 4
        np.testing.assert_array_equal(params2["b"], -5)
        ones["b"][:] = 3  # the same array, new values
        assert c.push_pull(ones, params2) == 5
        np.testing.assert_array_equal(params2["b"], -8)
        got = np.empty((2, 2), np.float32)
        c.pull_rows("emb", keys, got)
        np.testing.assert_array_equal(got, -1)  # pushed once
        # A started client, in a forked child: a step's calls are refused
        # at once too (they check a flag set at the fork).
        assert "forked" in _in_child(lambda: c.push_pull(ones, params2))
        assert "forked" in _in_child(lambda: c.pull(params2))
        c.done()
    assert cl.wait() == [0]


def test_push_pull_from_two_threads(make_cluster):
    # The struct push_pull hands the library is the client's: two threads
    # with buffers of their own each get their own values and rows.
    import threading
    cl = make_cluster(num_ps=1, num_workers=1)
    with Client(variables={"b": 3}, tables={"emb": 1}, optimizer="sgd", learning_rate=1.0,
                tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        c.start(init={"b": np.zeros(3, np.float32)})
        steps, errors = [], []

        def run(key):
            try:
                ones, params = {"b": np.ones(3, np.float32)}, {"b": np.empty(3, np.float32)}
                keys, out = np.array([key], np.uint64), np.empty((1, 1), np.float32)
                for i in range(200):
                    step = c.push_pull(ones, params, rows=[("emb", keys, np.ones((1, 1), np.float32))],
                                       pull_rows=[("emb", keys, out)])
                    steps.append(step)
                    assert params["b"][0] == -step, (params["b"], step)
                    assert out[0, 0] == -(i + 1), (key, i, out)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=run, args=(k,)) for k in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert sorted(steps) == list(range(1, 401))
        c.done()
    assert cl.wait() == [0]


@pytest.mark.parametrize("sync", [False, True])
def test_push_pull_with_pull_rows(make_cluster, sync):
    # pull_rows= reads rows in the push+pull's request, after its push: the
    # values a pull_rows call after it reads. In sync mode with two
    # workers, the chief's rows hold worker 1's push of the same step.
    workers = 2 if sync else 1
    cl = make_cluster(num_ps=2, num_workers=workers)
    kw = dict(variables={"b": 2}, tables={"emb": 3, "bias": 1}, optimizer="sgd", learning_rate=1.0,
              sync=sync, startup_timeout=60, quiet=True)
    chief = Client(tf_config=cl.tf_config(0), **kw)
    other = Client(tf_config=cl.tf_config(1), **kw) if sync else None
    try:
        chief.start(init={"b": np.ones(2, np.float32)})
        if other:
            other.start()
        keys = np.array([7, 1 << 40, 2**64 - 1], np.uint64)
        grads = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
        params = {"b": np.empty(2, np.float32)}
        emb, bias = np.full((3, 3), 9, np.float32), np.full((2, 1), 9, np.float32)
        bias_keys = np.array([4, 5], np.uint64)
        dense = {"b": np.ones(2, np.float32)}
        fut = None
        if other:
            # Worker 1 pushes bias row 5 in the step (its call waits for the chief's push).
            fut = other.push_pull_async({"b": np.zeros(2, np.float32)}, {"b": np.empty(2, np.float32)},
                                        rows=[("bias", bias_keys[1:].copy(), np.full((1, 1), 2, np.float32))])
        step = chief.push_pull(dense, params, rows=[("emb", keys[:2].copy(), grads[:2].copy())],
                               pull_rows=[("emb", keys, emb), ("bias", bias_keys, bias)])
        assert step == 1
        if fut:
            assert fut.result(timeout=60) == 1
        want_emb, want_bias = np.empty_like(emb), np.empty_like(bias)
        chief.pull_rows("emb", keys, want_emb)
        chief.pull_rows("bias", bias_keys, want_bias)
        np.testing.assert_array_equal(emb, want_emb)
        np.testing.assert_array_equal(bias, want_bias)
        np.testing.assert_array_equal(emb[2], 0)  # not pushed: a new zeros row
        assert (emb[:2] < 0).all()
        if sync:
            assert bias[1, 0] < 0, bias  # worker 1's push of the step
        else:
            np.testing.assert_array_equal(emb[:2], -grads[:2])
        # The async variant fills the rows when its future is done.
        emb2 = np.empty_like(emb)
        fut = chief.push_pull_async(dense, params, pull_rows=[("emb", keys, emb2)])
        if other:
            other.push_pull({"b": np.zeros(2, np.float32)}, {"b": np.empty(2, np.float32)})
        assert fut.result(timeout=60) == 2
        np.testing.assert_array_equal(emb2, want_emb)  # no rows pushed since
        # Bad arguments: clear errors, nothing sent.
        for pull, match in [
                ([("nope", keys, emb)], "unknown table 'nope'"),
                ([("emb", keys.astype(np.int64), emb)], "uint64"),
                ([("emb", keys, np.empty((3, 2), np.float32))], r"shape \(3, 2\), want \(3, 3\)"),
                ([("emb", keys, emb.astype(np.float64))], "float32"),
                ([("emb", keys)], r"pull_rows\[0\]: want a \(table, keys, out\) tuple"),
                ([("emb", keys, emb), ("emb", keys, emb)], "table 'emb' twice"),
        ]:
            with pytest.raises(ValueError, match=match):
                chief.push_pull(dense, params, pull_rows=pull)
            with pytest.raises(ValueError, match=match):
                chief.push_pull_async(dense, params, pull_rows=pull).result(timeout=60)
        ro = np.empty_like(emb)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            chief.push_pull(dense, params, pull_rows=[("emb", keys, ro)])
        assert chief.step == 2
        chief.done()
        if other:
            other.done()
    finally:
        chief.close()
        if other:
            other.close()
    assert cl.wait() == [0, 0]


def test_version():
    assert paramserv.__version__


def test_forked_child_is_refused(client):
    import os
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: must not enter the Go runtime
        msg = b"no error"
        try:
            client.pull(good())
        except ParamservError as e:
            msg = str(e).encode()
        except BaseException as e:  # noqa: BLE001
            msg = repr(e).encode()
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    got = os.read(r, 1000).decode()
    os.waitpid(pid, 0)
    assert "forked" in got, got


def _in_child(fn):
    """Runs fn in a forked child; returns what it raised (or "no error"),
    waiting at most a minute for the child to say so."""
    import os
    import select
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        msg = b"no error"
        try:
            fn()
        except ParamservError as e:
            msg = str(e).encode()
        except BaseException as e:  # noqa: BLE001
            msg = repr(e).encode()
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    ready, _, _ = select.select([r], [], [], 60)
    if not ready:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child said nothing within 60 s: it hangs")
    got = os.read(r, 1000).decode()
    os.waitpid(pid, 0)
    os.close(r)
    return got


def test_forked_child_close_is_refused(client):
    """Issue 28: close() or leaving a with block in a forked child hung the
    child and the parent; it is refused at once, as other calls are."""
    assert "forked" in _in_child(client.close)

    def leave_with():
        with client:
            pass
    assert "forked" in _in_child(leave_with)
    assert not client._closed  # the parent's client is untouched


def test_tls_and_token(make_cluster, paramserv_bin, tmp_path):
    token = tmp_path / "token"
    token.write_text("the-python-workers-shared-secret\n")
    certs = tmp_path / "tls"
    subprocess.run([paramserv_bin, "certs", "--ps_hosts=127.0.0.1", "--worker_hosts=127.0.0.1", f"--out={certs}"],
                   check=True, capture_output=True)
    cl = make_cluster(num_ps=1, num_workers=1, ps_args=(f"--tls_dir={certs}", f"--auth_token_file={token}"))
    init = {"w": np.ones(2, np.float32)}
    # Without the files the ps refuses every connection: start gives up
    # naming the ps.
    with Client(variables={"w": 2}, tf_config=cl.tf_config(0), startup_timeout=2, quiet=True) as c:
        with pytest.raises(ParamservError, match=cl.ps[0]):
            c.start(init=init)
    with pytest.raises(ParamservError, match="worker-0.crt"):
        Client(variables={"w": 2}, tf_config=cl.tf_config(0), tls_dir=str(tmp_path), quiet=True).start(init=init)
    with Client(variables={"w": 2}, optimizer="sgd", learning_rate=1.0, tf_config=cl.tf_config(0),
                tls_dir=str(certs), auth_token_file=str(token), startup_timeout=60, quiet=True) as c:
        assert c.start(init=init) == 0
        params = {"w": np.zeros(2, np.float32)}
        assert c.push_pull({"w": np.full(2, 0.5, np.float32)}, params) == 1
        np.testing.assert_array_equal(params["w"], np.full(2, 0.5, np.float32))
        c.done()
    assert cl.wait() == [0]


_INTERRUPTED = """
import json, os, signal, sys, threading, time
# Python's own Ctrl-C handler, as at a terminal: a process started in the
# background (CI under nohup, a shell's &) inherits SIGINT ignored, and
# Python then leaves it ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy as np
import paramserv
c = paramserv.Client(variables={"w": 3}, tf_config=json.loads(sys.argv[1]), optimizer="sgd",
                     learning_rate=0.1, sync=True, quiet=True, startup_timeout=30)
c.start(init={"w": np.zeros(3, np.float32)})
p = {"w": np.zeros(3, np.float32)}
for call in ("push_pull", "push_pull_async"):
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    t0 = time.time()
    try:
        if call == "push_pull":
            c.push_pull({"w": np.ones(3, np.float32)}, p)
        else:
            c.push_pull_async({"w": np.ones(3, np.float32)}, p).result()
        print(call, "returned")
    except KeyboardInterrupt:
        print(call, "interrupted after %.1f s" % (time.time() - t0))
print("pull after:", c.pull(p))
c.close()
"""


def test_ctrl_c_interrupts_a_waiting_call(make_cluster):
    # A synchronous step waits for the other worker, which never pushes:
    # Ctrl-C went unseen until the call returned (never), as the main
    # thread waits in the library. Now it cancels the call and raises
    # KeyboardInterrupt; the client goes on working. In a process of its
    # own, whose own deadline fails the test if the call still hangs.
    cl = make_cluster(num_ps=1, num_workers=2)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    try:
        out = subprocess.run([sys.executable, "-c", _INTERRUPTED, json.dumps(cl.tf_config(0))], env=env,
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"Ctrl-C did not interrupt the waiting call within 60 s: {e.stdout!r} {e.stderr!r}")
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and all("interrupted" in line for line in lines[:2]), (out.stdout, out.stderr)
    assert lines[2] == "pull after: 0", (out.stdout, out.stderr)


def test_done_twice(make_cluster):
    # The ps exit once told: a second done() reached for them and failed
    # with gRPC's "connection refused".
    cl = make_cluster(num_ps=1, num_workers=1)
    with Client(variables={"w": 2}, tf_config=cl.tf_config(0), optimizer="sgd", learning_rate=0.1,
                quiet=True, startup_timeout=30) as c:
        c.start(init={"w": np.zeros(2, np.float32)})
        c.done()
        assert cl.wait(30) == [0]
        c.done()


def test_schedule_and_change_rate(make_cluster):
    # The ps run Adadelta under StepLR-like decay on the global step, and the
    # chief's change_rate switches the rate at the step it names; sgd makes
    # the arithmetic exact: rate 1, 0.5 on steps 0 and 1, then 0.125.
    cl = make_cluster(num_ps=1, num_workers=1)
    with Client(variables={"w": 1}, optimizer="sgd", learning_rate=1.0,
                optimizer_options={"schedule": "step(step_size=1, gamma=0.5)"},
                tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        c.start(init={"w": np.zeros(1, np.float32)})
        c.change_rate(2, 0.125)
        with pytest.raises(ParamservError, match="missing decay_steps"):
            c.change_rate(3, 0.1, "cosine()")
        with pytest.raises(ValueError, match="from_step -1"):
            c.change_rate(-1, 0.1)
        params = {"w": np.zeros(1, np.float32)}
        for _ in range(4):
            c.push_pull({"w": np.ones(1, np.float32)}, params)
        np.testing.assert_array_equal(params["w"], np.array([-1.75], np.float32))
        c.done()
    assert cl.wait() == [0]


def test_adadelta_with_warmup(make_cluster):
    # A rule new to the ps, its hyper-parameters and a warm-up from Python.
    cl = make_cluster(num_ps=1, num_workers=1)
    with Client(variables={"w": 2}, tables={"t": 2}, optimizer="adadelta", learning_rate=1.0,
                optimizer_options={"rho": 0.9, "epsilon": 1e-6, "schedule": "warmup(steps=2)"},
                tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        c.start(init={"w": np.ones(2, np.float32)})
        params = {"w": np.zeros(2, np.float32)}
        for _ in range(3):
            c.push_pull({"w": np.ones(2, np.float32)}, params)
        # Warm-up: rate 0 at step 0, then 0.5, then 1.
        assert params["w"][0] < 1
        c.done()
    assert cl.wait() == [0]


def test_own_rule_per_variable_and_table(make_cluster):
    # A variable and a table with rules (and a schedule) of their own beside
    # the job's: each moves at its own rate; a bad own rule is refused early.
    with pytest.raises(ValueError, match=r"variable_options\['v'\]\['optimizer'\]: name 'adamax'"):
        Client(variables={"v": 1}, variable_options={"v": {"optimizer": {"name": "adamax", "learning_rate": 1}}},
               tf_config=ONE)
    with pytest.raises(ValueError, match=r"variable_options\['x'\]: no such variable"):
        Client(variables={"v": 1}, variable_options={"x": {}}, tf_config=ONE)
    cl = make_cluster(num_ps=1, num_workers=1)
    with Client(variables={"w": 1, "v": 1}, tables={"t": 1}, optimizer="sgd", learning_rate=1.0,
                variable_options={"v": {"optimizer": {"name": "sgd", "learning_rate": 0.5,
                                                      "schedule": "step(step_size=1,gamma=0.5)"}}},
                table_options={"t": {"optimizer": {"name": "sgd", "learning_rate": 0.25}}},
                tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        c.start(init={"w": np.zeros(1, np.float32), "v": np.zeros(1, np.float32)})
        params = {"w": np.zeros(1, np.float32), "v": np.zeros(1, np.float32)}
        keys = np.array([3], np.uint64)
        for _ in range(2):
            c.push({"w": np.ones(1, np.float32), "v": np.ones(1, np.float32)},
                   rows=[("t", keys, np.ones((1, 1), np.float32))])
        c.pull(params)
        rows = np.zeros((1, 1), np.float32)
        c.pull_rows("t", keys, rows)
        np.testing.assert_array_equal(params["w"], [-2])
        np.testing.assert_array_equal(params["v"], [-0.75])
        np.testing.assert_array_equal(rows, [[-0.5]])
        c.done()
    assert cl.wait() == [0]


def test_ftrl_learning_rate_power(make_cluster):
    # learning_rate_power reaches the ps: at 0 (a fixed rate per coordinate,
    # n^0 = 1 in place of sqrt(n)) FTRL with beta 1 and no l1/l2 gives
    # p = -z*lr/2, so -0.05 then -0.1 after two gradients of 1; the default
    # -0.5 would give -0.0488 first. A power > 0 is refused.
    cl = make_cluster(num_ps=1, num_workers=1)
    with Client(variables={"w": 1}, optimizer="ftrl", learning_rate=0.1,
                optimizer_options={"learning_rate_power": 0.0},
                tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        c.start(init={"w": np.zeros(1, np.float32)})
        params = {"w": np.zeros(1, np.float32)}
        got = []
        for _ in range(2):
            c.push_pull({"w": np.ones(1, np.float32)}, params)
            got.append(float(params["w"][0]))
        np.testing.assert_allclose(got, [-0.05, -0.1], rtol=1e-6)
        c.done()
    assert cl.wait() == [0]
    cl = make_cluster(num_ps=1, num_workers=1)
    with Client(variables={"w": 1}, optimizer="ftrl", learning_rate=0.1,
                optimizer_options={"learning_rate_power": 0.5},
                tf_config=cl.tf_config(0), startup_timeout=60, quiet=True) as c:
        with pytest.raises(ParamservError, match="learning_rate_power"):
            c.start(init={"w": np.zeros(1, np.float32)})
