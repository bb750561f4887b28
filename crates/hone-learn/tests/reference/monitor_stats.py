"""Reference values for the tests behind hone's monitors and gate, computed
with scipy (an implementation independent of hone's Rust code) on fixed
samples. Run from the repository root to regenerate:

    python3 crates/hone-learn/tests/reference/monitor_stats.py

It writes monitor_stats.json beside this file; `tests/stats.rs` reads it.
"""
import json
import os

import numpy as np
from scipy import stats

rng = np.random.default_rng(16)
cases = {}

# Latencies like those recorded on identical fake upstreams:
# 23 champion episodes around 39.4 ms, 17 canary episodes around 41.9 ms.
champion = np.round(rng.normal(39.4, 4.0, 23), 3)
canary = np.round(rng.normal(41.9, 4.0, 17), 3)
# A clear regression, and two small samples with unequal spread.
slow = np.round(rng.normal(80.0, 10.0, 20), 3)
small_a = np.round(rng.normal(1.0, 0.2, 6), 4)
small_b = np.round(rng.normal(1.3, 0.6, 5), 4)

welch = []
for name, a, b in [
    ("latency_of_identical_upstreams", champion, canary),
    ("clear_regression", champion, slow),
    ("small_unequal", small_a, small_b),
    ("no_change_reversed", canary, champion),
]:
    # One-sided: is b's mean greater than a's? (Welch's t-test)
    p = stats.ttest_ind(b, a, equal_var=False, alternative="greater").pvalue
    welch.append({"name": name, "a": a.tolist(), "b": b.tolist(), "p": float(p)})
cases["welch_greater"] = welch

# Exact two-sided sign test (binomial test with p = 0.5).
cases["sign_test"] = [
    {"wins": w, "losses": l, "p": float(stats.binomtest(w, w + l, 0.5).pvalue)}
    for w, l in [(9, 1), (6, 0), (3, 3), (12, 4)]
]

# One-sided Fisher exact test: is A's pass rate above B's? (the gate's
# confirmation of a regressed instance over its samples and re-runs, and
# the rate monitors: a canary's behaviour rate above its champion's; the
# last two are a recorded canary window, one invalid tool call in 24
# episodes against none in 87, and a real rise)
cases["fisher_greater"] = [
    {"passes_a": a, "runs_a": n, "passes_b": b, "runs_b": m,
     "p": float(stats.fisher_exact([[a, n - a], [b, m - b]], alternative="greater").pvalue)}
    for a, n, b, m in [(3, 3, 0, 3), (3, 5, 0, 5), (6, 6, 0, 6), (5, 6, 1, 6), (0, 4, 0, 4), (4, 4, 4, 4), (7, 9, 2, 8), (1, 24, 0, 87), (6, 24, 0, 87)]
]

# Promotion (the deployment's rule, `watch::Online`): online rewards of a
# canary and its champion, as Welch's one-sided tests on them and the call
# the rule makes at confidence 0.95. `p_champion_better`: is the
# champion's mean above the canary's; `p_within_margin`: is the canary's
# mean above the champion's less the margin (non-inferiority).
def call(canary, champion, canary_episodes, margin, max_episodes):
    better = stats.ttest_ind(champion, canary, equal_var=False, alternative="greater").pvalue
    within = None if margin is None else stats.ttest_ind(
        canary, champion - margin, equal_var=False, alternative="greater").pvalue
    if len(canary) < canary_episodes:
        verdict = "wait"
    elif better < 0.05:
        verdict = "roll_back"
    elif margin is None or within < 0.05:
        verdict = "promote"
    elif len(canary) < max_episodes:
        verdict = "wait"
    else:
        verdict = "roll_back"
    return float(better), None if within is None else float(within), verdict

def passes(k, n):
    """n 0/1 rewards, k of them 1 (a t-test does not see their order)."""
    return np.array([1.0] * k + [0.0] * (n - k))


level = passes(30, 60)
promotion = []
for name, canary, champion, canary_episodes, margin, max_episodes in [
    # A little below a coin-flip champion, too noisy to tell apart:
    # promoted by default; with a 0.05 margin still collecting below the
    # cap and rolled back at it.
    ("slightly_below_default", passes(17, 40), level, 24, None, None),
    ("slightly_below_margin_before_cap", passes(17, 40), level, 24, 0.05, 80),
    ("slightly_below_margin_at_cap", passes(17, 40), level, 24, 0.05, 40),
    # Rewards that vary little: level within a 0.1 margin is shown at once.
    ("tight_within_margin", np.round(rng.normal(0.70, 0.05, 30), 4),
     np.round(rng.normal(0.71, 0.05, 50), 4), 24, 0.1, 96),
    # Clearly better, and clearly worse (rolled back under either rule).
    ("better_margin", passes(27, 30), level, 24, 0.05, 96),
    ("worse_default", passes(5, 30), level, 24, None, None),
    ("worse_margin", passes(5, 30), level, 24, 0.05, 96),
    # Too few canary episodes: nothing is decided.
    ("too_few", passes(9, 10), level, 24, 0.05, 96),
]:
    better, within, verdict = call(canary, champion, canary_episodes, margin, max_episodes)
    promotion.append({"name": name, "canary": canary.tolist(), "champion": champion.tolist(),
                      "canary_episodes": canary_episodes, "margin": margin, "max_episodes": max_episodes,
                      "p_champion_better": better, "p_within_margin": within, "call": verdict})
cases["promotion"] = promotion

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "monitor_stats.json")
with open(out, "w") as f:
    json.dump({"scipy": __import__("scipy").__version__, "cases": cases}, f, indent=1)
    f.write("\n")
print(out)
