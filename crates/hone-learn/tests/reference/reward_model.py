"""Reference values for hone's reward model head and its quality measures
(`reward_model.rs`), computed with Python's standard library only by other
methods than hone's: the logistic head by plain gradient descent to
convergence (hone: Newton's method), the AUC by counting every
positive-negative pair (hone: rank sums), Spearman's correlation from
ranks computed here. Run from the repository root to regenerate:

    python3 crates/hone-learn/tests/reference/reward_model.py

It writes reward_model.json beside this file; `tests/stats.rs` reads it.
"""
import json
import math
import os
import random

L2 = 1.0
rng = random.Random(64)


def sigmoid(t):
    return 1 / (1 + math.exp(-t)) if t >= 0 else math.exp(t) / (1 + math.exp(t))


def fit(x, y, l2):
    n, d = len(x), len(x[0])
    mean = [sum(r[j] for r in x) / n for j in range(d)]
    scale = []
    for j in range(d):
        var = sum((r[j] - mean[j]) ** 2 for r in x) / n
        scale.append(math.sqrt(var) if var > 1e-12 else 1.0)
    z = [[1.0] + [(r[j] - mean[j]) / scale[j] for j in range(d)] for r in x]
    theta = [0.0] * (d + 1)
    for step in range(200000):
        g = [0.0] * (d + 1)
        for row, t in zip(z, y):
            p = sigmoid(sum(a * b for a, b in zip(row, theta)))
            for i in range(d + 1):
                g[i] += (p - t) * row[i] / n
        for i in range(1, d + 1):
            g[i] += l2 / n * theta[i]
        if max(abs(v) for v in g) < 1e-13:
            break
        theta = [t - 2.0 * v for t, v in zip(theta, g)]
    else:
        raise SystemExit("gradient descent did not converge")
    print(f"gradient descent converged in {step} steps (largest gradient below 1e-13)")
    return mean, scale, theta


def probability(model, r):
    mean, scale, theta = model
    return sigmoid(theta[0] + sum(w * (v - m) / s for w, v, m, s in zip(theta[1:], r, mean, scale)))


def auc(scores, labels):
    pos = [s for s, l in zip(scores, labels) if l]
    neg = [s for s, l in zip(scores, labels) if not l]
    total = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return total / (len(pos) * len(neg))


def average_ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a, b):
    ra, rb = average_ranks(a), average_ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))


def ece(p, outcomes, bins):
    n = len(p)
    total = 0.0
    for b in range(bins):
        members = [(q, o) for q, o in zip(p, outcomes) if min(int(q * bins), bins - 1) == b]
        if members:
            mp = sum(q for q, _ in members) / len(members)
            rate = sum(1.0 for _, o in members if o) / len(members)
            total += len(members) / n * abs(mp - rate)
    return total


# Three features, the first two informative, the third noise; labels drawn
# from a known logistic model, so the classes overlap (no separation).
def draw(n):
    rows, labels, rewards = [], [], []
    for _ in range(n):
        r = [rng.gauss(0, 1), rng.gauss(2, 3), rng.gauss(-1, 0.5)]
        passed = rng.random() < sigmoid(1.2 * r[0] - 0.4 * r[1] + 0.3)
        rows.append([round(v, 6) for v in r])
        labels.append(passed)
        rewards.append(1.0 if passed else -0.5)
    return rows, labels, rewards


train_x, train_y, train_r = draw(60)
test_x, test_y, test_r = draw(40)
model = fit(train_x, [1.0 if v else 0.0 for v in train_y], L2)
probabilities = [probability(model, r) for r in test_x]
passed_mean = sum(r for r, l in zip(train_r, train_y) if l) / sum(1 for l in train_y if l)
failed_mean = sum(r for r, l in zip(train_r, train_y) if not l) / sum(1 for l in train_y if not l)
predicted = [p * passed_mean + (1 - p) * failed_mean for p in probabilities]
# Ties: scores with repeated values, to check the half-counting.
tied_scores = [0.1, 0.4, 0.4, 0.35, 0.8, 0.8, 0.2, 0.9]
tied_labels = [False, True, False, True, True, False, False, True]
out = {
    "l2": L2,
    "train": {"x": train_x, "passed": train_y, "rewards": train_r},
    "test": {"x": test_x, "passed": test_y, "rewards": test_r},
    "weights": model[2][1:],
    "bias": model[2][0],
    "probabilities": probabilities,
    "auc": auc(probabilities, test_y),
    "spearman": spearman(predicted, test_r),
    "calibration_error": ece(probabilities, test_y, 10),
    "tied": {"scores": tied_scores, "labels": tied_labels, "auc": auc(tied_scores, tied_labels),
             "spearman_with_ranks": spearman(tied_scores, list(range(len(tied_scores))))},
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reward_model.json")
with open(path, "w") as f:
    json.dump(out, f, indent=1)
print(f"wrote {path}: AUC {out['auc']:.4f}, Spearman {out['spearman']:.4f}, ECE {out['calibration_error']:.4f}")
