"""The ctypes binding over libparamserv.so (python/native)."""

from __future__ import annotations

import collections.abc
import ctypes
import json
import math
import numbers
import os
import queue
import signal
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["Client", "ParamservError"]

Shape = Union[int, Sequence[int]]

_lib = None
_lib_lock = threading.Lock()
_lib_pid = None
_FLOAT32 = np.dtype(np.float32)
# Set in a child forked (os.fork, multiprocessing) after the library was
# loaded: the calls of a step check this flag rather than ask the kernel
# for the pid (a system call, 2 us on a virtual machine); the others
# (_check_fork) ask as well.
_forked = False


def _after_fork_in_child() -> None:
    global _forked
    if _lib_pid is not None:
        _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


class ParamservError(RuntimeError):
    """A failure reported by the Go client (the ps unreachable, a start-up
    timeout, a request the ps refused)."""


def _library_path() -> str:
    path = os.environ.get("PARAMSERV_LIB")
    if path:
        return path
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libparamserv.so")


def _check_fork() -> None:
    if _forked or (_lib_pid is not None and _lib_pid != os.getpid()):
        raise ParamservError(
            "paramserv: this process was forked after the client library was loaded (a DataLoader "
            "worker?): the Go runtime does not survive a fork; call the client only from "
            "the process that made it")


def _load():
    global _lib, _lib_pid
    with _lib_lock:
        if _lib is not None:
            _check_fork()
            return _lib
        path = _library_path()
        if not os.path.exists(path):
            raise ParamservError(
                f"paramserv: the client library {path} is missing: install the package with "
                "`pip install ./python` (which builds it with Go), or set PARAMSERV_LIB")
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise ParamservError(
                f"paramserv: the client library {path} cannot be loaded ({e}): rebuild it with "
                "`pip install ./python`, or set PARAMSERV_LIB to a libparamserv.so built by "
                "`go build -buildmode=c-shared ./python/native`") from None
        i64, i32, fpp = ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)
        sigs = {
            "ps_open": (i64, [ctypes.c_char_p]),
            "ps_error": (ctypes.c_char_p, [i64]),
            "ps_worker": (i32, [i64]),
            "ps_num_workers": (i32, [i64]),
            "ps_num_ps": (i32, [i64]),
            "ps_start": (i32, [i64, fpp, i32]),
            "ps_step": (i64, [i64]),
            "ps_is_sync": (i32, [i64]),
            "ps_pull": (i32, [i64, fpp, i32, ctypes.POINTER(i64)]),
            "ps_push_pull": (i32, [i64, fpp, fpp, i32, ctypes.POINTER(i64)]),
            "ps_pull_rows": (i32, [i64, ctypes.c_char_p, ctypes.c_void_p, i64, ctypes.c_void_p]),
            "ps_push_pull_rows": (i32, [i64, fpp, fpp, i32, i32, ctypes.POINTER(ctypes.c_char_p), fpp,
                                        ctypes.POINTER(i64), fpp, ctypes.POINTER(i64)]),
            "ps_push_rows": (i32, [i64, ctypes.c_char_p, ctypes.c_void_p, i64, ctypes.c_void_p]),
            "ps_push": (i32, [i64, fpp, i32, i32, ctypes.POINTER(ctypes.c_char_p), fpp,
                              ctypes.POINTER(i64), fpp, ctypes.POINTER(i64)]),
            "ps_pull_rows_start": (i64, [i64, ctypes.c_char_p, ctypes.c_void_p, i64, ctypes.c_void_p]),
            "ps_ticket_wait": (i32, [i64, i64, ctypes.c_double]),
            "ps_ticket_error": (ctypes.c_char_p, [i64, i64]),
            "ps_ticket_free": (i32, [i64, i64]),
            "ps_ticket_step": (i64, [i64, i64]),
            "ps_push_pull_rows_start": (i64, [i64, fpp, fpp, i32, i32, ctypes.POINTER(ctypes.c_char_p), fpp,
                                              ctypes.POINTER(i64), fpp]),
            "ps_push_pull_tables": (i32, [i64, fpp, fpp, i32, i32, ctypes.POINTER(ctypes.c_char_p), fpp,
                                          ctypes.POINTER(i64), fpp, i32, ctypes.POINTER(ctypes.c_char_p), fpp,
                                          ctypes.POINTER(i64), fpp, ctypes.POINTER(i64)]),
            "ps_push_pull_call": (i32, None),  # one _PushPullCall pointer, passed with byref
            "ps_push_pull_tables_start": (i64, [i64, fpp, fpp, i32, i32, ctypes.POINTER(ctypes.c_char_p), fpp,
                                                ctypes.POINTER(i64), fpp, i32, ctypes.POINTER(ctypes.c_char_p), fpp,
                                                ctypes.POINTER(i64), fpp]),
            "ps_metrics_addr": (ctypes.c_char_p, [i64]),
            "ps_report_loss": (i32, [i64, ctypes.c_double, i64]),
            "ps_done": (i32, [i64]),
            "ps_change_rate": (i32, [i64, i64, ctypes.c_double, ctypes.c_char_p]),
            "ps_close": (i32, [i64]),
            "ps_watch_interrupts": (i32, [i32]),
            "ps_collective": (i32, [i64, ctypes.c_char_p, ctypes.c_void_p, i64, ctypes.c_void_p, ctypes.c_double]),
            "ps_defer_saves": (i32, [i64]),
            "ps_save_due": (i32, [i64]),
            "ps_save_state": (i32, [i64, ctypes.c_char_p, i64, i32]),
            "ps_resume_state": (i32, [i64, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(i64), ctypes.POINTER(i64)]),
            "ps_free": (None, [ctypes.c_void_p]),
        }
        for name, (res, args) in sigs.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _lib, _lib_pid = lib, os.getpid()
        return lib


_interrupts_watched = False


def _watch_interrupts(lib) -> None:
    """Lets Ctrl-C interrupt a call waiting in the library (a synchronous
    step waiting for the other workers, a recovery): the main thread is
    then in a ctypes call and runs Python's SIGINT handler only once the
    call returns. Python writes the number of every signal it catches to
    its wakeup fd (signal.set_wakeup_fd); made here a pipe that the library
    reads, a SIGINT cancels the calls in flight, which return, and the
    KeyboardInterrupt is raised. Done once, from the main thread, and only
    where no one else (asyncio) has set a wakeup fd."""
    global _interrupts_watched
    with _lib_lock:
        if _interrupts_watched or threading.current_thread() is not threading.main_thread():
            return
        _interrupts_watched = True
        try:
            r, w = os.pipe()
        except OSError:
            return
        try:
            os.set_blocking(w, False)
            old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(r)
            os.close(w)
            return
        if old != -1:
            signal.set_wakeup_fd(old)  # someone else's: leave it to them
            os.close(r)
            os.close(w)
            return
        if lib.ps_watch_interrupts(r) != 0:
            signal.set_wakeup_fd(-1)
            os.close(r)
            os.close(w)
            return

        def in_child() -> None:
            # A forked child's signals are not the library's (it does not
            # run there).
            try:
                prev = signal.set_wakeup_fd(-1)
                if prev != w:
                    signal.set_wakeup_fd(prev)  # not ours: put it back
            except (ValueError, OSError):
                pass

        os.register_at_fork(after_in_child=in_child)


def _is_int(x: Any) -> bool:
    """Whether x is an integer (a Python or numpy one), not a bool."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_number(x: Any) -> bool:
    """Whether x is a real number (Python's or numpy's), not a bool."""
    return isinstance(x, (numbers.Real, np.floating, np.integer)) and not isinstance(x, (bool, np.bool_))


def _env_number(name: str, kind: Any, default: Any) -> Any:
    """The number in environment variable name (set by ``paramserv local
    -- CMD``), or default when it is unset or empty."""
    val = os.environ.get(name, "")
    if not val:
        return default
    try:
        return kind(val)
    except ValueError:
        raise ValueError(f"paramserv: environment variable {name}={val!r}: want a number") from None


def _shape(name: str, shape: Shape) -> Tuple[int, ...]:
    if _is_int(shape):
        shape = (int(shape),)
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable) or not all(_is_int(d) for d in shape):
        raise ValueError(f"paramserv: variable {name!r}: shape {shape!r}: want a tuple of ints")
    dims = tuple(int(d) for d in shape)
    if any(d < 1 for d in dims):
        raise ValueError(f"paramserv: variable {name!r}: shape {dims}: want every dimension >= 1 (no zero or negative one)")
    return dims


# The keys optimizer_options and table_options[name] take (the JSON fields
# of the Go side's optimizer and table).
_OPTIMIZERS = ("sgd", "momentum", "adagrad", "adagrad_da", "adadelta", "adam", "adamw", "rmsprop",
               "ftrl", "proximal_sgd", "proximal_adagrad", "lamb")
_OPTIMIZER_OPTIONS = ("momentum", "nesterov", "initial_accumulator", "beta1", "beta2", "epsilon",
                      "ftrl_beta", "l1", "l2", "l2_shrinkage", "learning_rate_power", "rho", "centered", "weight_decay",
                      "schedule")
_TABLE_OPTIONS = ("init", "init_stddev", "seed", "min_count", "evict_after_steps", "optimizer")
_VARIABLE_OPTIONS = ("optimizer",)


def _own_optimizer(what: str, o: Any) -> dict:
    """Checks a variable's or table's own rule: a dict with "name",
    "learning_rate" and optimizer_options' keys; returns it as sent."""
    if not isinstance(o, Mapping):
        raise ValueError(f"paramserv: {what}: got {type(o).__name__}, want a dict with name, learning_rate and options")
    if o.get("name") not in _OPTIMIZERS:
        raise ValueError(f"paramserv: {what}: name {o.get('name')!r}: want one of {', '.join(_OPTIMIZERS)}")
    lr = o.get("learning_rate")
    if not _is_number(lr) or not lr > 0 or not math.isfinite(lr):
        raise ValueError(f"paramserv: {what}: learning_rate {lr!r}: want a finite number > 0")
    unknown = [k for k in o if k not in ("name", "learning_rate") + _OPTIMIZER_OPTIONS]
    if unknown:
        raise ValueError(f"paramserv: {what} {unknown}: unknown; want name, learning_rate and some of {', '.join(_OPTIMIZER_OPTIONS)}")
    return dict(o)


class _PushPullCall(ctypes.Structure):
    """ps_call (python/native): ps_push_pull_tables' arguments, filled once
    and changed where a call's differ from the call before, so that a step
    passes the library one pointer."""

    _fields_ = [
        ("handle", ctypes.c_int64),
        ("grads", ctypes.POINTER(ctypes.c_void_p)),
        ("params", ctypes.POINTER(ctypes.c_void_p)),
        ("n", ctypes.c_int32),
        ("nt", ctypes.c_int32),
        ("tables", ctypes.POINTER(ctypes.c_char_p)),
        ("keys", ctypes.POINTER(ctypes.c_void_p)),
        ("nkeys", ctypes.POINTER(ctypes.c_int64)),
        ("row_grads", ctypes.POINTER(ctypes.c_void_p)),
        ("np", ctypes.c_int32),
        ("ptables", ctypes.POINTER(ctypes.c_char_p)),
        ("pkeys", ctypes.POINTER(ctypes.c_void_p)),
        ("pnkeys", ctypes.POINTER(ctypes.c_int64)),
        ("pout", ctypes.POINTER(ctypes.c_void_p)),
        ("step", ctypes.c_int64),
    ]


def _check_array(what: str, a: Any, shape: Tuple[int, ...], writable: bool) -> np.ndarray:
    """Returns a if it is a C-contiguous float32 array of shape, else raises
    a ValueError naming what and what was expected."""
    if not isinstance(a, np.ndarray):
        raise ValueError(f"paramserv: {what}: got {type(a).__name__}, want a numpy float32 array of shape {shape}")
    if a.dtype != np.float32:
        raise ValueError(f"paramserv: {what}: dtype {a.dtype}, want float32 (shape {shape})")
    if a.shape != shape:
        raise ValueError(f"paramserv: {what}: shape {a.shape}, want {shape}")
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError(f"paramserv: {what}: not C-contiguous: pass np.ascontiguousarray(...) or a fresh array")
    if writable and not a.flags["WRITEABLE"]:
        raise ValueError(f"paramserv: {what}: read-only, want a writable array (values are written into it)")
    return a


class Client:
    """One worker's connection to the parameter servers.

    Every worker of a job declares the same ``variables`` (name: shape, in
    order) and ``tables`` (name: row width); the chief (worker 0) also
    chooses the optimizer and the mode for the whole cluster, applied on
    the ps. The cluster comes from ``tf_config`` (a dict or a JSON string in
    TF_CONFIG's form) or, by default, the TF_CONFIG environment variable.

    Example::

        c = paramserv.Client(variables={"w": (784, 10), "b": 10},
                             optimizer="adam", learning_rate=1e-3)
        c.start(init=initial_values if c.is_chief else None)
        c.pull(params)                 # fills params[name] in place
        step = c.push_pull(grads, params)
        c.done(); c.close()

    Arrays are numpy float32, C-contiguous, of the declared shapes; they are
    read and written in place during a call (no copies). A Client is safe to
    share between threads (calls are serialised) but not across fork().
    """

    def __init__(
        self,
        variables: Mapping[str, Shape],
        tables: Optional[Mapping[str, int]] = None,
        optimizer: str = "adam",
        learning_rate: float = 0.001,
        sync: bool = False,
        replicas_to_aggregate: Optional[int] = None,
        tf_config: Union[None, str, Mapping[str, Any]] = None,
        *,
        max_staleness: int = 0,
        split_bytes: int = 0,
        optimizer_options: Optional[Mapping[str, Any]] = None,
        table_options: Optional[Mapping[str, Mapping[str, Any]]] = None,
        variable_options: Optional[Mapping[str, Mapping[str, Any]]] = None,
        startup_timeout: float = 300.0,
        recovery_timeout: float = 300.0,
        checkpoint_dir: Optional[str] = None,
        save_steps: int = 0,
        save_secs: float = 0.0,
        quiet: bool = False,
        tls_dir: Optional[str] = None,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        tls_ca: Optional[str] = None,
        auth_token_file: Optional[str] = None,
        metrics_addr: Optional[str] = None,
        summary_dir: Optional[str] = None,
        save_summaries_steps: Optional[int] = None,
    ) -> None:
        """Checks the declaration and reads the cluster; connects nothing yet.

        ``optimizer_options`` adds the rule's other hyper-parameters (momentum,
        beta1, beta2, epsilon, l1, l2, rho, weight_decay, ...) and its
        learning-rate ``schedule`` on the global step (e.g.
        ``"warmup(steps=500)+step(step_size=1000,gamma=0.7)"``; every rule,
        option and schedule is in docs/OPTIMIZERS.md); ``table_options[name]`` a table's
        init ("zeros" or "normal"), init_stddev, seed, min_count and
        evict_after_steps, and its own rule: ``"optimizer": {"name": "adagrad",
        "learning_rate": 0.05, ...}`` (the keys of optimizer_options);
        ``variable_options[name]`` a variable's own rule the same way
        (embeddings on Adagrad, dense layers on Adam). With ``checkpoint_dir`` (the directory every ps
        was started with as --checkpoint_dir) the chief saves a checkpoint
        every ``save_steps`` global steps and/or ``save_secs`` seconds (600 s
        if neither is given) and at done(); after a ps restarts, every
        worker waits for it and goes on from the restored step, as the
        built-in models do. ``tls_dir`` (or ``tls_cert``, ``tls_key`` and
        ``tls_ca``) and ``auth_token_file`` authenticate every connection as
        the flags of the same names do on the ps; when not given they are
        read from PARAMSERV_TLS_DIR, PARAMSERV_TLS_CERT, PARAMSERV_TLS_KEY,
        PARAMSERV_TLS_CA and PARAMSERV_AUTH_TOKEN_FILE, which ``paramserv
        local -- CMD`` sets from its own flags. ``metrics_addr`` (HOST:PORT,
        port 0 for a free one) serves this worker's Prometheus metrics at
        http://HOST:PORT/metrics and a status page at / from start() to
        close(): every call counted and timed with its bytes, the steps,
        and the losses given to report_loss(); when not given it is read
        from PARAMSERV_METRICS_ADDR, which ``paramserv local -- CMD`` sets
        for each worker ("off": none). With ``summary_dir`` the chief writes
        TensorBoard event files there (events.out.tfevents.*): every
        ``save_summaries_steps`` global steps (100) the latest loss given
        to report_loss() (none if none was given), global_step/sec,
        examples/sec (of the examples given to report_loss()) and the
        rate of the job's schedule. ``checkpoint_dir``, ``save_steps`` and
        ``save_secs`` (when both are 0), ``summary_dir`` and
        ``save_summaries_steps``, when not given, are read from
        PARAMSERV_CHECKPOINT_DIR, PARAMSERV_SAVE_STEPS,
        PARAMSERV_SAVE_SECS, PARAMSERV_SUMMARY_DIR and
        PARAMSERV_SAVE_SUMMARIES_STEPS, which ``paramserv local -- CMD``
        sets from its flags of the same names (--save_model_secs for
        save_secs), so they are given once. Raises ValueError for a bad
        declaration and ParamservError for a bad cluster or unreadable
        certificates.
        """
        if not isinstance(variables, Mapping):
            raise ValueError(f"paramserv: variables: got {type(variables).__name__}, want a dict of name: shape")
        self._shapes: Dict[str, Tuple[int, ...]] = {}
        # id(array): (array, its data address), for _buffers.
        self._pointers: Dict[int, Tuple[np.ndarray, int]] = {}
        for name, shape in variables.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"paramserv: variable name {name!r}: want a non-empty string")
            self._shapes[name] = _shape(name, shape)
        self._names = list(self._shapes)
        self._shape_list = [self._shapes[n] for n in self._names]
        self._dims: Dict[str, int] = {}
        if tables is not None and not isinstance(tables, Mapping):
            raise ValueError(f"paramserv: tables: got {type(tables).__name__}, want a dict of name: dim")
        for name, dim in (tables or {}).items():
            if not isinstance(name, str) or not name or "\0" in name:
                raise ValueError(f"paramserv: table name {name!r}: want a non-empty string without NUL")
            if not _is_int(dim) or dim < 1:
                raise ValueError(f"paramserv: table {name!r}: dim {dim!r}, want an int >= 1")
            self._dims[name] = int(dim)
        if not _is_number(learning_rate) or not learning_rate > 0 or not math.isfinite(learning_rate):
            raise ValueError(f"paramserv: learning_rate {learning_rate!r}: want a finite number > 0")
        if not isinstance(optimizer, str) or optimizer not in _OPTIMIZERS:
            raise ValueError(f"paramserv: optimizer {optimizer!r}: want one of {', '.join(_OPTIMIZERS)}")
        unknown = [k for k in (optimizer_options or {}) if k not in _OPTIMIZER_OPTIONS]
        if unknown:
            raise ValueError(f"paramserv: optimizer_options {unknown}: unknown; want some of {', '.join(_OPTIMIZER_OPTIONS)}")
        for name, opts in (table_options or {}).items():
            if name not in self._dims:
                raise ValueError(f"paramserv: table_options[{name!r}]: no such table; the tables are {list(self._dims)}")
            unknown = [k for k in (opts or {}) if k not in _TABLE_OPTIONS]
            if unknown:
                raise ValueError(f"paramserv: table_options[{name!r}] {unknown}: unknown; want some of {', '.join(_TABLE_OPTIONS)}")
            if "optimizer" in (opts or {}):
                _own_optimizer(f"table_options[{name!r}]['optimizer']", opts["optimizer"])
        for name, opts in (variable_options or {}).items():
            if name not in self._shapes:
                raise ValueError(f"paramserv: variable_options[{name!r}]: no such variable; the variables are {list(self._shapes)}")
            unknown = [k for k in (opts or {}) if k not in _VARIABLE_OPTIONS]
            if unknown:
                raise ValueError(f"paramserv: variable_options[{name!r}] {unknown}: unknown; want some of {', '.join(_VARIABLE_OPTIONS)}")
            if "optimizer" in (opts or {}):
                _own_optimizer(f"variable_options[{name!r}]['optimizer']", opts["optimizer"])
        if replicas_to_aggregate is not None and (not _is_int(replicas_to_aggregate) or replicas_to_aggregate < 1):
            raise ValueError(f"paramserv: replicas_to_aggregate {replicas_to_aggregate!r}: want an int >= 1 or None")
        if checkpoint_dir is None:
            checkpoint_dir = os.environ.get("PARAMSERV_CHECKPOINT_DIR") or None
        if summary_dir is None:
            summary_dir = os.environ.get("PARAMSERV_SUMMARY_DIR") or None
        if save_steps == 0 and save_secs == 0:
            save_steps = _env_number("PARAMSERV_SAVE_STEPS", int, 0)
            save_secs = _env_number("PARAMSERV_SAVE_SECS", float, 0.0)
        if save_summaries_steps is None:
            save_summaries_steps = _env_number("PARAMSERV_SAVE_SUMMARIES_STEPS", int, 100)
        for what, val in (("max_staleness", max_staleness), ("split_bytes", split_bytes), ("save_steps", save_steps)):
            if not _is_int(val) or val < 0:
                raise ValueError(f"paramserv: {what} {val!r}: want an int >= 0")
        if not _is_int(save_summaries_steps) or save_summaries_steps < 1:
            raise ValueError(f"paramserv: save_summaries_steps {save_summaries_steps!r}: want an int >= 1")
        for what, val in (("startup_timeout", startup_timeout), ("recovery_timeout", recovery_timeout),
                          ("save_secs", save_secs)):
            if not _is_number(val) or val < 0 or not math.isfinite(val):
                raise ValueError(f"paramserv: {what} {val!r}: want a finite number of seconds >= 0")
        if isinstance(tf_config, Mapping):
            tf_config = json.dumps(tf_config)
        elif tf_config is not None and not isinstance(tf_config, str):
            raise ValueError(f"paramserv: tf_config: got {type(tf_config).__name__}, want a dict, a JSON string or None")
        source = "the tf_config argument"
        if tf_config is None:
            # Read here, not by Go: the Go runtime copies the environment
            # when the library loads and misses later changes to os.environ.
            tf_config, source = os.environ.get("TF_CONFIG", ""), "the TF_CONFIG environment variable"
        opt = {"name": optimizer, "learning_rate": float(learning_rate)}
        opt.update(optimizer_options or {})
        cfg = {
            "tf_config": tf_config or "",
            "tf_config_source": source,
            "variables": [dict({"name": n, "shape": list(s)}, **dict((variable_options or {}).get(n, {})))
                          for n, s in self._shapes.items()],
            "tables": [dict({"name": n, "dim": d}, **dict((table_options or {}).get(n, {})))
                       for n, d in self._dims.items()],
            "optimizer": opt,
            "sync": bool(sync),
            "replicas_to_aggregate": int(replicas_to_aggregate or 0),
            "max_staleness": int(max_staleness),
            "split_bytes": int(split_bytes),
            "startup_timeout_s": float(startup_timeout),
            "recovery_timeout_s": float(recovery_timeout),
            "checkpoint_dir": os.path.abspath(checkpoint_dir) if checkpoint_dir else "",
            "save_steps": int(save_steps),
            "save_secs": float(save_secs),
            "summary_dir": os.path.abspath(summary_dir) if summary_dir else "",
            "save_summaries_steps": int(save_summaries_steps),
            "quiet": bool(quiet),
        }
        for key, val in (("tls_dir", tls_dir), ("tls_cert", tls_cert), ("tls_key", tls_key),
                         ("tls_ca", tls_ca), ("auth_token_file", auth_token_file)):
            if val is None:
                val = os.environ.get("PARAMSERV_" + key.upper(), "")
            cfg[key] = os.path.abspath(val) if val else ""
        if metrics_addr is None:
            metrics_addr = os.environ.get("PARAMSERV_METRICS_ADDR", "")
        if not isinstance(metrics_addr, str):
            raise ValueError(f"paramserv: metrics_addr {metrics_addr!r}: want \"HOST:PORT\", \"off\" or None")
        cfg["metrics_addr"] = "" if metrics_addr == "off" else metrics_addr
        self._lib = _load()
        _watch_interrupts(self._lib)
        self._h = self._lib.ps_open(json.dumps(cfg).encode())
        self._lock = threading.Lock()
        # Calls running on goroutines (push_pull_async, pull_rows_async) not
        # yet known to be over, by ticket; apart from the calls' _lock.
        self._calls_lock = threading.Lock()
        self._calls: Dict[int, "_CallFuture"] = {}
        self._completer = _Completer()
        self._closed = False
        err = self._lib.ps_error(self._h)
        if err:
            msg = err.decode()
            self._lib.ps_close(self._h)
            self._closed = True
            raise ParamservError(msg)
        self.worker: int = self._lib.ps_worker(self._h)
        """This worker's index; 0 is the chief."""
        self.num_workers: int = self._lib.ps_num_workers(self._h)
        self.num_ps: int = self._lib.ps_num_ps(self._h)
        if sync and replicas_to_aggregate is not None and replicas_to_aggregate > self.num_workers:
            self._lib.ps_close(self._h)
            self._closed = True
            raise ValueError(f"paramserv: replicas_to_aggregate {replicas_to_aggregate}: more than the cluster's "
                             f"{self.num_workers} workers")
        self._started = False
        self._live = False  # started and not closed: what a call checks first
        self._done = False
        # push_pull's arguments for the library, kept from call to call:
        # the struct, the (arrays, pointers) pairs of _dense it holds, and
        # whether it holds rows and pulled rows (all guarded by _lock).
        self._call = _PushPullCall(handle=self._h, n=len(self._names))
        self._call_ref = ctypes.byref(self._call)
        self._call_fn = self._lib.ps_push_pull_call
        self._call_g: Any = None
        self._call_p: Any = None
        self._call_rows = self._call_pulls = False
        # The buffers of the latest grads and params, as _dense returns them.
        self._seen_g: Any = None
        self._seen_p: Any = None
        self._table_names = {n: n.encode() for n in self._dims}
        self._checkpoint_dir: Optional[str] = cfg["checkpoint_dir"] or None
        self._optimizer: Dict[str, Any] = opt  # the job's rule, as sent

    # -- properties -------------------------------------------------------

    @property
    def is_chief(self) -> bool:
        """Whether this worker is the chief (worker 0), which initialises the ps."""
        return self.worker == 0

    @property
    def rank(self) -> int:
        """This worker's index among the workers, 0 to world_size - 1 (as
        ``torch.distributed.get_rank()``); 0 is the chief. The same as
        ``worker``."""
        return self.worker

    @property
    def world_size(self) -> int:
        """The number of workers (as ``torch.distributed.get_world_size()``;
        the ps do not count). The same as ``num_workers``."""
        return self.num_workers

    @property
    def checkpoint_dir(self) -> Optional[str]:
        """The checkpoint directory (absolute), or None."""
        return self._checkpoint_dir

    @property
    def variables(self) -> Dict[str, Tuple[int, ...]]:
        """The declared variables, name: shape, in order."""
        return dict(self._shapes)

    @property
    def tables(self) -> Dict[str, int]:
        """The declared sparse tables, name: row width."""
        return dict(self._dims)

    @property
    def step(self) -> int:
        """The global step of the values last pulled."""
        self._need_started()
        return int(self._lib.ps_step(self._h))

    @property
    def sync(self) -> bool:
        """Whether the cluster trains synchronously (as the ps say, after start)."""
        self._need_started()
        return self._lib.ps_is_sync(self._h) == 1

    @property
    def metrics_addr(self) -> Optional[str]:
        """The address (HOST:PORT) this worker's metrics are served at after
        start(), or None when it serves none."""
        self._need_started()
        with self._lock:
            a = self._lib.ps_metrics_addr(self._h)
        return a.decode() if a else None

    # -- helpers ----------------------------------------------------------

    def _need_started(self) -> None:
        """Raises unless the client is started and not closed, in the process
        that made it (a call that checks ``_forked or not self._live``
        itself calls it only when that is true)."""
        if self._live and not _forked:
            return
        _check_fork()
        if self._closed:
            raise ParamservError("paramserv: the client is closed")
        if not self._started:
            raise ParamservError("paramserv: not started: call start() first")

    def _raise(self) -> None:
        err = self._lib.ps_error(self._h)
        raise ParamservError(err.decode() if err else "paramserv: failed (no message)")

    def _buffers(self, arrays: Mapping[str, np.ndarray], what: str, writable: bool):
        if type(arrays) is not dict and not isinstance(arrays, collections.abc.Mapping):
            raise ValueError(f"paramserv: {what}: got {type(arrays).__name__}, want a dict of name: float32 array")
        if len(arrays) != len(self._names) or any(n not in self._shapes for n in arrays):
            extra = [n for n in arrays if n not in self._shapes]
            missing = [n for n in self._names if n not in arrays]
            raise ValueError(f"paramserv: {what}: unknown variables {extra} and missing {missing}; "
                             f"want exactly {self._names}")
        ptrs = (ctypes.c_void_p * len(self._names))()
        known = self._pointers
        for i, n in enumerate(self._names):
            a = arrays[n]
            # The usual case, checked inline: a float32 ndarray of the
            # declared shape (the full check below names what is wrong).
            if (type(a) is not np.ndarray or a.dtype is not _FLOAT32 or a.shape != self._shapes[n]
                    or not a.flags.c_contiguous or (writable and not a.flags.writeable)):
                a = _check_array(f"{what}[{n!r}]", a, self._shapes[n], writable)
            # A program passes the same buffers every step: their addresses
            # are remembered (the reference held keeps an array from being
            # resized in place, which numpy refuses while it is referenced).
            hit = known.get(id(a))
            if hit is not None and hit[0] is a:
                ptrs[i] = hit[1]
                continue
            ptrs[i] = a.ctypes.data
            if len(known) >= 4 * len(self._names) + 8:
                known.clear()
            known[id(a)] = (a, ptrs[i])
        return ptrs

    def _dense(self, arrays: Mapping[str, np.ndarray], what: str, writable: bool, last: Any) -> Any:
        """_buffers with the buffers of the call before: last is that call's
        (arrays in declared order, pointers), returned as it is when arrays
        holds the same arrays and they pass _buffers' checks still (an
        array is not resized while the client holds it, so its data stays
        where it was). Else it returns the new pair."""
        if last is not None:
            held = last[0]
            try:
                if len(arrays) == len(held):
                    for n, shape, a in zip(self._names, self._shape_list, held):
                        b = arrays[n]
                        if (b is not a or b.dtype is not _FLOAT32 or b.shape != shape
                                or not (f := b.flags).c_contiguous or (writable and not f.writeable)):
                            break
                    else:
                        return last
            except Exception:  # not a mapping, a name missing: _buffers says what is wrong
                pass
        ptrs = self._buffers(arrays, what, writable)
        return [arrays[n] for n in self._names], ptrs

    # -- the calls --------------------------------------------------------

    def start(self, init: Optional[Mapping[str, np.ndarray]] = None) -> int:
        """Connects to every ps and waits for them (up to startup_timeout).

        The chief passes ``init`` (name: float32 array of the declared
        shape) and initialises the ps, or finds them initialised already
        (a restarted chief, a restored checkpoint) and goes on from their
        step; the other workers pass nothing and wait for the chief.
        Returns the global step.
        """
        _check_fork()
        if self._closed:
            raise ParamservError("paramserv: the client is closed")
        if self._started:
            raise ParamservError("paramserv: already started")
        if init is None and self.is_chief:
            raise ValueError("paramserv: start: the chief (worker 0) must pass init={name: float32 array}")
        ptrs, n = None, 0
        if init is not None:
            ptrs, n = self._buffers(init, "init", writable=False), len(self._names)
        with self._lock:
            if self._lib.ps_start(self._h, ptrs, n) != 0:
                self._raise()
        self._started = True
        self._live = not self._closed
        return self.step

    def pull(self, params: Mapping[str, np.ndarray]) -> int:
        """Reads every variable into ``params[name]`` (in place) and returns
        the global step of the values read."""
        p = self._seen_p = self._dense(params, "params", True, self._seen_p)
        if _forked or not self._live:
            self._need_started()
        step = ctypes.c_int64()
        with self._lock:
            if self._lib.ps_pull(self._h, p[1], len(self._names), ctypes.byref(step)) != 0:
                self._raise()
        return step.value

    def push_pull(self, grads: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray],
                  rows: Optional[Sequence[Tuple[str, np.ndarray, np.ndarray]]] = None,
                  pull_rows: Optional[Sequence[Tuple[str, np.ndarray, np.ndarray]]] = None) -> int:
        """Pushes ``grads`` (computed at the values last pulled) and pulls the
        next values into ``params`` in place, in one round trip per ps.

        ``rows`` are gradients of sparse rows pushed in the same request, as
        ``(table, keys, grads)`` tuples (keys distinct uint64, grads float32
        of shape (len(keys), dim)): they count as part of this push, where a
        ``push_rows`` of their own would be a push of its own (in sync mode
        it would take this worker's place in the step).

        ``pull_rows`` are rows read in the same request, as ``(table, keys,
        out)`` tuples (keys distinct uint64, ``out`` a writable float32
        array of shape (len(keys), dim), filled in place): what
        ``pull_rows(table, keys, out)`` would read after this call, since
        they are read once the push is applied (in sync mode once the step
        has completed). A worker pushes its batch's row gradients and pulls
        the next batch's rows in one round trip instead of two calls::

            step = c.push_pull(grads, params, rows=[("emb", keys, row_grads)],
                               pull_rows=[("emb", next_keys, next_rows)])

        Each table appears at most once in ``rows`` and once in
        ``pull_rows``; a table may be in both, with the same keys or others.

        In sync mode it returns once the step the push takes part in has
        completed. The ps apply the optimizer. Returns the new global step.
        After a ps failure the client waits for the ps to recover, pulls,
        and returns the step it went on from (that push is lost). A
        gradient holding a NaN or an Inf is refused whole (ParamservError):
        nothing is applied, on any ps.
        """
        g = self._seen_g = self._dense(grads, "grads", False, self._seen_g)
        p = self._seen_p = self._dense(params, "params", True, self._seen_p)
        r = self._row_args(rows) if rows else None
        pr = self._pull_rows_args(pull_rows) if pull_rows else None
        if _forked or not self._live:
            self._need_started()
        with self._lock:
            # The struct changes only where this call differs from the one
            # before: a step passes the library one pointer.
            c = self._call
            if self._call_g is not g:
                c.grads, self._call_g = g[1], g
            if self._call_p is not p:
                c.params, self._call_p = p[1], p
            if r is not None:
                c.nt, c.tables, c.keys, c.nkeys, c.row_grads = r
                self._call_rows = True
            elif self._call_rows:
                c.nt, c.tables, c.keys, c.nkeys, c.row_grads = 0, None, None, None, None
                self._call_rows = False
            if pr is not None:
                c.np, c.ptables, c.pkeys, c.pnkeys, c.pout = pr
                self._call_pulls = True
            elif self._call_pulls:
                c.np, c.ptables, c.pkeys, c.pnkeys, c.pout = 0, None, None, None, None
                self._call_pulls = False
            if self._call_fn(self._call_ref) != 0:
                self._raise()
            return c.step

    def push(self, grads: Mapping[str, np.ndarray],
             rows: Optional[Sequence[Tuple[str, np.ndarray, np.ndarray]]] = None) -> int:
        """Pushes ``grads`` (computed at the values last pulled) as this
        worker's step, and reads no values back: ``push_pull`` without its
        pull, for a program that calls ``pull`` when it needs the values.

        ``rows`` are as for ``push_pull``. In sync mode it returns once the
        step the push takes part in has completed (the next ``pull`` reads
        its values). Returns the new global step. After a ps failure the
        client waits for the ps to recover and returns the step it went on
        from (that push is lost). A gradient holding a NaN or an Inf is
        refused whole (ParamservError).
        """
        g = self._seen_g = self._dense(grads, "grads", False, self._seen_g)
        nt, names, keys, nkeys, vals = self._row_args(rows) if rows else (0, None, None, None, None)
        if _forked or not self._live:
            self._need_started()
        step = ctypes.c_int64()
        with self._lock:
            if self._lib.ps_push(self._h, g[1], len(self._names), nt, names, keys, nkeys, vals, ctypes.byref(step)) != 0:
                self._raise()
        return step.value

    def _push_pull_args(self, grads, params, rows):
        """The C arguments of a push+pull after the handle, checked (params
        None: a push alone)."""
        g = self._buffers(grads, "grads", writable=False)
        p = None if params is None else self._buffers(params, "params", writable=True)
        if not rows:
            return g, p, len(self._names), 0, None, None, None, None
        return (g, p, len(self._names)) + self._row_args(rows)

    def _row_args(self, rows):
        """The C arguments of a push's rows (nt, tables, keys, nkeys,
        grads), checked."""
        rows = list(rows)
        nt = len(rows)
        names = (ctypes.c_char_p * max(nt, 1))()
        keys, vals = (ctypes.c_void_p * max(nt, 1))(), (ctypes.c_void_p * max(nt, 1))()
        nkeys = (ctypes.c_int64 * max(nt, 1))()
        for i, r in enumerate(rows):
            try:
                table, k, v = r
            except (TypeError, ValueError):
                raise ValueError(f"paramserv: push_pull rows[{i}]: want a (table, keys, grads) tuple") from None
            keys[i], nkeys[i], vals[i] = self._rows(table, k, v, "push_pull rows", writable=False)
            names[i] = self._table_names[table]
        return nt, names, keys, nkeys, vals

    def _pull_rows_args(self, pull_rows):
        """The C arguments of a push+pull's pulled rows, checked."""
        if not pull_rows:
            return 0, None, None, None, None
        pull_rows = list(pull_rows)
        nt = len(pull_rows)
        names = (ctypes.c_char_p * max(nt, 1))()
        keys, vals = (ctypes.c_void_p * max(nt, 1))(), (ctypes.c_void_p * max(nt, 1))()
        nkeys = (ctypes.c_int64 * max(nt, 1))()
        seen = set()
        for i, r in enumerate(pull_rows):
            try:
                table, k, v = r
            except (TypeError, ValueError):
                raise ValueError(f"paramserv: push_pull pull_rows[{i}]: want a (table, keys, out) tuple") from None
            if table in seen:
                raise ValueError(f"paramserv: push_pull pull_rows: table {table!r} twice: give each table once, with all its keys")
            seen.add(table)
            keys[i], nkeys[i], vals[i] = self._rows(table, k, v, "push_pull pull_rows", writable=True)
            names[i] = self._table_names[table]
        return nt, names, keys, nkeys, vals

    def _rows(self, table: str, keys: np.ndarray, values: np.ndarray, what: str, writable: bool):
        if table not in self._dims:
            raise ValueError(f"paramserv: unknown table {table!r}: want one of {list(self._dims)}")
        if not isinstance(keys, np.ndarray) or keys.dtype != np.uint64 or keys.ndim != 1 or not keys.flags["C_CONTIGUOUS"]:
            desc = f"{keys.dtype} array of shape {keys.shape}" if isinstance(keys, np.ndarray) else type(keys).__name__
            raise ValueError(f"paramserv: {what} keys of table {table!r}: got {desc}, want a contiguous 1-D uint64 array")
        dim = self._dims[table]
        _check_array(f"{what} of table {table!r}", values, (len(keys), dim), writable)
        return keys.ctypes.data, len(keys), values.ctypes.data

    def pull_rows(self, table: str, keys: np.ndarray, out: np.ndarray) -> None:
        """Reads the rows of ``keys`` (distinct, uint64) of ``table`` into
        ``out`` (float32, shape (len(keys), dim)), in place. Rows not yet
        touched are created by the table's initializer."""
        k, n, v = self._rows(table, keys, out, "pull_rows", writable=True)
        self._need_started()
        with self._lock:
            if self._lib.ps_pull_rows(self._h, table.encode(), k, n, v) != 0:
                self._raise()

    def push_rows(self, table: str, keys: np.ndarray, grads: np.ndarray) -> None:
        """Pushes the gradients ``grads`` (float32, shape (len(keys), dim)) of
        the rows of ``keys`` (distinct, uint64) of ``table``, as a push of its
        own: in sync mode it takes this worker's place in the step, so pass
        rows to ``push_pull`` to push them with the dense gradients."""
        k, n, v = self._rows(table, keys, grads, "push_rows", writable=False)
        self._need_started()
        with self._lock:
            if self._lib.ps_push_rows(self._h, table.encode(), k, n, v) != 0:
                self._raise()

    def push_pull_async(self, grads: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray],
                        rows: Optional[Sequence[Tuple[str, np.ndarray, np.ndarray]]] = None,
                        pull_rows: Optional[Sequence[Tuple[str, np.ndarray, np.ndarray]]] = None) -> "Future[int]":
        """Starts ``push_pull`` in the background and returns at once with a
        ``concurrent.futures.Future`` of the new global step, so that the
        next batch's computation overlaps the round trip. It runs after
        the calls started before it and before those started after it,
        with no Python thread and not the GIL: in asynchronous training
        the request is sent now, from this thread, and the answers are
        read by the first to wait for them (``result()``, the next call of
        this client, or a goroutine of the Go library when ``done()`` or a
        timeout asks), so no other thread takes part in the common
        ``result()`` path; in sync mode (where the answers wait for the
        step to complete) it runs on a goroutine of the Go library.
        Until the future is done, ``grads`` and the rows are being read and
        ``params`` and the ``pull_rows`` outputs written: leave them alone,
        e.g. compute into a second set of buffers (the client holds
        references to them until then).
        ``future.result()`` raises what ``push_pull`` would, bad buffers
        included. The future learns that the call is over when asked
        (``result()``, ``exception()``, ``done()``); a future waited on
        without asking (a done-callback, ``concurrent.futures.wait``,
        ``as_completed``) is completed by a thread of the client when the
        call returns, so they work as with any future.

        Example::

            fut = c.push_pull_async(grads, params_next)
            loss = compute(params_now, grads_spare)   # overlaps the round trip
            step = fut.result()
        """
        self._need_started()
        try:
            args = self._push_pull_args(grads, params, rows) + self._pull_rows_args(pull_rows)
        except ValueError as e:
            fut: Future = Future()
            fut.set_exception(e)
            return fut
        return self._start(self._lib.ps_push_pull_tables_start(self._h, *args), (grads, params, rows, pull_rows, args), None)

    def pull_rows_async(self, table: str, keys: np.ndarray, out: np.ndarray) -> "Future[np.ndarray]":
        """Starts ``pull_rows(table, keys, out)`` in the background and returns
        at once with a ``concurrent.futures.Future`` whose result is ``out``,
        filled, so that a future batch's rows travel while this one computes.

        The pull runs on a goroutine of the Go library, which needs no
        Python thread and not the GIL: it goes on while this thread runs
        Python code. ``keys`` and ``out`` are checked now (a ValueError, as
        pull_rows raises); the client holds references to both until the
        pull has returned, so they stay alive even if the future is
        dropped, but until then ``keys`` is being read and ``out`` written:
        leave them alone. ``future.result()`` raises what ``pull_rows``
        would: a ParamservError with the Go client's message. The future
        completes as push_pull_async's does.

        Every call made after this one (from any thread, push_pull_async's
        too) runs after the pull: the rows are read after the calls
        already in flight and before a push made later is applied.

        Example::

            fut = c.pull_rows_async("emb", next_keys, next_rows)
            loss = compute(rows)       # overlaps the round trip
            c.push_pull(grads, params, rows=[("emb", keys, row_grads)])
            rows = fut.result()        # next_rows, filled
        """
        k, n, v = self._rows(table, keys, out, "pull_rows_async", writable=True)
        self._need_started()
        return self._start(self._lib.ps_pull_rows_start(self._h, table.encode(), k, n, v), (keys, out), out)

    def _start(self, ticket: int, buffers: Any, result: Any) -> "Future[Any]":
        """The future of a call started on a goroutine (its ticket), holding
        its buffers until it is over; its result is result, or the new step
        when result is None."""
        self._reap()
        if ticket < 0:
            self._raise()
        fut = _CallFuture(self, ticket, buffers, result)
        with self._calls_lock:
            self._calls[ticket] = fut
        return fut

    def _reap(self) -> None:
        """Forgets the background calls that have returned, whether or not
        their futures were read (a dropped prefetch)."""
        with self._calls_lock:
            calls = list(self._calls.values())
        for f in calls:
            f.done()

    def _ticket_done(self, ticket: int, timeout: Optional[float]) -> Optional[Tuple[bool, str, int]]:
        """Waits up to timeout (None: for ever) for a background call;
        returns None while it runs, else (ok, error message, step) and
        forgets it."""
        if _forked:
            _check_fork()
        rc = self._lib.ps_ticket_wait(self._h, ticket, -1.0 if timeout is None else max(0.0, float(timeout)))
        if rc == 1:
            return None
        msg = ""
        if rc == -1:
            err = self._lib.ps_ticket_error(self._h, ticket)
            msg = err.decode() if err else "paramserv: call failed (no message)"
        elif rc != 0:
            msg = f"paramserv: ticket {ticket} unknown to the library (closed client?)"
        step = int(self._lib.ps_ticket_step(self._h, ticket))
        self._lib.ps_ticket_free(self._h, ticket)
        with self._calls_lock:
            self._calls.pop(ticket, None)
        return rc == 0, msg, step

    # -- the workers among themselves -------------------------------------

    def barrier(self, timeout: float = 600.0) -> None:
        """Returns once every worker has called ``barrier()`` (as
        ``torch.distributed.barrier()``), e.g. to let the chief evaluate
        an epoch's model before the others go on.

        Barriers and all-reduces are collective calls, made through ps 0:
        every worker must make the same sequence of them. A call waits at
        most ``timeout`` seconds for the others, saying in the log every
        few seconds what it waits for; then it raises a ParamservError
        naming the workers missing and what the ps knows of them (done,
        never heard from, last heard from N s ago), so a worker that died
        does not hang the others. A call that failed may be made again.
        """
        self._collective("barrier", np.empty(0, np.float64), timeout)

    def all_reduce(self, values: Any, op: str = "sum", timeout: float = 600.0) -> np.ndarray:
        """Returns the reduction over every worker of ``values`` (a number or
        a sequence or array of up to 65,536 numbers), element by element:
        ``op`` is "sum", "mean" or "max". Every worker gets the same float64
        array (summed in worker order). For metrics (a test loss, counts),
        not for gradients: it travels through ps 0 over gRPC. Waits and
        failures are ``barrier()``'s."""
        if op not in ("sum", "mean", "max"):
            raise ValueError(f"paramserv: all_reduce: op {op!r}: want 'sum', 'mean' or 'max'")
        try:
            a = np.ascontiguousarray(np.asarray(values, dtype=np.float64).reshape(-1))
        except (TypeError, ValueError):
            raise ValueError(f"paramserv: all_reduce: values of type {type(values).__name__}: want numbers") from None
        if a.size > 1 << 16:
            raise ValueError(f"paramserv: all_reduce: {a.size} values: at most 65536 (it is for metrics)")
        return self._collective(op, a, timeout)

    def _collective(self, op: str, a: np.ndarray, timeout: float) -> np.ndarray:
        if not _is_number(timeout) or not timeout > 0 or not math.isfinite(timeout):
            raise ValueError(f"paramserv: {op}: timeout {timeout!r}: want a finite number of seconds > 0")
        self._need_started()
        out = np.empty_like(a)
        with self._lock:
            if self._lib.ps_collective(self._h, op.encode(), a.ctypes.data if a.size else None, a.size,
                                       out.ctypes.data if a.size else None, float(timeout)) != 0:
                self._raise()
        return out

    # -- a state of the program's own in the checkpoints ------------------

    def defer_saves(self) -> None:
        """Makes the chief's checkpoints carry a state of the program's own:
        from now on a push no longer saves the checkpoint that is due; call
        ``save_due()`` after each step and, when it is True, ``save_state(b)``.
        ``paramserv.torch.DistributedModule`` does this for you."""
        self._need_started()
        with self._lock:
            if self._lib.ps_defer_saves(self._h) != 0:
                self._raise()

    def save_due(self) -> bool:
        """Whether the chief's checkpoint is due at the current step (after
        ``defer_saves()``); always False on the other workers."""
        self._need_started()
        with self._lock:
            rc = self._lib.ps_save_due(self._h)
        if rc < 0:
            self._raise()
        return rc == 1

    def save_state(self, state: bytes, final: bool = False) -> None:
        """Saves the chief's due checkpoint, of the current step, with
        ``state`` (bytes of the program's own: a pickle), written into the
        checkpoint before its manifest so a complete checkpoint holds it.
        ``final=True`` keeps the state for the checkpoint ``done()`` saves
        instead. A ps that failed meanwhile is not an error: the save is
        due again at the next step."""
        if not isinstance(state, (bytes, bytearray)):
            raise ValueError(f"paramserv: save_state: got {type(state).__name__}, want bytes")
        self._need_started()
        with self._lock:
            if self._lib.ps_save_state(self._h, bytes(state), len(state), 1 if final else 0) != 0:
                self._raise()

    def resume_state(self) -> Tuple[Optional[bytes], int]:
        """The program's state saved with the checkpoint the ps restored (at
        their start, or in a recovery since) and that checkpoint's step:
        ``(None, -1)`` when they restored none, ``(None, step)`` when it
        holds no state (a fresh job's first checkpoint). Read from the
        checkpoint directory, which this worker must see (under
        ``paramserv local`` every worker does)."""
        self._need_started()
        p, n, step = ctypes.c_void_p(), ctypes.c_int64(), ctypes.c_int64()
        with self._lock:
            if self._lib.ps_resume_state(self._h, ctypes.byref(p), ctypes.byref(n), ctypes.byref(step)) != 0:
                self._raise()
        if not p.value:
            return None, step.value
        try:
            return ctypes.string_at(p.value, n.value), step.value
        finally:
            self._lib.ps_free(p)

    def report_loss(self, loss: float, examples: int = 0) -> None:
        """Gives the training loss of the batch computed last (at the global
        step of the values pulled last) and its number of examples (0: not
        counted) to this worker's metrics (paramserv_worker_loss,
        paramserv_worker_examples_total), its status page's loss curve and
        the progress line of ``paramserv local``. Without metrics it does
        nothing. It does not wait for a push_pull_async in flight."""
        self._need_started()
        try:
            loss = float(loss)
        except (TypeError, ValueError):
            raise ValueError(f"paramserv: report_loss: loss {loss!r}: want a number") from None
        if not isinstance(examples, (int, np.integer)) or isinstance(examples, bool) or examples < 0:
            raise ValueError(f"paramserv: report_loss: examples {examples!r}: want an int >= 0")
        self._lib.ps_report_loss(self._h, loss, int(examples))

    def change_rate(self, from_step: int, learning_rate: float, schedule: str = "") -> None:
        """Changes the job's learning rate and schedule on every ps from global
        step ``from_step`` on (the chief only): the updates applied at that
        step and after use ``learning_rate`` under ``schedule`` (the syntax of
        ``optimizer_options["schedule"]``, docs/OPTIMIZERS.md; "" is constant),
        evaluated on the global step. Name a step ahead of the ps's
        (``step + a few``) so that every ps switches at the same one.
        Variables and tables with their own rule keep theirs."""
        self._need_started()
        if not _is_int(from_step) or from_step < 0:
            raise ValueError(f"paramserv: change_rate: from_step {from_step!r}: want an int >= 0")
        if not _is_number(learning_rate):
            raise ValueError(f"paramserv: change_rate: learning_rate {learning_rate!r}: want a number")
        if not isinstance(schedule, str):
            raise ValueError(f"paramserv: change_rate: schedule {schedule!r}: want a str")
        with self._lock:
            if self._lib.ps_change_rate(self._h, int(from_step), float(learning_rate), schedule.encode()) != 0:
                self._raise()

    def done(self) -> None:
        """Tells every ps this worker has finished (they exit once every
        worker has). Once it has succeeded, a second done() does nothing."""
        self._need_started()
        with self._lock:
            if self._done:
                return
            if self._lib.ps_done(self._h) != 0:
                self._raise()
            self._done = True

    def close(self) -> None:
        """Closes the connections, after any call still in flight. Safe to
        call twice. In a process forked after the library was loaded it
        raises ParamservError at once, as every other call does: the
        calls in flight, the locks and the connections are the parent's."""
        if self._closed:
            return
        _check_fork()
        with self._calls_lock:
            calls = list(self._calls.values())
        for f in calls:
            f.exception()  # waits: the library writes into its buffers
        self._closed = True
        self._live = False
        with self._lock:
            self._lib.ps_close(self._h)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not getattr(self, "_closed", True) and _lib_pid == os.getpid():
                self.close()
        except Exception:
            pass


class _Waiters(list):
    """Future._waiters, which concurrent.futures.wait and as_completed
    append their waiter to: an append also calls watch."""

    def __init__(self, watch: Any) -> None:
        super().__init__()
        self._on_append = watch

    def append(self, waiter: Any) -> None:
        super().append(waiter)
        self._on_append()


class _Completer:
    """Completes the background calls' futures handed to it (see
    _CallFuture) in the order they were handed, on one thread that waits
    in the library (ctypes releases the GIL) while any is pending, and
    ends after a second with none. It holds no reference to the client
    but through the futures it has still to complete."""

    idle_s = 1.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: "queue.SimpleQueue[_CallFuture]" = queue.SimpleQueue()
        self._running = False

    def add(self, fut: "_CallFuture") -> None:
        with self._lock:
            self._queue.put(fut)
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._run, name="paramserv-calls", daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                fut = self._queue.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._running = False
                        return
                continue
            try:
                fut._finish(None)
            except BaseException:  # the future holds the call's error
                pass
            del fut


class _CallFuture(Future):
    """The Future of a call running on a goroutine (push_pull_async,
    pull_rows_async). result(), exception() and done() ask the library
    whether the call is over. A future someone waits for without asking
    (a done-callback, concurrent.futures.wait or as_completed, which add
    a waiter to _waiters) is handed to the client's _Completer, which
    completes it when the call returns: only then, since a thread woken
    at every call's return would cost the common result() path a few GIL
    hand-offs. It completes with result (or the new step when result is
    None) and holds the call's buffers until then."""

    def __init__(self, client: Client, ticket: int, buffers: Any, result: Any) -> None:
        super().__init__()
        self.set_running_or_notify_cancel()  # started: it cannot be cancelled
        self._client, self._ticket, self._buffers, self._value = client, ticket, buffers, result
        self._finish_lock = threading.Lock()
        self._watched = False
        self._waiters = _Waiters(self._watch)

    def _watch(self) -> None:
        """Hands the future to the completer, once, if it is not done."""
        if self._watched or super().done():
            return
        self._watched = True
        self._client._completer.add(self)

    def add_done_callback(self, fn: Any) -> None:
        super().add_done_callback(fn)
        self._watch()

    def _finish(self, timeout: Optional[float]) -> None:
        if timeout is not None and timeout <= 0:
            # A poll (the client's reaping): not behind a waiter.
            if not self._finish_lock.acquire(blocking=False):
                return
        else:
            self._finish_lock.acquire()
        try:
            self._finish_locked(timeout)
        finally:
            self._finish_lock.release()

    def _finish_locked(self, timeout: Optional[float]) -> None:
        if not super().done():
            got = self._client._ticket_done(self._ticket, timeout)
            if got is None:
                if timeout is not None and timeout <= 0:
                    return
                raise FutureTimeoutError()
            ok, msg, step = got
            value = step if self._value is None else self._value
            self._buffers = self._value = None
            if ok:
                self.set_result(value)
            else:
                self.set_exception(ParamservError(msg))

    def done(self) -> bool:
        if super().done():
            return True
        if self._finish_lock.acquire(blocking=False):
            try:
                self._finish_locked(0)
            finally:
                self._finish_lock.release()
            return super().done()
        # A waiter (the completer thread, or a result() elsewhere) holds the
        # lock, waiting in the library: ask the library, which does not
        # consume the ticket. Once the call is over, the waiter completes
        # the future at once: wait for that, not for the call.
        if _forked:
            _check_fork()
        if self._client._lib.ps_ticket_wait(self._client._h, self._ticket, 0.0) == 1:
            return False
        with self._finish_lock:
            pass
        return super().done()

    def result(self, timeout: Optional[float] = None) -> Any:
        self._finish(timeout)
        return super().result(0)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        self._finish(timeout)
        return super().exception(0)
