#!/usr/bin/python3
"""The reference for paramserv's --model=lda: scikit-learn's LatentDirichletAllocation
on the same corpus, split and number of topics, scored by the same held-out
estimator (document completion, as models/lda.Perplexity computes it).

    /usr/bin/python3 scripts/lda_sklearn.py --corpus=../shared/data/ap/ap.dat [--topics=20]

Document i is held out when i % 10 == 9; in each held-out document the
even-numbered tokens (the id:count pairs expanded in file order) estimate its
topic proportions theta (100 iterations of theta_k = (alpha + sum_i r_ik) /
(n + K alpha), r_ik = theta_k phi_k(w_i) / sum_j theta_j phi_j(w_i), from theta
uniform) and the odd-numbered tokens are scored. Prints a JSON line with the
completion perplexity and scikit-learn's own perplexity() of the held-out
documents (its variational bound, for information).
"""
import argparse
import json
import time

import numpy as np
import scipy.sparse as sp


def read_corpus(path, max_docs=0):
    docs = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if not fields:
                continue
            if max_docs and len(docs) == max_docs:
                break
            d = []
            for tok in fields[1:]:
                a, b = tok.split(":")
                d.extend([int(a)] * int(b))
            docs.append(np.array(d, dtype=np.int64))
    return docs


def completion_perplexity(phi, docs, alpha, iters=100):
    """phi: K x V rows summing to 1."""
    K = phi.shape[0]
    ll, scored = 0.0, 0
    for d in docs:
        if len(d) < 2:
            continue
        obs, held = d[0::2], d[1::2]
        po = phi[:, obs]  # K x n
        theta = np.full(K, 1.0 / K)
        for _ in range(iters):
            p = theta[:, None] * po
            r = p / p.sum(axis=0, keepdims=True)
            theta = (alpha + r.sum(axis=1)) / (len(obs) + K * alpha)
        ll += np.log(theta @ phi[:, held]).sum()
        scored += len(held)
    return float(np.exp(-ll / scored)), scored


def counts_matrix(docs, V):
    rows, cols = [], []
    for i, d in enumerate(docs):
        rows.extend([i] * len(d))
        cols.extend(d.tolist())
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(docs), V))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--vocab_size", type=int, default=0, help="default: the lines of vocab.txt beside the corpus")
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--alpha", type=float, default=0.1, help="doc_topic_prior, and the estimator's alpha")
    ap.add_argument("--beta", type=float, default=0.01, help="topic_word_prior")
    ap.add_argument("--eval_alpha", type=float, default=0, help="the estimator's alpha (default: --alpha)")
    ap.add_argument("--max_iter", type=int, default=100)
    ap.add_argument("--held_out", type=int, default=10)
    ap.add_argument("--max_docs", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--phi", help="instead of training: score these topics (K lines of V probabilities)")
    args = ap.parse_args()
    eval_alpha = args.eval_alpha or args.alpha

    docs = read_corpus(args.corpus, args.max_docs)
    V = args.vocab_size
    if not V:
        import os
        with open(os.path.join(os.path.dirname(args.corpus), "vocab.txt")) as f:
            V = len(f.read().split())
    train = [d for i, d in enumerate(docs) if i % args.held_out != args.held_out - 1]
    test = [d for i, d in enumerate(docs) if i % args.held_out == args.held_out - 1]
    out = {"topics": args.topics, "alpha": args.alpha, "eval_alpha": eval_alpha, "beta": args.beta, "train_docs": len(train), "test_docs": len(test)}
    if args.phi:
        phi = np.loadtxt(args.phi)
        out["perplexity"], out["scored_tokens"] = completion_perplexity(phi / phi.sum(axis=1, keepdims=True), test, eval_alpha)
        print(json.dumps(out))
        return
    from sklearn.decomposition import LatentDirichletAllocation

    t0 = time.time()
    lda = LatentDirichletAllocation(n_components=args.topics, doc_topic_prior=args.alpha, topic_word_prior=args.beta,
                                    learning_method="batch", max_iter=args.max_iter, random_state=args.seed)
    lda.fit(counts_matrix(train, V))
    out["fit_s"] = round(time.time() - t0, 1)
    phi = lda.components_ / lda.components_.sum(axis=1, keepdims=True)
    out["perplexity"], out["scored_tokens"] = completion_perplexity(phi, test, eval_alpha)
    out["sklearn_perplexity"] = float(lda.perplexity(counts_matrix(test, V)))
    out["max_iter"], out["n_iter"] = args.max_iter, int(lda.n_iter_)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
