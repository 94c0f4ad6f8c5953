#!/usr/bin/python3
"""paramserv's MNIST job done by one PyTorch process: the yardstick of issue
30's "the MNIST job >= 1.0x one PyTorch process's examples/s".

The model, initialisation, data, batches and Adam of scripts/ddp_mnist.py
(imported from it), trained by a plain loop in one process of one thread
(run it with OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1) over all 55,000
training images. It prints one JSON line: examples_per_s (--steps batches
of 100 over the training loop's seconds, start-up excluded, as paramserv's
result file counts its job), train_s, cpu_s (this process's CPU time in the
loop), the last batch's loss and test_accuracy on the 10,000 test images.

    PARAMSERV_DATA=../shared/data /usr/bin/python3 scripts/bench/torch_mnist_single.py --steps=10000
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ddp_mnist  # noqa: E402  (sets OMP_NUM_THREADS=1 before torch loads)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10000, help="batches of 100")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data_dir", default=os.environ.get("PARAMSERV_DATA", ""),
                    help="folder holding mnist/ (default $PARAMSERV_DATA)")
    ap.add_argument("--result_file", default="", help="also write the JSON here")
    a = ap.parse_args()
    if a.steps <= 0:
        print(f"torch_mnist_single.py: --steps={a.steps}: want > 0", file=sys.stderr)
        sys.exit(2)
    if not a.data_dir:
        print("torch_mnist_single.py: set PARAMSERV_DATA or --data_dir to the folder holding mnist/", file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(1)
    tx, ty, vx, vy = ddp_mnist.load(os.path.join(a.data_dir, "mnist"))
    model = ddp_mnist.make_model(a.seed)
    opt = torch.optim.Adam(model.parameters(), lr=ddp_mnist.LR)
    batches = ddp_mnist.Batches(tx, ty, a.seed)
    t0, c0 = time.perf_counter(), time.process_time()
    loss = torch.zeros(())
    for _ in range(a.steps):
        x, y = batches.next()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    train_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    with torch.no_grad():
        acc = (model(vx).argmax(1) == vy).float().mean().item()
    res = {"examples_per_s": a.steps * ddp_mnist.BATCH / train_s, "train_s": train_s, "cpu_s": cpu_s,
           "final_batch_loss": loss.item(), "test_accuracy": acc, "threads": torch.get_num_threads()}
    print(json.dumps(res))
    if a.result_file:
        with open(a.result_file, "w") as f:
            json.dump(res, f)


if __name__ == "__main__":
    main()
