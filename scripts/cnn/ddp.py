#!/usr/bin/env python3
"""The upstream MNIST CNN example without paramserv: PyTorch DistributedDataParallel, 2 processes over gloo: single.py's model, data and loops under DDP.

scripts/cnn/compare.sh runs it beside examples/torch/mnist_cnn.py, from which it
is derived by undoing the lines marked `# paramserv`.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from single import Net, mnist, test, train  # noqa: E402  the same model, data and loops


def main():
    mp.spawn(run, nprocs=2)


def run(rank):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    parser = argparse.ArgumentParser(description="PyTorch MNIST Example")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--data_dir", default=os.environ.get("PARAMSERV_DATA", "."))
    parser.add_argument("--max_batches", type=int, default=0, help="stop each epoch after this many batches (0: all)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset1, dataset2 = mnist(args.data_dir, True), mnist(args.data_dir, False)
    sampler = DistributedSampler(dataset1, seed=args.seed)
    train_loader = DataLoader(dataset1, batch_size=args.batch_size, sampler=sampler)
    test_loader = DataLoader(dataset2, batch_size=args.test_batch_size)

    model = DDP(Net().to(device))
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    t0, examples = time.time(), 0
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        train(args, model, device, train_loader, optimizer, epoch)
        examples += min(len(train_loader), args.max_batches or len(train_loader)) * args.batch_size
        if rank == 0:
            test(model, device, test_loader)
        scheduler.step()
    if rank == 0:
        print(f"examples/s (this worker): {examples / (time.time() - t0):.0f}", flush=True)


if __name__ == "__main__":
    main()
