"""Reference values for hone's always-valid canary test (the mixture
sequential probability ratio test of `stats::mixture_sprt`), computed here
from the formulas of Johari, Pekelis and Walsh ("Always valid inference")
with Python's standard library only, recomputing every look from scratch:
an implementation independent of hone's running sums. Run from the
repository root to regenerate:

    python3 crates/hone-learn/tests/reference/sequential.py

It writes sequential.json beside this file; `tests/stats.rs` reads it.
"""
import json
import math
import os
import random
import statistics

ALPHA = 0.05


def msprt(a, b, tau, alpha, min_each):
    """Looks after each of b's observations (time order), with a's made up
    to then; returns looks, last difference, p and the intersected interval."""
    a = sorted(a)
    b = sorted(b)
    looks, difference, p, interval = 0, None, 1.0, None
    for k in range(len(b)):
        at = b[k][0]
        bs = [x for _, x in b[: k + 1]]
        as_ = [x for t, x in a if t <= at]
        if len(as_) < max(min_each, 2) or len(bs) < max(min_each, 2):
            continue
        va = statistics.variance(as_) / len(as_)
        vb = statistics.variance(bs) / len(bs)
        v = va + vb
        d = statistics.fmean(bs) - statistics.fmean(as_)
        looks += 1
        difference = d
        if v <= 0:
            continue
        t2 = tau * tau
        lam = math.sqrt(v / (v + t2)) * math.exp(t2 * d * d / (2 * v * (v + t2)))
        p = min(p, min(1.0, 1.0 / lam))
        half = math.sqrt(v * (v + t2) / t2 * (2 * math.log(1 / alpha) + math.log((v + t2) / v)))
        lo, hi = d - half, d + half
        interval = (lo, hi) if interval is None else (max(interval[0], lo), min(interval[1], hi))
    return looks, difference, p, interval


def rewards(rng, n, p_accept, start, step):
    """Users' rewards as the demo's spec makes them: 1 when accepted,
    -0.5 otherwise, one every `step` ms from `start`."""
    return [(start + i * step, 1.0 if rng.random() < p_accept else -0.5) for i in range(n)]


rng = random.Random(64)
cases = []
for name, n_champion, p_champion, n_canary, p_canary, tau in [
    ("clearly_better", 140, 0.45, 60, 0.85, 0.2),
    ("clearly_worse", 140, 0.6, 60, 0.2, 0.2),
    ("the_same", 200, 0.5, 80, 0.5, 0.2),
    ("slightly_better_small_tau", 160, 0.5, 70, 0.6, 0.05),
    ("few_looks", 12, 0.5, 11, 0.9, 0.3),
]:
    # The champion serves about twice as often, interleaved in time.
    champion = rewards(rng, n_champion, p_champion, 0, 5)
    canary = rewards(rng, n_canary, p_canary, 2, 5 * n_champion // n_canary)
    looks, difference, p, interval = msprt(champion, canary, tau, ALPHA, 10)
    cases.append(
        {
            "name": name,
            "champion": champion,
            "canary": canary,
            "tau": tau,
            "alpha": ALPHA,
            "min_each": 10,
            "looks": looks,
            "difference": difference,
            "p": p,
            "interval": interval,
        }
    )

# Always valid: under no difference, the share of runs ever rejected at any
# look stays below alpha (a fixed-horizon test peeked at every look does not).
ever = 0
runs = 400
for _ in range(runs):
    a = rewards(rng, 150, 0.5, 0, 4)
    b = rewards(rng, 150, 0.5, 1, 4)
    _, _, p, _ = msprt(a, b, 0.2, ALPHA, 10)
    ever += p < ALPHA
# The same at the demo's plateau, where 90% of users accept and a canary's
# first ten episodes are often all accepted (its variance then estimated
# at zero): the champion's 200 episodes against the canary's 96 (its cap).
ever_plateau = 0
for _ in range(runs):
    a = rewards(rng, 200, 0.9, 0, 3)
    b = rewards(rng, 96, 0.9, 1, 7)
    _, _, p, _ = msprt(a, b, 0.2, ALPHA, 10)
    ever_plateau += p < ALPHA
out = {
    "cases": cases,
    "null_runs": runs,
    "null_ever_rejected": ever,
    "null_plateau_ever_rejected": ever_plateau,
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sequential.json")
with open(path, "w") as f:
    json.dump(out, f, indent=1)
print(
    f"wrote {path}: {len(cases)} cases; under no difference {ever} of {runs} runs ever rejected "
    f"(at 90% acceptance: {ever_plateau})"
)
