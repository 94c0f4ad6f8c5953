#!/usr/bin/python3
"""examples/torch/ctr.py's wide & deep model in one PyTorch process: the
baseline of issue 30's "PyTorch path level with plain PyTorch" for the CTR
example (its job's examples/s against this one's).

The same model: a weight per feature value summed over the row's fields
(the wide part, an ``nn.EmbeddingBag`` of rows of 1, mode sum), the
concatenated --embedding_dim rows of the row's values through an MLP of
--hidden_units (the deep part, an ``nn.Embedding``), a bias; the same
initialisation (wide zeros, deep normal at 0.01, the MLP's output layer at
zero), the batch's summed log loss, one thread. The tables are sparse
(``sparse=True``) with ``torch.optim.Adagrad`` at --learning_rate and an
initial accumulator of 0.1, the ps's adagrad, so compare with
``ctr.py --optimizer=adagrad`` at the same rate (torch has no FTRL). The
uint64 keys are mapped to table rows once before training (as the ps's
hash table does on every lookup; not timed). --steps batches of
--batch_size: a job's --train_steps in async mode.

Prints one JSON line: examples_per_s (batches over the training loop's
seconds), train_s, test_auc, test_log_loss.

    paramserv data synth-ctr --rows=200000 --fields=8 --out=/tmp/ctr
    /usr/bin/python3 scripts/torch_ctr_single.py --data_dir=/tmp/ctr --steps=3000
"""

import argparse
import importlib.util
import json
import os
import sys
import time

import numpy as np
import torch


def load_ctr():
    """examples/torch/ctr.py as a module, for its reader and AUC (it imports
    paramserv.torch, which needs no library until a client starts)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "torch", "ctr.py")
    spec = importlib.util.spec_from_file_location("ctr_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class WideDeep(torch.nn.Module):
    def __init__(self, rows, fields, dim, hidden, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.wide = torch.nn.EmbeddingBag(rows, 1, mode="sum", sparse=True)
        torch.nn.init.zeros_(self.wide.weight)
        self.deep = torch.nn.Embedding(rows, dim, sparse=True)
        torch.nn.init.normal_(self.deep.weight, std=0.01)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(fields * dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
        torch.nn.init.zeros_(self.mlp[2].weight)
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(self, idx):
        b = idx.shape[0]
        return self.wide(idx).reshape(b) + self.mlp(self.deep(idx).reshape(b, -1)).reshape(b) + self.bias


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data_dir", required=True, help="a synth-ctr output directory")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch_size", type=int, default=100)
    ap.add_argument("--learning_rate", type=float, default=0.2)
    ap.add_argument("--embedding_dim", type=int, default=8)
    ap.add_argument("--hidden_units", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.steps < 1 or a.batch_size < 1:
        ap.error("--steps and --batch_size must be > 0")
    torch.set_num_threads(1)
    ctr = load_ctr()
    try:
        with open(os.path.join(a.data_dir, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        ap.exit(2, f"torch_ctr_single.py: --data_dir={a.data_dir}: {e} (want the output of paramserv data synth-ctr)\n")
    parts = [ctr.read_tsv(os.path.join(a.data_dir, p)) for p in meta["files"]]
    y, x = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    ty, tx = ctr.read_tsv(os.path.join(a.data_dir, meta["test_file"]))
    vocab = np.unique(np.concatenate([x.ravel(), tx.ravel()]))
    xi = torch.from_numpy(np.searchsorted(vocab, x).astype(np.int64))
    txi = torch.from_numpy(np.searchsorted(vocab, tx).astype(np.int64))
    yt = torch.from_numpy(y)
    model = WideDeep(len(vocab), x.shape[1], a.embedding_dim, a.hidden_units, a.seed)
    opt = torch.optim.Adagrad(model.parameters(), lr=a.learning_rate, initial_accumulator_value=0.1)
    lossf = torch.nn.BCEWithLogitsLoss(reduction="sum")
    rng = np.random.default_rng((a.seed, 0))
    order, at = torch.from_numpy(rng.permutation(len(y))), 0
    start = time.time()
    for _ in range(a.steps):
        if at + a.batch_size > len(order):
            order, at = torch.from_numpy(rng.permutation(len(y))), 0
        idx = order[at:at + a.batch_size]
        at += a.batch_size
        opt.zero_grad()
        loss = lossf(model(xi[idx]), yt[idx])
        loss.backward()
        opt.step()
    train_s = time.time() - start
    with torch.no_grad():
        p = torch.sigmoid(torch.cat([model(txi[i:i + 1000]) for i in range(0, len(ty), 1000)])).numpy().astype(np.float64)
    eps = 1e-15
    log_loss = float(-np.mean(ty * np.log(np.clip(p, eps, 1)) + (1 - ty) * np.log(np.clip(1 - p, eps, 1))))
    print(json.dumps({"model": "torch_ctr_single", "steps": a.steps, "batch_size": a.batch_size,
                      "examples_per_s": a.steps * a.batch_size / train_s, "train_s": train_s,
                      "test_auc": ctr.auc(ty, p), "test_log_loss": log_loss}))


if __name__ == "__main__":
    sys.exit(main())
