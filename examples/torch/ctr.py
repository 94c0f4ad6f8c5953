#!/usr/bin/python3
"""A click-through-rate model whose embedding tables live on the ps.

Wide and deep over the categorical fields of Criteo-style TSV (the output of
``paramserv data synth-ctr``): a weight per feature value (the wide part, a
sparse table of rows of 1) plus an MLP over the concatenated embeddings of the
row's values (the deep part, a sparse table of rows of --embedding_dim), all
trained by the ps's optimizer. A batch pulls only the rows of the values it
holds and pushes their gradients.

The wide part is the built-in sparse_lr: a weight per value and a bias,
FTRL-Proximal at rate 0.2 on the batch's summed log loss. The deep part
starts silent (its output layer at zero), so the model starts as sparse_lr
and the MLP adds what the wide part cannot express; on synth-ctr, whose
labels a linear model planted, there is nothing to add, and the two reach
the same test AUC (0.790 on 200k rows, 1 ps, 2 workers, 3000 steps). Every worker reads its own part of the
training files (every n-th file, or every n-th line when there are fewer files
than workers); the chief evaluates on the test file and writes --result_file
with ``test_auc``, ``test_log_loss``, ``test_accuracy``, ``examples_per_s``
(the job's: the global steps taken during the chief's training times the
batch size, times the workers in sync mode, over that time, as the Go
models count it) and ``chief_examples_per_s`` (the chief's own batches).

    paramserv data synth-ctr --rows=200000 --fields=8 --out=ctr
    paramserv local --ps=2 --workers=2 -- /usr/bin/python3 examples/torch/ctr.py --data_dir=ctr
"""
import argparse
import collections
import json
import os
import sys
import time

import numpy as np
import torch

import paramserv.torch as pst


# Steps between two report_loss calls.
REPORT_EVERY = 10


def log(msg):
    print(time.strftime("%Y/%m/%d %H:%M:%S"), msg, flush=True)


def job_rate(steps, batch_size, sync, replicas, elapsed):
    """The job's examples/s, as the Go models' result files count it: every
    worker's examples over the chief's training time. The global steps the
    job took during the chief's training count the pushes applied (async:
    one a worker's batch; sync: replicas a step)."""
    return steps * batch_size * (replicas if sync else 1) / elapsed


def read_tsv(path, lines=None):
    """Labels (float32) and keys (uint64, one per field) of a Criteo-style
    file with categorical fields only: a value's key is its field's index
    (from 1) in the high bits and its 32-bit hex value in the low ones, so
    that equal values of different fields differ; an empty field gets its
    field's own missing key."""
    labels, keys = [], []
    with open(path) as f:
        for n, line in enumerate(f):
            if lines is not None and n % lines[1] != lines[0]:
                continue
            cols = line.rstrip("\n").split("\t")
            try:
                labels.append(float(cols[0]))
                keys.append([((i + 1) << 40) | (int(v, 16) if v else 0xFFFFFFFFFF)
                             for i, v in enumerate(cols[1:])])
            except ValueError as e:
                sys.exit(f"{path}:{n + 1}: {e}")
    if not labels:
        return np.zeros(0, np.float32), np.zeros((0, 0), np.uint64)
    widths = {len(k) for k in keys}
    if len(widths) != 1:
        sys.exit(f"{path}: rows have {sorted(widths)} fields: want the same number on every line")
    return np.asarray(labels, np.float32), np.asarray(keys, np.uint64)


def auc(labels, scores):
    """The exact area under the ROC curve, ties counted half."""
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order] > 0.5
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2 + 1
        i = j + 1
    pos = y.sum()
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


class WideDeep(torch.nn.Module):
    def __init__(self, fields, dim, hidden, seed, min_count=0):
        super().__init__()
        torch.manual_seed(seed)
        self.wide = pst.Embedding("wide", 1, init="zeros")
        self.deep = pst.Embedding("deep", dim, init="normal", init_stddev=0.01, seed=seed, min_count=min_count)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(fields * dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
        # The deep part starts silent, so the model starts as logistic
        # regression on the wide part and the deep part adds what it learns.
        torch.nn.init.zeros_(self.mlp[2].weight)
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(self, keys):
        b = keys.shape[0]
        wide = self.wide(keys).reshape(b, -1).sum(1)
        deep = self.mlp(self.deep(keys).reshape(b, -1)).reshape(b)
        return wide + deep + self.bias


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data_dir", required=True, help="a synth-ctr output directory (meta.json, part-*.tsv, test.tsv)")
    ap.add_argument("--train_steps", type=int, default=3000, help="stop when the global step reaches this")
    ap.add_argument("--batch_size", type=int, default=100)
    ap.add_argument("--learning_rate", type=float, default=0.2)
    ap.add_argument("--optimizer", default="ftrl", help="the ps's update rule (docs/OPTIMIZERS.md): sgd, momentum, adagrad, adam, ftrl, ...")
    ap.add_argument("--embedding_dim", type=int, default=8)
    ap.add_argument("--hidden_units", type=int, default=32)
    ap.add_argument("--min_count", type=int, default=0, help="the deep table admits a value once seen this many times")
    ap.add_argument("--sync_replicas", action="store_true")
    ap.add_argument("--prefetch", nargs="?", const="step", default="", choices=["step", "background"],
                    help="pull the next batch's rows ahead (Embedding.prefetch): with this batch's push+pull, "
                         "one round trip a step (step, the default), or in the background while this one computes")
    ap.add_argument("--overlap", action="store_true",
                    help="push+pull in the background while the next batch computes (DistributedModule overlap=True; "
                         "async only); with --prefetch=step the step's call carries the rows of the batch after next")
    ap.add_argument("--steps_to_validate", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--result_file", default="")
    args = ap.parse_args()
    if args.train_steps < 1 or args.batch_size < 1 or args.embedding_dim < 1 or not args.learning_rate > 0:
        ap.error("--train_steps, --batch_size, --embedding_dim and --learning_rate must be > 0")
    torch.set_num_threads(1)
    try:
        with open(os.path.join(args.data_dir, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        ap.exit(2, f"ctr.py: --data_dir={args.data_dir}: {e} (want the output of paramserv data synth-ctr)\n")
    if meta.get("int_fields", 0):
        ap.exit(2, "ctr.py: this example reads categorical fields only (synth-ctr's)\n")
    fields = int(meta["cat_fields"])

    model = pst.DistributedModule(WideDeep(fields, args.embedding_dim, args.hidden_units, args.seed, args.min_count),
                                  optimizer=args.optimizer, learning_rate=args.learning_rate, sync=args.sync_replicas,
                                  overlap=args.overlap)
    client = model.client
    worker, workers = client.worker, client.num_workers
    files = meta["files"]
    if len(files) >= workers:
        parts = [read_tsv(os.path.join(args.data_dir, p)) for p in files[worker::workers]]
    else:
        parts = [read_tsv(os.path.join(args.data_dir, p), (worker, workers)) for p in files]
    y = np.concatenate([p[0] for p in parts])
    x = np.concatenate([p[1] for p in parts])
    log(f"Worker {worker}: {len(y)} training rows of {fields} fields, {'sync' if client.sync else 'async'}")
    rng = np.random.default_rng((args.seed, worker))

    start, cpu0, comm, fwd, local = time.time(), time.process_time(), 0.0, 0.0, 0
    order, at = rng.permutation(len(y)), 0

    def next_batch():
        nonlocal order, at
        if at + args.batch_size > len(order):
            order, at = rng.permutation(len(y)), 0
        at += args.batch_size
        return order[at - args.batch_size:at]

    step = model.pull()
    first = step
    # The batch's summed log loss, not its mean, as sparse_lr: FTRL's and
    # Adagrad's per-coordinate rates are defined on per-example gradients,
    # and a mean would shrink the gradient of a value seen once in the
    # batch by the batch size, below FTRL's beta term.
    lossf = torch.nn.BCEWithLogitsLoss(reduction="sum")

    def prefetch(idx, with_step):
        # Each Embedding pulls the rows of a future batch in the
        # background; a forward pass takes the oldest prefetch. Given the
        # same array, the second finds the distinct keys the first found.
        ids = x[idx]
        model.module.wide.prefetch(ids, with_step=with_step)
        model.module.deep.prefetch(ids, with_step=with_step)

    # The batches whose rows are on their way. --prefetch=step with
    # --overlap: a step's push+pull carries the rows of the batch after
    # the next one, so that the next forward pass finds its rows landed
    # while this step's call is in flight (the first two batches' rows are
    # pulled in the background); rows one push of this worker short, as
    # --prefetch=background reads them.
    ahead = 2 if args.prefetch == "step" and model.overlapping else 1
    queued = collections.deque(next_batch() for _ in range(ahead))
    if args.prefetch:
        for b in queued:
            prefetch(b, args.prefetch == "step" and ahead == 1)
    reported = [0.0, 0]  # summed loss and examples since the last report_loss
    while step < args.train_steps:
        queued.append(next_batch())
        if args.prefetch:
            # The rows of a later batch travel with this batch's
            # push+pull (--prefetch=step: one round trip a step, read
            # after the push), or while this one computes
            # (--prefetch=background: one push of this worker short in
            # async mode; exact in sync).
            prefetch(queued[-1], args.prefetch == "step")
        idx = queued.popleft()
        t = time.time()
        loss = lossf(model(torch.from_numpy(x[idx].astype(np.int64))), torch.from_numpy(y[idx]))
        fwd += time.time() - t  # with the rows' pulls, unless prefetched
        loss.backward()
        # The mean log loss, for the metrics and the progress line, given
        # every REPORT_EVERY steps (a call into the library a step costs
        # tens of microseconds here): the examples counted exactly, the
        # loss their mean.
        reported[0] += loss.item()
        reported[1] += len(idx)
        if (local + 1) % REPORT_EVERY == 0:
            model.report_loss(reported[0] / reported[1], reported[1])
            reported = [0.0, 0]
        t = time.time()
        step = model.step()
        comm += time.time() - t
        local += 1
        if local % args.steps_to_validate == 0:
            log(f"Worker {worker}: training step {local} done (global step: {step}), loss {loss.item() / len(idx):.4f}")
    if reported[1]:
        model.report_loss(reported[0] / reported[1], reported[1])
    elapsed, cpu = time.time() - start, time.process_time() - cpu0
    trained = step - first  # the global steps of the chief's training
    log(f"Worker {worker}: finished at global step {step} after {local} local steps")
    if client.is_chief:
        step = model.pull()
        ty, tx = read_tsv(os.path.join(args.data_dir, meta["test_file"]))
        with torch.no_grad():
            model.eval()
            logits = torch.cat([model(torch.from_numpy(tx[i:i + 1000].astype(np.int64))) for i in range(0, len(ty), 1000)])
            model.train()
        p = torch.sigmoid(logits).numpy().astype(np.float64)
        eps = 1e-15
        log_loss = float(-np.mean(ty * np.log(np.clip(p, eps, 1)) + (1 - ty) * np.log(np.clip(1 - p, eps, 1))))
        result = {
            "model": "torch_ctr", "mode": "sync" if client.sync else "async", "global_step": step,
            "local_steps": local, "elapsed_s": elapsed, "workers": workers, "ps": client.num_ps,
            "examples_per_s": job_rate(trained, args.batch_size, client.sync, workers, elapsed),
            "chief_examples_per_s": local * args.batch_size / elapsed, "push_pull_s": comm, "forward_s": fwd,
            "cpu_s": cpu,  # this process's threads, the Go library's included
            "prefetch": args.prefetch, "overlap": model.overlapping,
            "test_auc": auc(ty, p), "test_log_loss": log_loss, "test_accuracy": float(np.mean((p > 0.5) == (ty > 0.5))),
        }
        log(f"final: global step {step}, test AUC {result['test_auc']:.4f}, log loss {log_loss:.4f}, accuracy {result['test_accuracy']:.4f}")
        if args.result_file:
            tmp = args.result_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump(result, f, indent=2)
                f.write("\n")
            os.replace(tmp, args.result_file)
    model.done()


if __name__ == "__main__":
    main()
