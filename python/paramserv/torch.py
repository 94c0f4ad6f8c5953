"""PyTorch integration: a module whose parameters live on the ps.

Example (every worker runs this under ``paramserv local -- python3 train.py``)::

    import torch, paramserv.torch as pst

    net = torch.nn.Sequential(torch.nn.Linear(784, 100), torch.nn.ReLU(),
                              torch.nn.Linear(100, 10))
    model = pst.DistributedModule(net, optimizer="adam", learning_rate=1e-3)
    while model.global_step < 1000:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        model.step()          # push .grad, pull the new values (server-side Adam)
    model.done()

The parameters' ``.data`` are views of numpy buffers (CPU, float32) that the
client fills in place, and their ``.grad`` views of buffers it sends from: no
copies. The chief's current parameter values initialise the ps. Do not call
a torch optimizer: the ps apply the optimizer. ``Embedding`` is a lookup
table held in a sparse table on the ps: a forward pass pulls only the rows
of the batch's distinct ids, and ``step()`` pushes their gradients;
``Embedding.prefetch(next_ids)`` pulls the next batch's rows in the
background while this one computes.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import numpy as np
import torch

from ._client import Client, _check_fork

__all__ = ["DistributedModule", "Embedding"]


def _flat_ids(ids: Any, copy: bool) -> np.ndarray:
    """ids (a tensor or array of integers) as a flat uint64 array, a copy of
    its own when copy (a prefetch keeps it while the caller may reuse ids)."""
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().reshape(-1).cpu().numpy()
    a = np.asarray(ids).reshape(-1)
    if a.dtype.kind not in "iu":
        raise ValueError(f"paramserv.torch.Embedding: ids of dtype {a.dtype}: want integers")
    if a.dtype.kind == "i" and a.size and a.min() < 0:
        # astype(uint64) would wrap -1 to 2**64-1 silently: another row.
        i = int(np.argmax(a < 0))
        raise ValueError(f"paramserv.torch.Embedding: id {int(a[i])} at flat position {i} is negative: want ids >= 0")
    return a.astype(np.uint64, copy=copy)


class _Prefetch:
    """A prefetch: the ids as given (flattened), their distinct keys and the
    index of each id's key, the rows' buffer and the pull's future (None
    while held back until the step completes)."""

    __slots__ = ("flat", "keys", "inverse", "rows", "future")

    def __init__(self, flat: np.ndarray, keys: np.ndarray, inverse: np.ndarray, rows: np.ndarray) -> None:
        self.flat, self.keys, self.inverse, self.rows = flat, keys, inverse, rows
        self.future: Any = None


class Embedding(torch.nn.Module):
    """An embedding of uint64-keyed rows of ``dim`` floats held in the sparse
    table ``table`` on the ps (rows are created on first touch by the
    table's initializer: ``init="normal"`` with ``init_stddev``, or zeros).

    It works inside a ``DistributedModule``, which declares the table and
    pushes the gradients of the rows each forward pass pulled.
    """

    def __init__(self, table: str, dim: int, init: str = "normal", init_stddev: float = 0.01,
                 seed: int = 0, min_count: int = 0, evict_after_steps: int = 0) -> None:
        super().__init__()
        self.table, self.dim = table, int(dim)
        self.options = {"init": init, "init_stddev": float(init_stddev), "seed": int(seed),
                        "min_count": int(min_count), "evict_after_steps": int(evict_after_steps)}
        self._client: Optional[Client] = None
        self._pending: List[Tuple[np.ndarray, torch.Tensor]] = []
        self._prefetched: Deque[_Prefetch] = collections.deque()
        # Set by the DistributedModule: whether a prefetch (made while
        # others are queued, or not) must wait for the next step().
        self._hold: Optional[Callable[[bool], bool]] = None
        self.prefetch_hits = 0
        """Forward passes that used the rows of a prefetch."""
        self.prefetch_misses = 0
        """Forward passes whose ids' keys differed from their prefetch's
        (which was dropped, the rows pulled then)."""

    def prefetch(self, ids: Any) -> None:
        """Starts pulling, in the background, the rows of the distinct ids of
        a future batch (a tensor or array of integers, any shape).

        Prefetches queue, and each forward pass takes the oldest: if its
        ids hold the same distinct keys, it uses those rows instead of
        pulling; otherwise it drops them and pulls as without a prefetch.
        So prefetch batch t+1 before the forward pass of batch t (and
        batch 0 before the loop): the pull runs on a goroutine of the Go
        library (no Python thread, no GIL) during batch t's forward and
        backward passes, and batch t+1's forward pass finds its rows there::

            emb.prefetch(batches[0])
            for t in range(n):
                emb.prefetch(batches[t + 1])
                loss = loss_fn(model(batches[t]), labels[t])  # rows of t: prefetched
                loss.backward()
                model.step()

        Every Embedding is prefetched on its own (a model with a wide and
        a deep table calls it on both). A forward pass that is not part of
        the pattern (an evaluation) takes a prefetch too.

        Staleness. Asynchronous training: the rows are read after the
        calls made before the prefetch (step t-1's push+pull) and before
        those made after it (step t's push), so batch t+1 sees the rows
        one push of this worker short: a row looked up by batches t and
        t+1 lacks t's gradient, as ``overlap=True`` reads the dense values
        and as the Go library's SparseReadAhead reads rows (prefetching k
        batches ahead: k pushes short), also with ``overlap=True`` (step
        t-1's push+pull in flight is read first). The gradient is pushed
        as computed at the dense values' step, so ``max_staleness`` does
        not count this.

        Synchronous training stays exact: the rows are those a forward
        pass would pull, and the values bit for bit those without
        prefetch. A prefetch that a step may come before (one made while
        a step is under way, a training forward pass since the last
        ``step()``, or while other prefetches wait for their forward pass)
        starts its pull only when ``step()`` has completed, and ``step()``
        pulls again any prefetch made before it, so the round trip hides
        only behind what the program does between ``step()`` and the next
        forward pass.
        """
        if self._client is None:
            raise RuntimeError(f"paramserv.torch.Embedding {self.table!r}: not inside a started DistributedModule")
        flat = _flat_ids(ids, copy=True)
        keys, inverse = np.unique(flat, return_inverse=True)
        pf = _Prefetch(flat, np.ascontiguousarray(keys), inverse, np.empty((len(keys), self.dim), np.float32))
        if not (self._hold is not None and self._hold(bool(self._prefetched))):
            pf.future = self._client.pull_rows_async(self.table, pf.keys, pf.rows)
        self._prefetched.append(pf)

    def _pull_again(self) -> None:
        """Starts again the pulls of the prefetches (synchronous training,
        after a step: the rows they read may predate it), each into a
        buffer of its own: the first pull may still be running."""
        for pf in self._prefetched:
            pf.rows = np.empty_like(pf.rows)
            pf.future = self._client.pull_rows_async(self.table, pf.keys, pf.rows)

    def forward(self, ids: Any) -> torch.Tensor:
        """Looks up the rows of ``ids`` (integers of any shape: a tensor, an
        array or nested lists); returns a tensor of shape ids.shape + (dim,)."""
        if self._client is None:
            raise RuntimeError(f"paramserv.torch.Embedding {self.table!r}: not inside a started DistributedModule")
        flat = _flat_ids(ids, copy=False)
        pf = self._prefetched.popleft() if self._prefetched else None
        rows = None
        if pf is not None and np.array_equal(flat, pf.flat):
            keys, inverse = pf.keys, pf.inverse
        else:
            keys, inverse = np.unique(flat, return_inverse=True)
            keys = np.ascontiguousarray(keys)
        if pf is not None:
            if np.array_equal(keys, pf.keys):
                self.prefetch_hits += 1
                if pf.future is None:
                    # Held back by a step still under way (sync): read now.
                    self._client.pull_rows(self.table, pf.keys, pf.rows)
                else:
                    pf.future.result()
                keys, rows = pf.keys, pf.rows
            else:
                # Other keys: dropped (the client holds its buffers until
                # its pull has returned).
                self.prefetch_misses += 1
        if rows is None:
            rows = np.empty((len(keys), self.dim), np.float32)
            self._client.pull_rows(self.table, keys, rows)
        leaf = torch.from_numpy(rows)
        if torch.is_grad_enabled() and self.training:
            leaf.requires_grad_(True)
            leaf.register_hook(lambda g, k=keys: self._pending.append((k, g)))
        out = leaf[torch.from_numpy(inverse.astype(np.int64, copy=False))]
        shape = tuple(ids.shape) if isinstance(ids, (torch.Tensor, np.ndarray)) else np.shape(ids)
        return out.reshape(*shape, self.dim)

    def _rows(self) -> Optional[Tuple[str, np.ndarray, np.ndarray]]:
        """The gradients of the rows looked up since the last step, summed per
        key, as (table, keys, grads); None if there are none."""
        pending, self._pending = self._pending, []
        if not pending:
            return None
        if len(pending) == 1:
            keys, g = pending[0]
            return self.table, keys, np.ascontiguousarray(g.detach().numpy(), dtype=np.float32)
        all_keys = np.concatenate([k for k, _ in pending])
        keys, inverse = np.unique(all_keys, return_inverse=True)
        grads = np.zeros((len(keys), self.dim), np.float32)
        np.add.at(grads, inverse, np.concatenate([g.detach().numpy() for _, g in pending]))
        return self.table, np.ascontiguousarray(keys), grads


class DistributedModule(torch.nn.Module):
    """Wraps ``module`` so its parameters live on the parameter servers.

    ``client_kwargs`` go to ``paramserv.Client`` (optimizer, learning_rate,
    sync, replicas_to_aggregate, tf_config, ...); the variables are the
    module's parameters (named as in ``named_parameters()``) and the tables
    those of its ``Embedding`` modules. The constructor starts the client:
    the chief's current parameter values initialise the ps, the other
    workers wait for them.

    Call the wrapper as the module; the first forward pass pulls the values
    (``pull()`` pulls explicitly). After ``loss.backward()``, ``step()``
    pushes the gradients and pulls the next values in place, then zeroes
    the gradients.

    With ``overlap=True`` and asynchronous training, ``step()`` returns at
    once and the push+pull runs while the next batch computes, at values
    one push older (two sets of buffers alternate); ``pull()``, ``done()``
    and the next ``step()`` wait for it. Synchronous training ignores it.
    An ``Embedding``'s ``prefetch`` of the next batch, made before this
    batch's forward pass, is pulled after the push+pull in flight and
    before the next one, beside this batch's computation.
    """

    def __init__(self, module: torch.nn.Module, client: Optional[Client] = None, *, overlap: bool = False,
                 **client_kwargs: Any) -> None:
        super().__init__()
        self.module = module
        self._named: List[Tuple[str, torch.nn.Parameter]] = []
        self._future: Any = None
        self._spare: Optional[Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]] = None
        self._embeddings = [m for m in module.modules() if isinstance(m, Embedding)]
        # Several Embeddings may look up one table (ids of two fields in
        # one vocabulary): they must declare it alike, and step() pushes the
        # table once, its rows' gradients summed.
        declared: Dict[str, Embedding] = {}
        for e in self._embeddings:
            first = declared.setdefault(e.table, e)
            if (first.dim, first.options) != (e.dim, e.options):
                raise ValueError(
                    f"paramserv.torch: two Embeddings of table {e.table!r} differ: dim {first.dim} {first.options} "
                    f"and dim {e.dim} {e.options}: Embeddings sharing a table must declare it alike")
        named = [(n, p) for n, p in module.named_parameters()]
        self._named = named
        for n, p in named:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ValueError(f"paramserv.torch: parameter {n!r} is {p.dtype} on {p.device}: want float32 on the CPU")
        self._params: Dict[str, np.ndarray] = {}
        self._grads: Dict[str, np.ndarray] = {}
        init = {}
        for n, p in named:
            init[n] = np.ascontiguousarray(p.detach().numpy(), dtype=np.float32).copy()
            # The module's own values until the first pull: a client that
            # fails (a bad argument, no ps) leaves the module as it was.
            self._params[n] = init[n].copy()
            self._grads[n] = np.zeros(tuple(p.shape), np.float32)
            # The parameter's values and gradient become views of the
            # buffers the client reads and writes: no copies.
            p.data = torch.from_numpy(self._params[n])
            p.grad = torch.from_numpy(self._grads[n])
        if client is None:
            client = Client(
                variables={n: tuple(p.shape) for n, p in named},
                tables={e.table: e.dim for e in self._embeddings},
                table_options={e.table: e.options for e in self._embeddings},
                **client_kwargs)
        self.client = client
        self._under_way = False  # a training forward pass since the last step()
        for e in self._embeddings:
            e._client = client
            e._hold = self._holds_prefetch
        self.client.start(init=init if client.is_chief else None)
        self._sync = self.client.sync  # the cluster's mode, fixed for the job
        self._fresh = False
        self._step = self.client.step
        # Overlap only where the push's semantics allow it: asynchronous
        # training (a synchronous step must complete before the next).
        self._overlap = bool(overlap) and not self.client.sync

    @property
    def global_step(self) -> int:
        """The global step of the values last pulled (with ``overlap``, of
        the last push+pull that has completed)."""
        return self._step

    @property
    def overlapping(self) -> bool:
        """Whether ``step()`` overlaps the round trip with the next batch
        (``overlap=True`` and asynchronous training)."""
        return self._overlap

    @property
    def is_chief(self) -> bool:
        """Whether this worker is the chief (worker 0)."""
        return self.client.is_chief

    def pull(self) -> int:
        """Pulls every parameter's values in place; returns the global step.
        With ``overlap``, it first waits for the push in flight."""
        self._settle()
        step = self.client.pull(self._params)
        self._fresh, self._step = True, step
        return step

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not self._fresh:
            self.pull()
        if torch.is_grad_enabled() and self.training:
            self._under_way = True
        return self.module(*args, **kwargs)

    def _holds_prefetch(self, queued: bool) -> bool:
        """Whether an Embedding's prefetch must wait for the next step(): in
        synchronous training, when a step may complete before the forward
        pass that takes it (a step under way, or other prefetches queued
        before it), the rows it would read now may be the step's old ones."""
        return self._sync and (self._under_way or queued)

    def step(self) -> int:
        """Pushes the gradients of the last backward pass (and of the
        embeddings' rows), pulls the next values in place, zeroes the
        gradients, and returns the new global step."""
        rows = _merge([r for r in (e._rows() for e in self._embeddings) if r is not None])
        for n, p in self.module.named_parameters():
            if p.grad is None or p.grad.data_ptr() != self._grads[n].ctypes.data:
                # Something replaced .grad (set_to_none): copy it back.
                if p.grad is not None:
                    self._grads[n][...] = p.grad.detach().numpy()
                p.grad = torch.from_numpy(self._grads[n])
        if self._overlap:
            return self._step_overlapped(rows)
        step = self.client.push_pull(self._grads, self._params, rows=rows)
        for g in self._grads.values():
            g.fill(0)
        self._fresh, self._step, self._under_way = True, step, False
        if self._sync:
            # The step has completed: a prefetch's rows must be read from
            # now on (Embedding.prefetch), so that sync stays exact.
            for e in self._embeddings:
                e._pull_again()
        return step

    def _step_overlapped(self, rows: List[Tuple[str, np.ndarray, np.ndarray]]) -> int:
        """step() with the round trip in the background: the push+pull
        reads this set of gradients and fills this set of values while the
        module switches to a second set (values one push older), which the
        previous push+pull filled; the next step waits for the call in
        flight before it starts its own. Returns the step of the last call
        that completed."""
        if self._spare is None:
            # First step: the second set starts as the values just used.
            self._spare = ({n: a.copy() for n, a in self._params.items()},
                           {n: np.zeros_like(g) for n, g in self._grads.items()})
        else:
            self._settle()
        self._future = self.client.push_pull_async(self._grads, self._params, rows=rows)
        (self._params, self._grads), self._spare = self._spare, (self._params, self._grads)
        for g in self._grads.values():
            g.fill(0)
        for n, p in self._named:
            p.data = torch.from_numpy(self._params[n])
            p.grad = torch.from_numpy(self._grads[n])
        self._fresh, self._under_way = True, False
        return self._step

    def _settle(self) -> None:
        """Waits for the push+pull in flight (overlap), raising its error."""
        if self._future is not None:
            fut, self._future = self._future, None
            self._step = fut.result()

    def report_loss(self, loss: Any, examples: int = 0) -> None:
        """Gives the batch's loss (a number or a 0-d tensor) and its number
        of examples to the worker's metrics, status page and ``paramserv
        local``'s progress line (Client.report_loss)."""
        if isinstance(loss, torch.Tensor):
            loss = loss.detach().item()
        self.client.report_loss(loss, examples)

    def done(self) -> None:
        """Tells the ps this worker has finished (after the push in flight)."""
        self._settle()
        self.client.done()

    def close(self) -> None:
        """Closes the client (after the push in flight); refused at once in a
        forked child, as Client.close is."""
        _check_fork()
        try:
            self._settle()
        finally:
            self.client.close()


def _merge(rows: List[Tuple[str, np.ndarray, np.ndarray]]) -> List[Tuple[str, np.ndarray, np.ndarray]]:
    """Rows of the same table (several Embeddings sharing it) as one entry
    per table, the gradients of a key summed: a push names a table once, so
    that an adaptive optimizer sees one gradient per key and step."""
    by_table: Dict[str, List[Tuple[np.ndarray, np.ndarray]]] = {}
    for table, keys, grads in rows:
        by_table.setdefault(table, []).append((keys, grads))
    if len(by_table) == len(rows):
        return rows
    out = []
    for table, parts in by_table.items():
        if len(parts) == 1:
            out.append((table, parts[0][0], parts[0][1]))
            continue
        keys, inverse = np.unique(np.concatenate([k for k, _ in parts]), return_inverse=True)
        grads = np.zeros((len(keys), parts[0][1].shape[1]), np.float32)
        np.add.at(grads, inverse, np.concatenate([g for _, g in parts]))
        out.append((table, np.ascontiguousarray(keys), grads))
    return out
