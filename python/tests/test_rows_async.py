"""Client.pull_rows_async against real ps processes (Embedding.prefetch,
which uses it, is tested in test_torch_prefetch.py)."""

import time

import numpy as np
import pytest

from paramserv import Client, ParamservError


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def _client(cl, **kw):
    kw.setdefault("optimizer", "sgd")
    kw.setdefault("learning_rate", 0.5)
    return Client(variables={"b": 1}, tables={"emb": 3}, tf_config=cl.tf_config(0), startup_timeout=60, quiet=True,
                  table_options={"emb": {"init": "normal", "init_stddev": 0.5, "seed": 7}}, **kw)


def test_pull_rows_async_equals_pull_rows(make_cluster):
    cl = make_cluster(num_ps=2, num_workers=1)
    with _client(cl) as c:
        c.start(init={"b": np.zeros(1, np.float32)})
        keys = np.array([3, 1 << 40, 7, 2**64 - 1, 12345678901, 0], np.uint64)
        c.push_rows("emb", keys[:3].copy(), np.arange(9, dtype=np.float32).reshape(3, 3) / 7)
        want = np.empty((len(keys), 3), np.float32)
        c.pull_rows("emb", keys, want)
        assert np.abs(want).min() > 0  # the normal initializer's rows, some updated
        out, again = np.full_like(want, np.nan), np.full_like(want, np.nan)
        first = c.pull_rows_async("emb", keys, out)
        second = c.pull_rows_async("emb", keys[::-1].copy(), again)  # queued behind the first
        assert first.result(timeout=60) is out
        assert second.result(timeout=60) is again
        np.testing.assert_array_equal(_bits(out), _bits(want))
        np.testing.assert_array_equal(_bits(again), _bits(want[::-1]))
        assert c.pull_rows_async("emb", np.array([], np.uint64), np.empty((0, 3), np.float32)).result(timeout=60).shape == (0, 3)
        c.done()
    assert cl.wait() == [0, 0]


def test_pull_rows_async_refuses_bad_buffers_at_once(make_cluster):
    cl = make_cluster(num_ps=1, num_workers=1)
    with _client(cl) as c:
        keys = np.array([1, 2], np.uint64)
        with pytest.raises(ParamservError, match="not started"):
            c.pull_rows_async("emb", keys, np.zeros((2, 3), np.float32))
        c.start(init={"b": np.zeros(1, np.float32)})
        with pytest.raises(ValueError, match="unknown table 'nope'"):
            c.pull_rows_async("nope", keys, np.zeros((2, 3), np.float32))
        with pytest.raises(ValueError, match=r"pull_rows_async keys of table 'emb': got int64 .* want a contiguous 1-D uint64"):
            c.pull_rows_async("emb", keys.astype(np.int64), np.zeros((2, 3), np.float32))
        with pytest.raises(ValueError, match=r"dtype float64, want float32"):
            c.pull_rows_async("emb", keys, np.zeros((2, 3)))
        with pytest.raises(ValueError, match=r"shape \(2, 4\), want \(2, 3\)"):
            c.pull_rows_async("emb", keys, np.zeros((2, 4), np.float32))
        ro = np.zeros((2, 3), np.float32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            c.pull_rows_async("emb", keys, ro)
        # Nothing was sent: the client goes on.
        out = np.full((2, 3), np.nan, np.float32)
        c.pull_rows_async("emb", keys, out).result(timeout=60)
        assert np.isfinite(out).all()
        c.done()
    assert cl.wait() == [0]


def test_pull_rows_async_gives_the_go_error(make_cluster):
    cl = make_cluster(num_ps=1, num_workers=1)
    with _client(cl, recovery_timeout=1) as c:
        c.start(init={"b": np.zeros(1, np.float32)})
        cl.stop()  # the ps is gone and does not come back within recovery_timeout
        fut = c.pull_rows_async("emb", np.array([1, 2], np.uint64), np.zeros((2, 3), np.float32))
        with pytest.raises(ParamservError, match=r"gave up waiting for ps 0 at .*recovery_timeout=1s"):
            fut.result(timeout=60)


def test_pull_rows_async_futures_dropped_or_unread(make_cluster):
    cl = make_cluster(num_ps=1, num_workers=1)
    c = _client(cl, recovery_timeout=2)
    try:
        c.start(init={"b": np.zeros(1, np.float32)})
        keys = np.arange(1000, dtype=np.uint64)
        # Futures dropped at once, their buffers referenced by nothing else:
        # the client holds them until the pulls return, then forgets them.
        for _ in range(5):
            c.pull_rows_async("emb", keys, np.empty((1000, 3), np.float32))
        want = np.empty((1000, 3), np.float32)
        c.pull_rows("emb", keys, want)
        deadline = time.time() + 30
        while True:
            last = c.pull_rows_async("emb", keys, np.empty((1000, 3), np.float32))  # forgets those over
            last.result(timeout=60)
            if set(c._calls) <= {last._ticket}:
                break
            assert time.time() < deadline, f"pulls {sorted(c._calls)} not forgotten after 30 s"
        # close() waits for a pull in flight: its result is there after.
        # Started with no call in flight, it runs before done(), which
        # lets the ps exit.
        out = np.full((1000, 3), np.nan, np.float32)
        unread = c.pull_rows_async("emb", keys, out)
        c.done()
    finally:
        c.close()
    assert unread.result(timeout=0) is out
    np.testing.assert_array_equal(_bits(out), _bits(want))
    with pytest.raises(ParamservError, match="closed"):
        c.pull_rows_async("emb", keys, out)
    assert cl.wait() == [0]


def test_calls_run_after_the_pulls_started_before_them(make_cluster):
    # A push made right after pull_rows_async is applied after the pull has
    # read: 50 times, the rows read are those from before the push.
    cl = make_cluster(num_ps=1, num_workers=1)
    with _client(cl) as c:
        c.start(init={"b": np.zeros(1, np.float32)})
        keys = np.arange(200, dtype=np.uint64)
        ones = np.ones((200, 3), np.float32)
        before = np.empty((200, 3), np.float32)
        c.pull_rows("emb", keys, before)
        for i in range(50):
            out = np.empty((200, 3), np.float32)
            fut = c.pull_rows_async("emb", keys, out)
            c.push_rows("emb", keys, ones)
            fut.result(timeout=60)
            np.testing.assert_array_equal(_bits(out), _bits(before), err_msg=f"round {i}: the push came first")
            c.pull_rows("emb", keys, before)
        c.done()
    assert cl.wait() == [0]


def test_background_futures_complete_by_themselves(make_cluster):
    """Nobody asks the futures: concurrent.futures.wait, as_completed and
    done-callbacks still see them complete, errors included."""
    import concurrent.futures as cf
    import threading

    cl = make_cluster(num_ps=1, num_workers=1)
    c = _client(cl, recovery_timeout=1)
    try:
        c.start(init={"b": np.zeros(1, np.float32)})
        keys = np.arange(100, dtype=np.uint64)
        outs = [np.empty((100, 3), np.float32) for _ in range(3)]
        # Each way of waiting on its own future: a done-callback, wait, as_completed.
        called = threading.Event()
        c.pull_rows_async("emb", keys, outs[0]).add_done_callback(lambda f: called.set())
        assert called.wait(60), "the done-callback did not run within 60 s"
        fut = c.pull_rows_async("emb", keys, outs[1])
        assert cf.wait([fut], timeout=60).not_done == set(), "wait: the pull not complete after 60 s"
        fut = c.pull_rows_async("emb", keys, outs[2])
        assert [f.result(timeout=0) for f in cf.as_completed([fut], timeout=60)] == [outs[2]]
        futs = [c.pull_rows_async("emb", keys, o) for o in outs]
        done, pending = cf.wait(futs, timeout=60)
        assert not pending, f"{len(pending)} of 3 pulls not complete after 60 s"
        step = c.push_pull_async({"b": np.ones(1, np.float32)}, {"b": np.empty(1, np.float32)})
        assert cf.wait([step], timeout=60).not_done == set()
        assert step.result(timeout=0) >= 1
        cl.stop()  # the ps is gone: a pull's error completes its future too
        bad = c.pull_rows_async("emb", keys, outs[0])
        assert cf.wait([bad], timeout=60).not_done == set(), "a failed pull's future did not complete"
        assert isinstance(bad.exception(timeout=0), ParamservError)
    finally:
        c.close()
