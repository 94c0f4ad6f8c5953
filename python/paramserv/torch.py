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
copies (a module on a GPU is copied to and from pinned host buffers). The
chief's current parameter values initialise the ps. The ps apply the
optimizer; or pass a ``torch.optim`` optimizer (``optimizer=torch.optim.
Adadelta(net.parameters(), lr=1.0)``) and it runs on the worker, which
pushes each step's change (see DistributedModule). ``Embedding`` is a lookup
table held in a sparse table on the ps: a forward pass pulls only the rows
of the batch's distinct ids, and ``step()`` pushes their gradients;
``Embedding.prefetch(next_ids)`` pulls the next batch's rows in the
background while this one computes.
"""

from __future__ import annotations

import collections
import inspect
import io
import itertools
import json
import os
from concurrent.futures import Future
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch

from ._client import Client, _check_fork

__all__ = ["DistributedModule", "Embedding", "DistributedSampler"]


# Tests set it to run a CPU module through the copies a GPU module makes.
_FORCE_COPIES = False

# The future of a prefetch whose rows a step's push+pull has read: done.
_LANDED: Future = Future()
_LANDED.set_result(None)


def _host_buffer(shape: Tuple[int, ...], pinned: bool) -> np.ndarray:
    """A float32 host buffer of shape: page-locked (pinned) memory when
    pinned, so that copies to and from a GPU run at full speed and may be
    asynchronous; numpy's otherwise."""
    if pinned:
        return torch.empty(shape, dtype=torch.float32, pin_memory=True).numpy()
    return np.empty(shape, np.float32)


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
    if not copy and a.dtype == np.int64 and a.flags.c_contiguous:
        # Non-negative int64 (a tensor of ids): the same bits as uint64.
        return a.view(np.uint64)
    return a.astype(np.uint64, copy=copy)


# The distinct keys of the latest prefetch's ids, for an Embedding's
# prefetch of the same ids (a wide and a deep table): (ids, flat, keys,
# inverse), ids held so that its id is not reused.
_last_unique: Any = None


def _unique(ids: Any, flat: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """np.unique(flat, return_inverse=True), the keys contiguous: those of
    the prefetch before when it was given the same ids, holding the same
    values (the arrays are only read)."""
    global _last_unique
    last = _last_unique
    if last is not None and last[0] is ids and np.array_equal(last[1], flat):
        return last[2], last[3]
    keys, inverse = np.unique(flat, return_inverse=True)
    keys = np.ascontiguousarray(keys)
    _last_unique = (ids, flat, keys, inverse)
    return keys, inverse


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
                 seed: int = 0, min_count: int = 0, evict_after_steps: int = 0,
                 optimizer: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        self.table, self.dim = table, int(dim)
        self.options: Dict[str, Any] = {
            "init": init, "init_stddev": float(init_stddev), "seed": int(seed),
            "min_count": int(min_count), "evict_after_steps": int(evict_after_steps)}
        if optimizer is not None:
            # The table's own rule on the ps ({"name": "adagrad",
            # "learning_rate": 0.05, ...}); needed when the dense
            # parameters' optimizer runs on the worker.
            self.options["optimizer"] = dict(optimizer)
        self._client: Optional[Client] = None
        # The device the rows go to (set by the DistributedModule: its
        # parameters'), and whether host buffers are pinned.
        self._device = torch.device("cpu")
        self._pinned = False
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

    def prefetch(self, ids: Any, with_step: bool = False) -> None:
        """Starts pulling, in the background, the rows of the distinct ids of
        a future batch (a tensor or array of integers, any shape).

        With ``with_step=True`` the rows are not pulled now but by the next
        ``DistributedModule.step()``, in the same request as its push (one
        round trip per ps where a background pull is a call of its own):
        read after that push is applied, so batch t+1 sees batch t's
        gradients (no staleness, in either mode), and the forward pass of
        batch t+1 finds them there. The round trip is the step's, not
        hidden behind batch t's computation; on a busy CPU one call a step
        instead of two is usually the faster. (With ``overlap=True`` the
        forward pass waits for the step's call in flight.) A table rides
        on a step once: a second prefetch of the same table (prefetches
        queued further ahead, or Embeddings sharing a table) is pulled
        after the step as without ``with_step``.

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
        is pulled only once ``step()`` has completed (the oldest of each
        table in ``step()``'s own request, as ``with_step=True`` is, the
        others after it), and ``step()`` pulls again any prefetch made
        before it, so the round trip hides only behind what the program
        does between ``step()`` and the next forward pass.
        """
        if self._client is None:
            raise RuntimeError(f"paramserv.torch.Embedding {self.table!r}: not inside a started DistributedModule")
        flat = _flat_ids(ids, copy=True)
        keys, inverse = _unique(ids, flat)
        pf = _Prefetch(flat, keys, inverse, _host_buffer((len(keys), self.dim), self._pinned))
        held = with_step or (self._hold is not None and self._hold(bool(self._prefetched)))
        if not held:
            pf.future = self._client.pull_rows_async(self.table, pf.keys, pf.rows)
        self._prefetched.append(pf)

    def _pull_again(self, rode: List[_Prefetch]) -> None:
        """Starts again the pulls of the prefetches (synchronous training,
        after a step: the rows they read may predate it), each into a
        buffer of its own: the first pull may still be running. Those that
        rode on the step (rode) were read after it and stay."""
        for pf in self._prefetched:
            if any(pf is r for r in rode):
                continue
            pf.rows = np.empty_like(pf.rows)
            pf.future = self._client.pull_rows_async(self.table, pf.keys, pf.rows)

    def _held(self) -> List[_Prefetch]:
        """The prefetches whose pull has not started, oldest first."""
        return [pf for pf in self._prefetched if pf.future is None]

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
            if keys is pf.keys or np.array_equal(keys, pf.keys):
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
            rows = _host_buffer((len(keys), self.dim), self._pinned)
            self._client.pull_rows(self.table, keys, rows)
        leaf = torch.from_numpy(rows)
        index = torch.from_numpy(inverse.astype(np.int64, copy=False))
        if self._device.type != "cpu":
            # A copy of its own on the device: the host buffer may be
            # reused once it has been read.
            leaf = leaf.to(self._device)
            index = index.to(self._device)
        if torch.is_grad_enabled() and self.training:
            leaf.requires_grad_(True)
            leaf.register_hook(lambda g, k=keys: self._pending.append((k, g)))
        out = leaf[index]
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
            return self.table, keys, np.ascontiguousarray(g.detach().cpu().numpy(), dtype=np.float32)
        all_keys = np.concatenate([k for k, _ in pending])
        keys, inverse = np.unique(all_keys, return_inverse=True)
        grads = np.zeros((len(keys), self.dim), np.float32)
        np.add.at(grads, inverse, np.concatenate([g.detach().cpu().numpy() for _, g in pending]))
        return self.table, np.ascontiguousarray(keys), grads


class DistributedModule(torch.nn.Module):
    """Wraps ``module`` so its parameters live on the parameter servers.

    ``client_kwargs`` go to ``paramserv.Client`` (optimizer, learning_rate,
    sync, replicas_to_aggregate, tf_config, checkpoint_dir, save_steps,
    ...); the variables are the module's parameters (named as in
    ``named_parameters()``) and the tables those of its ``Embedding``
    modules. The constructor starts the client: the chief's current
    parameter values initialise the ps, the other workers wait for them.

    Call the wrapper as the module; the first forward pass pulls the values
    (``pull()`` pulls explicitly). After ``loss.backward()``, ``step()``
    pushes the gradients and pulls the next values in place, then zeroes
    the gradients.

    **The optimizer on the worker.** ``optimizer`` is either the name of
    the ps's rule (``"adam"``, with ``learning_rate`` and
    ``optimizer_options``: the ps apply it) or a ``torch.optim.Optimizer``
    over the module's parameters, which then runs here: ``step()`` calls
    its ``step()`` on the gradients, pushes the change it made to the
    parameters (values before minus after) and pulls the next values; the
    ps run plain SGD at rate 1.0 on those changes. Asynchronous training:
    each worker's change is added to the values as it arrives (with one
    worker, the run is the single-process one, to float rounding).
    Synchronous: the step's changes are averaged (``replicas_to_aggregate``
    of them), as gradients are; each worker's optimizer keeps its own
    state, from its own gradients. A ``scheduler`` (any
    ``torch.optim.lr_scheduler``) is yours to step as usual (per epoch,
    per batch); given here, its state is saved with the checkpoints.
    Embeddings are not covered by a worker's optimizer: give their tables
    a rule of their own on the ps (``Embedding(..., optimizer={"name":
    "adagrad", "learning_rate": 0.05})``).

    **State saved with each checkpoint.** With a checkpoint directory
    (``checkpoint_dir=...``) the chief saves, with every checkpoint, its
    worker optimizer's and the scheduler's ``state_dict`` and ``state``:
    any picklable object of yours (the epoch, the batch reached, RNG
    states), or a function returning one, called inside the ``step()``
    whose checkpoint is due, after its push: describe where the program
    goes on from (the next batch: ``lambda: {"epoch": epoch, "batch": i +
    1, "rng": torch.get_rng_state()}``), and ``done()``'s final one. When
    the job starts again (the ps restore the newest checkpoint), every
    worker that sees the directory loads the chief's optimizer and
    scheduler state and finds yours in ``resumed`` (None on a fresh
    start), so the same command continues where it stopped. After a
    recovery that rolled the ps back to an earlier checkpoint, they are
    loaded again (``resumed`` changes).

    **Devices.** A module on a GPU (``net.cuda()`` before wrapping) stays
    there: values are pulled into page-locked host buffers and copied to
    the device, gradients (or changes) copied back before the push;
    Embeddings' rows likewise. On the CPU, parameters are views of the
    client's buffers: no copies.

    With ``overlap=True`` and asynchronous training, ``step()`` returns at
    once and the push+pull runs while the next batch computes, at values
    one push older (two sets of buffers alternate); ``pull()``, ``done()``
    and the next ``step()`` wait for it. Synchronous training ignores it.
    An ``Embedding``'s ``prefetch`` of the next batch, made before this
    batch's forward pass, is pulled after the push+pull in flight and
    before the next one, beside this batch's computation.
    """

    def __init__(self, module: torch.nn.Module, client: Optional[Client] = None, *, overlap: bool = False,
                 optimizer: Any = None, scheduler: Any = None, state: Any = None,
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
        devices = {p.device for _, p in named}
        for n, p in named:
            if p.dtype != torch.float32:
                raise ValueError(f"paramserv.torch: parameter {n!r} is {p.dtype} on {p.device}: want float32")
        if len(devices) > 1:
            raise ValueError(f"paramserv.torch: the parameters are on several devices {sorted(map(str, devices))}: "
                             "want one (move the module with .to(device) before wrapping it)")
        self.device = devices.pop() if devices else torch.device("cpu")
        """The device of the module's parameters (the CPU's or a GPU's)."""
        # Views on the CPU; copies through (pinned) host buffers elsewhere.
        self._copies = self.device.type != "cpu" or _FORCE_COPIES
        pinned = self._copies and torch.cuda.is_available()
        self._torch_opt = None
        if optimizer is not None and not isinstance(optimizer, str):
            if not isinstance(optimizer, torch.optim.Optimizer):
                raise ValueError(f"paramserv.torch: optimizer of type {type(optimizer).__name__}: want the name of "
                                 "the ps's rule (\"adam\") or a torch.optim.Optimizer over the module's parameters")
            mine = {id(p) for _, p in named}
            for g in optimizer.param_groups:
                for p in g["params"]:
                    if id(p) not in mine:
                        raise ValueError("paramserv.torch: the optimizer holds a tensor that is not a parameter "
                                         f"of the module (shape {tuple(p.shape)}): make it over module.parameters()")
            clash = [k for k in ("learning_rate", "optimizer_options", "variable_options") if k in client_kwargs]
            if clash:
                raise ValueError(f"paramserv.torch: {', '.join(clash)} given with a torch.optim optimizer: its "
                                 "rate and options are the torch optimizer's (the ps apply its changes at rate 1.0)")
            for e in self._embeddings:
                if "optimizer" not in e.options:
                    raise ValueError(f"paramserv.torch: Embedding {e.table!r} with a torch.optim optimizer on the "
                                     "worker: give its table a rule of its own on the ps (Embedding(..., "
                                     "optimizer={'name': 'adagrad', 'learning_rate': 0.05}))")
            if client is not None and getattr(client, "_optimizer", None) != {"name": "sgd", "learning_rate": 1.0}:
                raise ValueError("paramserv.torch: a torch.optim optimizer with a client of rule "
                                 f"{getattr(client, '_optimizer', None)}: the ps must run plain SGD at rate 1.0 on "
                                 "the changes (Client(..., optimizer='sgd', learning_rate=1.0)), or leave the "
                                 "client to DistributedModule")
            self._torch_opt = optimizer
            client_kwargs["optimizer"], client_kwargs["learning_rate"] = "sgd", 1.0
        elif optimizer is not None:
            client_kwargs["optimizer"] = optimizer
        if scheduler is not None and not hasattr(scheduler, "state_dict"):
            raise ValueError(f"paramserv.torch: scheduler of type {type(scheduler).__name__}: want a "
                             "torch.optim.lr_scheduler (with state_dict and load_state_dict)")
        self._scheduler = scheduler
        self.state = state
        """Yours to save with each checkpoint: any picklable object, or a
        function returning one (called at each save)."""
        self.resumed: Any = None
        """The ``state`` saved with the checkpoint the job resumed from
        (None on a fresh start, or when that checkpoint has none)."""
        self.resumed_step = -1
        """The step of that checkpoint (-1 when the ps restored none)."""
        self._params: Dict[str, np.ndarray] = {}
        self._grads: Dict[str, np.ndarray] = {}
        # With a worker's optimizer: the values before its step.
        self._before: Dict[str, torch.Tensor] = {}
        init = {}
        for n, p in named:
            init[n] = np.ascontiguousarray(p.detach().cpu().numpy(), dtype=np.float32).copy()
            # The module's own values until the first pull: a client that
            # fails (a bad argument, no ps) leaves the module as it was.
            self._params[n] = _host_buffer(tuple(p.shape), pinned)
            self._params[n][...] = init[n]
            self._grads[n] = _host_buffer(tuple(p.shape), pinned)
            self._grads[n].fill(0)
            if self._copies:
                continue
            # The parameter's values and gradient become views of the
            # buffers the client reads and writes: no copies.
            p.data = torch.from_numpy(self._params[n])
            p.grad = torch.from_numpy(self._grads[n])
        # A GPU module's copies from the host buffers, not yet known to be
        # over (the next pull writes into them).
        self._h2d: Any = None
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
            e._device, e._pinned = self.device, pinned
        self.client.start(init=init if client.is_chief else None)
        self._sync = self.client.sync  # the cluster's mode, fixed for the job
        self._fresh = False
        self._step = self.client.step
        # Overlap only where the push's semantics allow it: asynchronous
        # training (a synchronous step must complete before the next).
        self._overlap = bool(overlap) and not self.client.sync
        # The chief saves the checkpoints that are due itself, with the
        # state of the optimizer, the scheduler and yours.
        self._saves = self.client.checkpoint_dir is not None
        if self._saves:
            self.client.defer_saves()
            self._load_resumed()

    # -- the process group's calls ----------------------------------------

    @property
    def rank(self) -> int:
        """This worker's index, 0 to world_size - 1 (``Client.rank``)."""
        return self.client.rank

    @property
    def world_size(self) -> int:
        """The number of workers (``Client.world_size``)."""
        return self.client.world_size

    @property
    def is_chief(self) -> bool:
        """Whether this worker is the chief (worker 0)."""
        return self.client.is_chief

    def barrier(self, timeout: float = 600.0) -> None:
        """Returns once every worker has called it (``Client.barrier``)."""
        self._settle()
        self.client.barrier(timeout)

    def all_reduce(self, value: Any, op: str = "sum", timeout: float = 600.0) -> Any:
        """Reduces ``value`` over every worker by ``op`` ("sum", "mean",
        "max"; ``Client.all_reduce``). A tensor (any dtype and device) is
        reduced in place, as ``torch.distributed.all_reduce`` does, and
        returned; a number gives a float; an array or a sequence, a
        float64 array."""
        if isinstance(value, torch.Tensor):
            out = self.client.all_reduce(value.detach().cpu().double().numpy(), op, timeout)
            with torch.no_grad():
                value.copy_(torch.from_numpy(out).reshape(value.shape))
            return value
        out = self.client.all_reduce(value, op, timeout)
        return float(out[0]) if np.ndim(value) == 0 else out

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
    def optimizer(self) -> Optional[torch.optim.Optimizer]:
        """The torch optimizer run on the worker, or None (the ps's rule)."""
        return self._torch_opt

    # -- checkpointed state -----------------------------------------------

    def _pack(self) -> bytes:
        """The state saved with a checkpoint, as bytes."""
        state = self.state() if callable(self.state) else self.state
        blob = {"format": 1,
                "optimizer": self._torch_opt.state_dict() if self._torch_opt is not None else None,
                "scheduler": self._scheduler.state_dict() if self._scheduler is not None else None,
                "state": state}
        buf = io.BytesIO()
        torch.save(blob, buf)
        return buf.getvalue()

    def _load_resumed(self) -> None:
        """Loads the state saved with the checkpoint the ps restored."""
        b, self.resumed_step = self.client.resume_state()
        if b is None:
            return
        # Not weights_only (torch 2.6's default): the state is any picklable
        # object, from this job's own checkpoint.
        kw = {"weights_only": False} if "weights_only" in inspect.signature(torch.load).parameters else {}
        blob = torch.load(io.BytesIO(b), map_location="cpu", **kw)
        if self._torch_opt is not None and blob.get("optimizer") is not None:
            self._torch_opt.load_state_dict(blob["optimizer"])
        if self._scheduler is not None and blob.get("scheduler") is not None:
            self._scheduler.load_state_dict(blob["scheduler"])
        self.resumed = blob.get("state")

    def _after_step(self, before: int, step: int) -> None:
        """After a step that landed: the chief's due checkpoint, with the
        state; after a recovery that rolled the ps back, the state of the
        checkpoint restored."""
        if not self._saves:
            return
        if step <= before:
            # Rolled back (a restored checkpoint): the optimizer's state
            # is ahead of the values; take the checkpoint's.
            self._load_resumed()
        if self.client.save_due():
            self.client.save_state(self._pack())

    # -- values and steps -------------------------------------------------

    def pull(self) -> int:
        """Pulls every parameter's values in place; returns the global step.
        With ``overlap``, it first waits for the push in flight."""
        self._settle()
        self._host_free()
        step = self.client.pull(self._params)
        self._to_device()
        self._fresh, self._step = True, step
        return step

    def _host_free(self) -> None:
        """Waits until the copies to the device from the host buffers are
        over, before a pull writes into them."""
        if self._h2d is not None:
            self._h2d.synchronize()
            self._h2d = None

    def _to_device(self) -> None:
        """A module on a device: copies the values pulled to it."""
        if not self._copies:
            return
        with torch.no_grad():
            for n, p in self._named:
                p.data.copy_(torch.from_numpy(self._params[n]), non_blocking=True)
        if self.device.type == "cuda":
            self._h2d = torch.cuda.Event()
            self._h2d.record()

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

    def _gather(self) -> None:
        """Puts what step() pushes into the gradient buffers: the gradients,
        or, with a worker's optimizer, the change its step makes to the
        values (before minus after, which the ps's SGD at 1.0 subtracts)."""
        opt = self._torch_opt
        if opt is not None:
            with torch.no_grad():
                for n, p in self._named:
                    if n not in self._before:
                        self._before[n] = torch.empty_like(p.data)
                    self._before[n].copy_(p.data)
            opt.step()
        with torch.no_grad():
            for n, p in self._named:
                host = torch.from_numpy(self._grads[n])
                if opt is not None:
                    host.copy_(self._before[n].sub_(p.data))
                elif self._copies:
                    if p.grad is not None:
                        host.copy_(p.grad)  # from the device: a synchronous copy
                elif p.grad is not None and p.grad.data_ptr() != host.data_ptr():
                    host.copy_(p.grad)  # something replaced .grad (set_to_none)
                if self._copies:
                    if p.grad is not None:
                        p.grad.zero_()
                elif p.grad is None or p.grad.data_ptr() != host.data_ptr():
                    p.grad = host

    def step(self) -> int:
        """Pushes the gradients of the last backward pass (and of the
        embeddings' rows) — with a worker's optimizer, first runs its
        ``step()`` and pushes the change it made — pulls the next values in
        place, zeroes the gradients, saves the chief's checkpoint when one
        is due, and returns the new global step. The rows of prefetches
        waiting for it (``Embedding.prefetch(ids, with_step=True)``, or
        held in synchronous training) are read in the same request, after
        the push, one prefetch per table."""
        rows = _merge([r for r in (e._rows() for e in self._embeddings) if r is not None])
        pulls, rode = self._riders()
        self._gather()
        if self._overlap:
            return self._step_overlapped(rows, pulls, rode)
        self._host_free()
        before = self._step
        step = self.client.push_pull(self._grads, self._params, rows=rows, pull_rows=pulls)
        if rode:
            for pf in rode:
                pf.future = _LANDED
        for g in self._grads.values():
            g.fill(0)
        self._to_device()
        self._fresh, self._step, self._under_way = True, step, False
        if self._sync:
            # The step has completed: a prefetch's rows must be read from
            # now on (Embedding.prefetch), so that sync stays exact.
            for e in self._embeddings:
                e._pull_again(rode)
        self._after_step(before, step)
        return step

    def _riders(self) -> Tuple[List[Tuple[str, np.ndarray, np.ndarray]], List[_Prefetch]]:
        """The prefetches whose pull waits for the step (Embedding.prefetch
        with_step, or held in sync mode), the oldest of each table: the
        step's push+pull reads their rows (pull_rows) and the prefetches."""
        pulls: List[Tuple[str, np.ndarray, np.ndarray]] = []
        rode: List[_Prefetch] = []
        seen = set()
        for e in self._embeddings:
            held = e._held()
            if held and e.table not in seen:
                seen.add(e.table)
                pulls.append((e.table, held[0].keys, held[0].rows))
                rode.append(held[0])
        return pulls, rode

    def _step_overlapped(self, rows: List[Tuple[str, np.ndarray, np.ndarray]],
                         pulls: List[Tuple[str, np.ndarray, np.ndarray]], rode: List[_Prefetch]) -> int:
        """step() with the round trip in the background: the push+pull
        reads this set of gradients and fills this set of values while the
        module switches to a second set (values one push older), which the
        previous push+pull filled; the next step waits for the call in
        flight before it starts its own. Returns the step of the last call
        that completed."""
        before = self._step
        if self._spare is None:
            # First step: the second set starts as the values just used.
            self._spare = ({n: a.copy() for n, a in self._params.items()},
                           {n: np.zeros_like(g) for n, g in self._grads.items()})
        else:
            self._settle()
            self._after_step(before, self._step)
        self._host_free()
        self._future = self.client.push_pull_async(self._grads, self._params, rows=rows, pull_rows=pulls)
        for pf in rode:
            pf.future = self._future
        (self._params, self._grads), self._spare = self._spare, (self._params, self._grads)
        for g in self._grads.values():
            g.fill(0)
        if self._copies:
            self._to_device()
        else:
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
        """Tells the ps this worker has finished (after the push in flight);
        the chief's final checkpoint holds the state of now."""
        self._settle()
        if self._saves and self.client.is_chief:
            self.client.save_state(self._pack(), final=True)
        self.client.done()

    def close(self) -> None:
        """Closes the client (after the push in flight); refused at once in a
        forked child, as Client.close is."""
        _check_fork()
        try:
            self._settle()
        finally:
            self.client.close()


class DistributedSampler(torch.utils.data.distributed.DistributedSampler):
    """Gives each worker its part of a dataset, reshuffled every epoch: a
    drop-in for ``torch.utils.data.distributed.DistributedSampler`` in a
    ``DataLoader`` (the same arguments, ``set_epoch``, ``__len__`` and
    ``__iter__``: it is one), whose ``num_replicas`` and ``rank`` default
    to the workers of the job (TF_CONFIG, as ``paramserv local`` sets it)
    instead of torch's process group::

        sampler = pst.DistributedSampler(dataset, shuffle=True, seed=1)
        loader = DataLoader(dataset, batch_size=64, sampler=sampler)
        for epoch in range(1, epochs + 1):
            sampler.set_epoch(epoch)      # every worker: the same permutation
            for x, y in loader: ...

    Every worker shuffles with the same seed and epoch and takes every
    ``num_replicas``-th index from its rank, so the parts do not overlap;
    ``drop_last`` as torch's. ``set_epoch(epoch, start=k)`` skips this
    worker's first k examples of the epoch: resuming mid-epoch from a
    checkpoint's state.
    """

    def __init__(self, dataset: Any, num_replicas: Optional[int] = None, rank: Optional[int] = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            n, r = _workers_from_tf_config()
            num_replicas = n if num_replicas is None else num_replicas
            rank = r if rank is None else rank
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,
                         drop_last=drop_last)
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Sets the epoch, which seeds the shuffle, and the number of this
        worker's examples of it to skip (0: the whole part)."""
        if start < 0 or start > self.num_samples:
            raise ValueError(f"paramserv.torch.DistributedSampler: start {start}: want 0..{self.num_samples}")
        super().set_epoch(epoch)
        self.start = int(start)

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(super().__iter__(), self.start, None)

    def __len__(self) -> int:
        return self.num_samples - self.start


def _workers_from_tf_config() -> Tuple[int, int]:
    """The number of workers and this task's index, from TF_CONFIG."""
    text = os.environ.get("TF_CONFIG", "")
    try:
        cfg = json.loads(text)
        workers = cfg["cluster"]["worker"]
        task = cfg["task"]
        if task.get("type") != "worker":
            raise ValueError(f"task type {task.get('type')!r}, want 'worker'")
        return len(workers), int(task["index"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError("paramserv.torch.DistributedSampler: no num_replicas and rank given, and TF_CONFIG "
                         f"({text[:80]!r}) names no worker task ({e}): pass them, or run under paramserv local") from None


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
