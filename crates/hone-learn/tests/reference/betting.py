"""Reference values for hone's canary test by betting (`stats::betting`),
computed here from the definitions with Python's standard library only,
each quantity recomputed from scratch (no running sums shared with hone):
runs of one arm paired in turn, aGRAPA bets on the pairs' normalised
differences (Waudby-Smith and Ramdas, "Estimating means of bounded random
variables by betting"), and the confidence sequence on a grid. Run from
the repository root to regenerate:

    python3 crates/hone-learn/tests/reference/betting.py

It writes betting.json beside this file; `tests/stats.rs` reads it.
"""
import json
import math
import os
import random

MAX_BET = 0.75
PRIOR_VARIANCE = 0.25
GRID = 200


def pairs(stream):
    """stream: [(arm, value)] in start order -> differences canary - champion."""
    runs = []
    for arm, value in stream:
        if runs and runs[-1][0] == arm:
            runs[-1][1].append(value)
        else:
            runs.append((arm, [value]))
    finished = runs[:-1]  # the last run may still grow
    out = []
    for k in range(0, len(finished) - 1, 2):
        a, b = finished[k], finished[k + 1]
        mean = lambda xs: sum(xs) / len(xs)
        canary, champion = (a, b) if a[0] == "canary" else (b, a)
        out.append(mean(canary[1]) - mean(champion[1]))
    return out


def estimates(xs):
    """Predictable mean and variance before each x."""
    out = []
    for i in range(len(xs)):
        past = xs[:i]
        mean = sum(past) / (len(past) + 1)
        squares = 0.0
        for j in range(len(past)):
            before = sum(past[:j]) / (j + 1)
            squares += (past[j] - before) ** 2
        out.append((mean, (PRIOR_VARIANCE + squares) / (len(past) + 1)))
    return out


def wealth(xs, threshold, up, est):
    """Log wealth after each x of betting the mean is above (up) or below threshold."""
    log_w, path = 0.0, []
    for x, (mean, variance) in zip(xs, est):
        edge = mean - threshold if up else threshold - mean
        room = 1 + threshold if up else 1 - threshold
        if room > 0:
            lam = min(max(edge / (variance + edge * edge), 0.0), MAX_BET / room)
            outcome = x - threshold if up else threshold - x
            log_w += math.log(1 + lam * outcome)
        path.append(log_w)
    return path


def compare(champion, canary, low, high, least_gain, alpha):
    width = high - low
    stream = sorted(
        [(t, 0, i, "champion", min(max(r, low), high)) for i, (t, r) in enumerate(champion)]
        + [(t, 1, i, "canary", min(max(r, low), high)) for i, (t, r) in enumerate(canary)]
    )
    xs = [max(-1.0, min(1.0, d / width)) for d in pairs([(arm, r) for _, _, _, arm, r in stream])]
    est = estimates(xs)
    peak = lambda path: math.exp(max([0.0] + path))
    up0 = wealth(xs, 0.0, True, est)
    grid = [-1 + 2 * k / GRID for k in range(1, GRID)]  # the ends bound every mean
    need = math.log(2 / alpha)
    low_bound = -1.0
    for m in grid:
        if max([0.0] + wealth(xs, m, True, est)) >= need:
            low_bound = m
        else:
            break
    high_bound = 1.0
    for m in reversed(grid):
        if max([0.0] + wealth(xs, m, False, est)) >= need:
            high_bound = m
        else:
            break
    n = len(xs)
    return {
        "pairs": n,
        "difference": sum(xs) / n * width if n else None,
        "wealth": math.exp(up0[-1]) if n else 1.0,
        "peak_wealth": peak(up0),
        "peak_wealth_worse": peak(wealth(xs, 0.0, False, est)),
        "peak_wealth_short": peak(wealth(xs, min(max(least_gain / width, 0), 1), False, est)),
        "interval": [low_bound * width, max(high_bound, low_bound) * width] if n else None,
    }


def arm(rng, n, share, p_champion, p_canary, start=0):
    """n episodes, each the canary's with probability share; rewards +1 / -0.5."""
    champion, canary = [], []
    for i in range(n):
        t = start + 10 * i
        if rng.random() < share:
            canary.append((t, 1.0 if rng.random() < p_canary else -0.5))
        else:
            champion.append((t, 1.0 if rng.random() < p_champion else -0.5))
    return champion, canary


def main():
    rng = random.Random(7)
    cases = []
    for name, n, share, pc, pk, least in [
        ("clearly_better", 300, 0.3, 0.5, 0.9, 0.0),
        ("clearly_worse", 300, 0.3, 0.8, 0.4, 0.0),
        ("no_difference", 400, 0.3, 0.6, 0.6, 0.0),
        ("small_gain_short", 500, 0.5, 0.7, 0.72, 0.3),
        ("few", 12, 0.5, 0.5, 0.5, 0.0),
    ]:
        champion, canary = arm(rng, n, share, pc, pk)
        out = compare(champion, canary, -0.5, 1.0, least, 0.05)
        cases.append({"name": name, "champion": champion, "canary": canary, "range": [-0.5, 1.0],
                      "least_gain": least, "alpha": 0.05, **out})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "betting.json")
    with open(path, "w") as f:
        json.dump({"cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
