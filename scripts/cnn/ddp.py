#!/usr/bin/env python3
"""The upstream MNIST CNN example without paramserv: PyTorch DistributedDataParallel, 2 processes over gloo.

scripts/cnn/compare.sh runs it beside examples/torch/mnist_cnn.py, from which it
is derived by undoing the lines marked `# paramserv`.
"""

import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset



class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        if args.max_batches and batch_idx >= args.max_batches:
            break
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.sampler)}]\tLoss: {loss.item():.6f}",
                  flush=True)


def test(model, device, test_loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    n = len(test_loader.dataset)
    print(f"\nTest set: Average loss: {test_loss / n:.4f}, Accuracy: {correct}/{n} ({100.0 * correct / n:.2f}%)\n",
          flush=True)
    return correct / n


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, kind, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or kind != 0x08:
        sys.exit(f"mnist_cnn.py: {path}: not an IDX file of unsigned bytes")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def mnist(root, train):
    """torchvision's MNIST with ToTensor() and Normalize((0.1307,), (0.3081,))."""
    prefix = "train" if train else "t10k"
    for d in (root, os.path.join(root, "mnist")):
        if os.path.exists(os.path.join(d, f"{prefix}-images-idx3-ubyte.gz")):
            x = read_idx(os.path.join(d, f"{prefix}-images-idx3-ubyte.gz")).astype(np.float32) / 255
            y = read_idx(os.path.join(d, f"{prefix}-labels-idx1-ubyte.gz")).astype(np.int64)
            x = (torch.from_numpy(x).unsqueeze(1) - 0.1307) / 0.3081
            return TensorDataset(x, torch.from_numpy(y))
    print(f"mnist_cnn.py: no {prefix}-images-idx3-ubyte.gz in {root} or {root}/mnist", file=sys.stderr)
    sys.exit(2)


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
