#!/usr/bin/env python3
"""PyTorch's time for one MNIST step of paramserv's MLP, the yardstick of the
Go worker's compute (issue 18).

The 784-100-10 ReLU MLP with softmax cross-entropy, batch 100, float32, one
thread (torch.set_num_threads(1); run it with OMP_NUM_THREADS=1 and
OPENBLAS_NUM_THREADS=1). Each step gathers a random batch from 55,000
images held in memory, as the Go model does. It prints the mean time of a
step's compute (forward, loss, backward into the gradients: the Go
model's ComputeGradients) and of a whole single-process training step with
Adam (the compute and the update), as milliseconds per step (wall clock
and this process's CPU time, which a busy machine moves less) and
examples per second:

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 scripts/bench/torch_mnist_step.py --steps=2000
"""

import argparse
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--hidden", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    images = torch.rand(55000, 784, generator=g)
    labels = torch.randint(0, 10, (55000,), generator=g)
    net = torch.nn.Sequential(torch.nn.Linear(784, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 10))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)

    def step(update):
        idx = torch.randint(0, 55000, (args.batch,), generator=g)
        x, y = images.index_select(0, idx), labels.index_select(0, idx)
        for p in net.parameters():
            p.grad = None
        loss = loss_fn(net(x), y)
        loss.backward()
        if update:
            opt.step()

    for update in (False, True):
        for _ in range(100):  # warm-up
            step(update)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            step(update)
        dt = (time.perf_counter() - t0) / args.steps
        cpu = (time.process_time() - c0) / args.steps
        what = "train step (compute + Adam)" if update else "compute (forward, backward)"
        print(f"torch {torch.__version__} {what}: {dt * 1e3:.4f} ms/step, {cpu * 1e3:.4f} cpu-ms/step, {args.batch / dt:.0f} examples/s")


if __name__ == "__main__":
    main()
