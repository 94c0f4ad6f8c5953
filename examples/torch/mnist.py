#!/usr/bin/env python3
"""The seed's distributed MNIST job written in PyTorch, its variables on paramserv.

A 784-100-10 multilayer perceptron (ReLU, softmax cross-entropy) trained
with Adam applied on the ps, batch 100 per worker: the model of
`paramserv train --model=mnist`, with the same variable names and shapes
(hid_w [784,100], hid_b [100], sm_w [100,10], sm_b [10]), the same
initialisation (truncated normal, stddev 1/28 and 1/sqrt(hidden), zero
biases), the same data split (the first 5,000 training images are the
validation set, the other 55,000 are split into contiguous parts, one per
worker) and the same batches' shape (a fresh permutation per epoch, a batch
that crosses an epoch's end is completed from the next). Random streams are
numpy's, so values are comparable, not identical.

Run it as every worker of a local cluster:

    paramserv local --ps=1 --workers=2 -- python3 examples/torch/mnist.py \\
        --data_dir=../shared/data --train_steps=2000

The cluster comes from TF_CONFIG. Only the chief evaluates and writes
--result_file (JSON with test_accuracy, examples_per_s: the job's, every
worker's examples over the chief's training time, counted from the global
steps taken meanwhile as the Go models' result files count them, and
chief_examples_per_s: the chief's own).
"""

import argparse
import gzip
import json
import os
import struct
import sys
import time

import numpy as np
import torch

import paramserv.torch as pst

VALIDATION_SIZE, TRAIN_SIZE = 5000, 55000
FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def log(msg):
    print(msg, flush=True)


def job_rate(steps, batch_size, sync, replicas, elapsed):
    """The job's examples/s, as the Go models' result files count it: every
    worker's examples over the chief's training time. The global steps the
    job took during the chief's training count the pushes applied (async:
    one a worker's batch; sync: replicas a step)."""
    return steps * batch_size * (replicas if sync else 1) / elapsed


def find_dir(root, dataset):
    for d in (root, os.path.join(root, dataset)):
        if os.path.exists(os.path.join(d, FILES[0])):
            return d
    print(f"mnist.py: no {FILES[0]} in {root} or {os.path.join(root, dataset)}: point --data_dir at "
          f"the folder holding {', '.join(FILES)} (or its parent)", file=sys.stderr)
    sys.exit(2)  # input to fix


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, kind, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or kind != 0x08:
        print(f"mnist.py: {path}: not an IDX file of unsigned bytes (magic {zero:#x} {kind:#x})", file=sys.stderr)
        sys.exit(2)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(root, dataset):
    d = find_dir(root, dataset)
    sets = [read_idx(os.path.join(d, f)) for f in FILES]
    train_x = sets[0].reshape(-1, 784).astype(np.float32) / np.float32(255)
    test_x = sets[2].reshape(-1, 784).astype(np.float32) / np.float32(255)
    train_y, test_y = sets[1].astype(np.int64), sets[3].astype(np.int64)
    return ((train_x[VALIDATION_SIZE:], train_y[VALIDATION_SIZE:]),
            (train_x[:VALIDATION_SIZE], train_y[:VALIDATION_SIZE]),
            (test_x, test_y))


class Batches:
    """TensorFlow's DataSet.next_batch over one worker's part."""

    def __init__(self, n, batch_size, seed):
        self.rng = np.random.default_rng(seed)
        self.n, self.batch_size = n, batch_size
        self.perm, self.pos = self.rng.permutation(n), 0



def next_batch(b):
    # Fill in chunks so a batch that crosses an epoch's end is completed
    # from the next epoch's permutation.
    out, i = np.empty(b.batch_size, np.int64), 0
    while i < b.batch_size:
        if b.pos == b.n:
            b.perm, b.pos = b.rng.permutation(b.n), 0
        take = min(b.batch_size - i, b.n - b.pos)
        out[i:i + take] = b.perm[b.pos:b.pos + take]
        b.pos += take
        i += take
    return out


def truncated_normal(rng, shape, stddev):
    z = rng.standard_normal(shape)
    bad = np.abs(z) > 2
    while bad.any():
        z[bad] = rng.standard_normal(bad.sum())
        bad = np.abs(z) > 2
    return (z * stddev).astype(np.float32)


class MLP(torch.nn.Module):
    def __init__(self, hidden, seed):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.hid_w = torch.nn.Parameter(torch.from_numpy(truncated_normal(rng, (784, hidden), 1 / 28)))
        self.hid_b = torch.nn.Parameter(torch.zeros(hidden))
        self.sm_w = torch.nn.Parameter(torch.from_numpy(truncated_normal(rng, (hidden, 10), 1 / np.sqrt(hidden))))
        self.sm_b = torch.nn.Parameter(torch.zeros(10))

    def forward(self, x):
        h = torch.relu(torch.addmm(self.hid_b, x, self.hid_w))
        return torch.addmm(self.sm_b, h, self.sm_w)


def evaluate(net, x, y):
    with torch.no_grad():
        logits = net(torch.from_numpy(x))
        ce = torch.nn.functional.cross_entropy(logits, torch.from_numpy(y)).item()
        acc = (logits.argmax(1).numpy() == y).mean()
    return ce, float(acc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data_dir", default=os.environ.get("PARAMSERV_DATA", "."),
                    help="folder holding the four IDX .gz files, or its parent")
    ap.add_argument("--dataset", default="mnist", choices=["mnist", "fashion-mnist"])
    ap.add_argument("--train_steps", type=int, default=10000, help="stop when the global step reaches this")
    ap.add_argument("--learning_rate", type=float, default=0.01)
    ap.add_argument("--batch_size", type=int, default=100)
    ap.add_argument("--hidden_units", type=int, default=100)
    ap.add_argument("--sync_replicas", action="store_true", help="synchronous training")
    ap.add_argument("--replicas_to_aggregate", type=int, default=None)
    ap.add_argument("--steps_to_validate", type=int, default=200)
    ap.add_argument("--overlap", action="store_true",
                    help="async: push+pull in the background while the next batch computes")
    ap.add_argument("--worker_optimizer", action="store_true",
                    help="run torch.optim.Adam on each worker and push its changes (the ps: sgd at 1.0)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--result_file", default="")
    ap.add_argument("--checkpoint_dir", default="",
                    help="the ps's --checkpoint_dir: the chief saves checkpoints there and a restarted ps restores them")
    ap.add_argument("--save_steps", type=int, default=0, help="with --checkpoint_dir, save every this many global steps")
    args = ap.parse_args()
    if args.train_steps < 1 or args.batch_size < 1 or args.hidden_units < 1 or not args.learning_rate > 0:
        ap.error("--train_steps, --batch_size, --hidden_units and --learning_rate must be > 0")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    (train_x, train_y), (val_x, val_y), (test_x, test_y) = load(args.data_dir, args.dataset)
    net = MLP(args.hidden_units, args.seed)
    rule = ({"optimizer": torch.optim.Adam(net.parameters(), lr=args.learning_rate)} if args.worker_optimizer
            else {"optimizer": "adam", "learning_rate": args.learning_rate})
    model = pst.DistributedModule(net, **rule,
                                  sync=args.sync_replicas, replicas_to_aggregate=args.replicas_to_aggregate,
                                  checkpoint_dir=args.checkpoint_dir or None, save_steps=args.save_steps,
                                  overlap=args.overlap)
    client = model.client
    worker, workers = client.worker, client.num_workers
    lo, hi = worker * TRAIN_SIZE // workers, (worker + 1) * TRAIN_SIZE // workers
    x, y = train_x[lo:hi], train_y[lo:hi]
    batches = Batches(hi - lo, args.batch_size, (args.seed, worker))
    log(f"Worker {worker}: {hi - lo} training examples ({lo} to {hi}), {'sync' if client.sync else 'async'}")

    start = time.time()
    comm = 0.0
    local = 0
    step = model.pull()
    first = step
    while step < args.train_steps:
        idx = next_batch(batches)
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x[idx])), torch.from_numpy(y[idx]))
        loss.backward()
        model.report_loss(loss, len(idx))  # the metrics, status page and local's progress line
        t = time.time()
        step = model.step()
        comm += time.time() - t
        local += 1
        if local % args.steps_to_validate == 0:
            log(f"Worker {worker}: training step {local} done (global step: {step}), loss {loss.item():.4f}")
    elapsed = time.time() - start
    trained = step - first  # the global steps of the chief's training
    log(f"Worker {worker}: finished at global step {step} after {local} local steps")
    log(f"Training elapsed time: {elapsed:.1f} s")
    if client.is_chief:
        step = model.pull()
        val_ce, val_acc = evaluate(net, val_x, val_y)
        test_ce, test_acc = evaluate(net, test_x, test_y)
        log(f"After {step} training step(s), validation cross entropy = {val_ce:g}")
        log(f"final: global step {step}, val_accuracy {val_acc:.4f}, test_accuracy {test_acc:.4f}")
        if args.result_file:
            result = {
                "model": "torch_mnist", "mode": "sync" if client.sync else "async", "global_step": step,
                "local_steps": local, "elapsed_s": elapsed, "workers": workers, "ps": client.num_ps,
                "optimizer": "torch.optim.Adam on the worker" if args.worker_optimizer else "adam",
                "learning_rate": args.learning_rate,
                "examples_per_s": job_rate(trained, args.batch_size, client.sync, args.replicas_to_aggregate or workers, elapsed),
                "chief_examples_per_s": local * args.batch_size / elapsed, "push_pull_s": comm,
                "val_cross_entropy": val_ce, "val_accuracy": val_acc,
                "test_cross_entropy": test_ce, "test_accuracy": test_acc,
            }
            tmp = args.result_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump(result, f, indent=2)
                f.write("\n")
            os.replace(tmp, args.result_file)
    model.done()
    model.close()


if __name__ == "__main__":
    main()
