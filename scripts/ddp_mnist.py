#!/usr/bin/python3
"""PyTorch DistributedDataParallel on paramserv's MNIST job: the baseline of
issue 18's whole-job target (`paramserv local --ps=1 --workers=2
--model=mnist` at least as many examples/s as this).

The model and training are those of `paramserv train --model=mnist`
(internal/models/mlp, examples/torch/mnist.py): a 784-100-10 MLP (ReLU,
softmax cross-entropy), truncated-normal weights of stddev 1/28 and 1/10,
zero biases, Adam at 0.01, batches of 100 per worker, the first 5,000
training images held out and the other 55,000 split into contiguous parts,
one per process. DDP averages the gradients with an allreduce (gloo on
127.0.0.1) every step, so this is synchronous training: the nearest PyTorch
has to a parameter server job of two workers.

Each process uses one thread (torch.set_num_threads(1) and
OMP_NUM_THREADS=1), as a paramserv worker computes on one goroutine.
--steps are per process: --steps=5000 is 10,000 batches in all, as
`paramserv local ... --train_steps=10000`. It prints one JSON line:
examples_per_s (batches of both processes over the training loop's
seconds, start-up excluded, as paramserv's result file counts), train_s,
wall_s (from the start of this program, start-up included), the last
batch's loss and test_accuracy on the 10,000 test images.

    PARAMSERV_DATA=../shared/data /usr/bin/python3 scripts/ddp_mnist.py --steps=5000
"""

import argparse
import gzip
import json
import math
import os
import struct
import sys
import tempfile
import time

START = time.perf_counter()
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

VALIDATION_SIZE = 5000
BATCH, HIDDEN, LR = 100, 100, 0.01
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def read_idx(d, name):
    for path, opener in ((os.path.join(d, name), open), (os.path.join(d, name + ".gz"), gzip.open)):
        if os.path.exists(path):
            with opener(path, "rb") as f:
                raw = f.read()
            zero, kind, ndim = struct.unpack(">HBB", raw[:4])
            if zero != 0 or kind != 0x08:
                sys.exit(f"ddp_mnist.py: {path}: not an IDX file of unsigned bytes (magic {zero:#x} {kind:#x})")
            dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
            return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)
    print(f"ddp_mnist.py: no {name} or {name}.gz in {d}: set PARAMSERV_DATA (or --data_dir) to the folder "
          "holding mnist/", file=sys.stderr)
    sys.exit(2)


def load(d):
    x = lambda a: torch.from_numpy(a.reshape(a.shape[0], -1).astype(np.float32) / np.float32(255))
    y = lambda a: torch.from_numpy(a.astype(np.int64))
    tx, ty, vx, vy = (read_idx(d, f) for f in FILES)
    return x(tx)[VALIDATION_SIZE:], y(ty)[VALIDATION_SIZE:], x(vx), y(vy)


def make_model(seed):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(784, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))
    for layer in (m[0], m[2]):
        std = 1.0 / math.sqrt(layer.in_features)  # 1/28 and 1/10, as the Go model
        nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
        nn.init.zeros_(layer.bias)
    return m


class Batches:
    """Shuffled batches of one part; a fresh permutation every epoch."""

    def __init__(self, x, y, seed):
        self.x, self.y, self.n = x, y, x.shape[0]
        self.g = torch.Generator().manual_seed(seed)
        self.perm, self.pos = torch.randperm(self.n, generator=self.g), 0

    def next(self):
        if self.pos + BATCH > self.n:
            self.perm, self.pos = torch.randperm(self.n, generator=self.g), 0
        idx = self.perm[self.pos:self.pos + BATCH]
        self.pos += BATCH
        return self.x.index_select(0, idx), self.y.index_select(0, idx)


def worker(rank, a, store, queue):
    torch.set_num_threads(1)
    tx, ty, vx, vy = load(a.mnist_dir)
    n = tx.shape[0]
    lo, hi = rank * n // a.workers, (rank + 1) * n // a.workers
    batches = Batches(tx[lo:hi].contiguous(), ty[lo:hi].contiguous(), a.seed * 1000 + rank)
    # The processes meet through a file, not a TCP port chosen in advance:
    # a port found free by the parent could be taken (by anything binding
    # port 0 or connecting out) in the seconds before rank 0 listens on it.
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=a.workers)
    model = DDP(make_model(a.seed))  # DDP broadcasts rank 0's values
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    dist.barrier()
    t0 = time.perf_counter()
    loss = torch.zeros(())
    for _ in range(a.steps):
        x, y = batches.next()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # the allreduce of the gradients happens here
        opt.step()
    dist.barrier()
    train_s = time.perf_counter() - t0
    if rank == 0:
        with torch.no_grad():
            acc = (model.module(vx).argmax(1) == vy).float().mean().item()
        queue.put({"train_s": train_s, "final_batch_loss": loss.item(), "test_accuracy": acc,
                   "threads_per_process": torch.get_num_threads()})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5000, help="steps per process (batches of 100)")
    ap.add_argument("--workers", type=int, default=2, help="processes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data_dir", default=os.environ.get("PARAMSERV_DATA", ""),
                    help="folder holding mnist/ (default $PARAMSERV_DATA)")
    ap.add_argument("--result_file", default="", help="also write the JSON here")
    a = ap.parse_args()
    if a.steps <= 0 or a.workers <= 0:
        print(f"ddp_mnist.py: --steps={a.steps} --workers={a.workers}: want both > 0", file=sys.stderr)
        sys.exit(2)
    if not a.data_dir:
        print("ddp_mnist.py: set PARAMSERV_DATA or --data_dir to the folder holding mnist/", file=sys.stderr)
        sys.exit(2)
    a.mnist_dir = os.path.join(a.data_dir, "mnist")
    read_idx(a.mnist_dir, FILES[3])  # fail here, once, if the data is missing
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="ddp_mnist") as tmp:
        mp.start_processes(worker, args=(a, os.path.join(tmp, "store"), queue), nprocs=a.workers, join=True,
                           start_method="spawn")
    r = queue.get()
    batches = a.steps * a.workers
    out = {"system": "pytorch-ddp-gloo", "torch": torch.__version__, "workers": a.workers,
           "steps_per_worker": a.steps, "batches_total": batches, "batch_size": BATCH,
           "examples_per_s": batches * BATCH / r["train_s"], **r,
           "wall_s": time.perf_counter() - START}
    line = json.dumps(out)
    if a.result_file:
        with open(a.result_file, "w") as f:
            f.write(line + "\n")
    print(line)


if __name__ == "__main__":
    main()
