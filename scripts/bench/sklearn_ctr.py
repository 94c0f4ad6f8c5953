#!/usr/bin/python3
"""The one-machine reference for paramserv's --model=sparse_lr on synth-ctr
data: scikit-learn's SGDClassifier (logistic loss), one epoch over the same
training rows, scored by test AUC on the same test rows.

    /usr/bin/python3 scripts/bench/sklearn_ctr.py --data=DIR [--bits=22] [--alpha=1e-4]

DIR is what `paramserv data synth-ctr --out=DIR` wrote (meta.json, the
training shards, test.tsv; categorical fields only). Each (field, value)
pair is hashed into 2^bits columns of a sparse 0/1 matrix, as paramserv
hashes it into a 64-bit key; reading and hashing are not timed. Prints a
JSON line: rows, fit seconds (wall and CPU), examples/s (rows over the fit's
wall time) and test AUC.
"""
import argparse
import json
import os
import time

import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import SGDClassifier
from sklearn.metrics import roc_auc_score

HEX = np.full(256, 255, dtype=np.uint8)
for i, c in enumerate(b"0123456789abcdef"):
    HEX[c] = i


def read(path, fields, bits):
    """Labels and hashed columns of a file of fixed-width rows (a label
    digit, then fields tab-separated 8-digit hex values)."""
    width = 2 + 9 * fields
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size % width or raw.size == 0:
        raise SystemExit(f"{path}: {raw.size} bytes is not rows of {width} (a label and {fields} 8-digit hex fields)")
    rows = raw.reshape(-1, width)
    labels = rows[:, 0] - ord("0")
    cols = np.empty((rows.shape[0], fields), dtype=np.int64)
    for f in range(fields):
        digits = HEX[rows[:, 2 + 9 * f: 10 + 9 * f]].astype(np.uint64)
        if (digits == 255).any():
            raise SystemExit(f"{path}: field {f} holds a character that is not a hex digit")
        v = np.zeros(rows.shape[0], dtype=np.uint64)
        for d in range(8):
            v = (v << np.uint64(4)) | digits[:, d]
        h = (v ^ np.uint64((f + 1) * 0x9E3779B97F4A7C15 % 2**64)) * np.uint64(0xBF58476D1CE4E5B9)
        cols[:, f] = (h >> np.uint64(64 - bits)).astype(np.int64)
    return labels, cols


def matrix(cols, bits):
    n, f = cols.shape
    indptr = np.arange(0, n * f + 1, f, dtype=np.int64)
    x = sp.csr_matrix((np.ones(n * f, dtype=np.float64), cols.ravel(), indptr), shape=(n, 2**bits))
    x.sum_duplicates()
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--bits", type=int, default=22)
    ap.add_argument("--alpha", type=float, default=1e-4)  # scikit-learn's default
    a = ap.parse_args()
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    fields = meta["cat_fields"]
    if meta.get("int_fields", 0):
        raise SystemExit("integer fields are not supported")
    ys, cs = zip(*(read(os.path.join(a.data, f), fields, a.bits) for f in meta["files"]))
    y, x = np.concatenate(ys), matrix(np.concatenate(cs), a.bits)
    ty, tc = read(os.path.join(a.data, meta["test_file"]), fields, a.bits)
    tx = matrix(tc, a.bits)
    clf = SGDClassifier(loss="log_loss", alpha=a.alpha, max_iter=1, tol=None, random_state=1)
    w0, c0 = time.perf_counter(), time.process_time()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one epoch: "did not converge"
        clf.fit(x, y)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    auc = roc_auc_score(ty, clf.decision_function(tx))
    print(json.dumps({"rows": int(x.shape[0]), "bits": a.bits, "alpha": a.alpha, "fit_s": round(wall, 3),
                      "fit_cpu_s": round(cpu, 3), "examples_per_s": round(x.shape[0] / wall),
                      "test_auc": round(auc, 4)}))


if __name__ == "__main__":
    main()
