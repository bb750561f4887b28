"""Reference values for hone-engine's kNN-LM interpolation (memory.rs).

Computed independently with numpy in float64 from seeded inputs: a datastore
of keys and next-token values, queries, and the model's log-probabilities.
For each setting (k, lambda, temperature) and query: the k nearest keys by
squared Euclidean distance (ties by index), p_kNN(y) proportional to the sum
of exp(-d / T) over neighbours with value y, and
log(lambda * p_kNN + (1 - lambda) * p_LM); with `adaptive`, lambda is first
scaled by exp(-d_nearest / T). -inf is written as null.

    python3 tests/reference/knn_lm.py > tests/reference/knn_lm.json
"""

import json

import numpy as np

rng = np.random.default_rng(20261123)
VOCAB, DIM, N, QUERIES = 13, 5, 12, 4

keys = rng.normal(size=(N, DIM)).astype(np.float32)
values = rng.integers(0, VOCAB, size=N)
values[:4] = 7  # several neighbours share a token
queries = rng.normal(size=(QUERIES, DIM)).astype(np.float32)
queries[0] = keys[3]  # a query sitting on a key: distance 0
logits = rng.normal(scale=2.0, size=(QUERIES, VOCAB))
lm = logits - np.log(np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True)) - logits.max(axis=1, keepdims=True)
lm = lm.astype(np.float32)  # hone's engine hands over f32 log-probabilities

SETTINGS = [
    (4, 0.3, 2.0, False),
    (12, 0.75, 0.5, False),
    (1, 0.5, 1.0, False),
    (3, 1.0, 1.0, False),
    (5, 0.0, 1.0, False),
    (4, 0.6, 3.0, True),
    (6, 1.0, 8.0, True),
]


def interpolate(lm_row, query, k, lam, temperature, adaptive):
    q = query.astype(np.float64)
    d = ((keys.astype(np.float64) - q) ** 2).sum(axis=1)
    order = np.lexsort((np.arange(N), d))[:k]
    if adaptive:
        lam = lam * np.exp(-d[order].min() / temperature)
    w = np.exp(-(d[order] - d[order].min()) / temperature)
    p_knn = np.zeros(VOCAB)
    np.add.at(p_knn, values[order], w / w.sum())
    p = lam * p_knn + (1.0 - lam) * np.exp(lm_row.astype(np.float64))
    with np.errstate(divide="ignore"):
        return np.log(p)


cases = []
for k, lam, temperature, adaptive in SETTINGS:
    for qi in range(QUERIES):
        out = interpolate(lm[qi], queries[qi], k, lam, temperature, adaptive)
        cases.append({
            "k": k,
            "lambda": lam,
            "temperature": temperature,
            "adaptive": adaptive,
            "query": qi,
            "expected": [None if np.isneginf(v) else float(v) for v in out],
        })

print(json.dumps({
    "keys": keys.tolist(),
    "values": values.tolist(),
    "queries": queries.tolist(),
    "lm": lm.tolist(),
    "cases": cases,
}, indent=1))
