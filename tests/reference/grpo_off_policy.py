"""Reference values for GRPO's off-policy correction (decoupled PPO clip
against the proximal policy, truncated importance weight to the behaviour
policy), computed with numpy independently of hone: the loss from its
definition, the gradient with respect to every token's logprob by central
finite differences. Writes grpo_off_policy.json beside this file.

    python3 tests/reference/grpo_off_policy.py
"""

import json
from pathlib import Path

import numpy as np

rng = np.random.default_rng(17)
EPS_LOW, EPS_HIGH, CAP, BETA = 0.2, 0.28, 2.0, 0.04


def sequence(n, off_policy):
    lp = -rng.uniform(0.05, 3.0, n)
    # Proximal: the starting policy, near the current one; behaviour: an
    # older version, further away (some tokens far enough to truncate).
    prox = lp + rng.normal(0, 0.25, n)
    behaviour = prox + rng.normal(0, 0.9, n)
    ref = lp + rng.normal(0, 0.3, n)
    return {
        "logprobs": lp.tolist(),
        "proximal": prox.tolist() if off_policy else None,
        "behaviour": behaviour.tolist(),
        "reference": ref.tolist(),
    }


def token_losses(seq, lp, advantage):
    behaviour = np.array(seq["behaviour"])
    if seq["proximal"] is not None:
        prox = np.array(seq["proximal"])
        w = np.minimum(np.exp(prox - behaviour), CAP)
        old = prox
    else:
        w = np.ones_like(lp)
        old = behaviour
    ratio = np.exp(lp - old)
    surrogate = np.minimum(ratio * advantage, np.clip(ratio, 1 - EPS_LOW, 1 + EPS_HIGH) * advantage)
    r = np.array(seq["reference"])
    kl = np.exp(r - lp) - (r - lp) - 1
    return -w * surrogate + BETA * kl


def loss(seqs, advantages, lps, aggregation):
    per = [token_losses(s, lp, a) for s, lp, a in zip(seqs, lps, advantages)]
    if aggregation == "token":
        return sum(x.sum() for x in per) / sum(len(x) for x in per)
    return np.mean([x.mean() for x in per])


seqs = [sequence(7, True), sequence(5, False), sequence(9, True)]
advantages = [1.3, -0.4, -0.9]
cases = {}
for aggregation in ["token", "sequence"]:
    lps = [np.array(s["logprobs"]) for s in seqs]
    value = loss(seqs, advantages, lps, aggregation)
    grads = []
    h = 1e-6
    for i, lp in enumerate(lps):
        g = []
        for t in range(len(lp)):
            up = [x.copy() for x in lps]
            down = [x.copy() for x in lps]
            up[i][t] += h
            down[i][t] -= h
            g.append((loss(seqs, advantages, up, aggregation) - loss(seqs, advantages, down, aggregation)) / (2 * h))
        grads.append(g)
    weights = np.concatenate([
        np.minimum(np.exp(np.array(s["proximal"]) - np.array(s["behaviour"])), CAP)
        for s in seqs if s["proximal"] is not None
    ])
    raw = np.concatenate([
        np.exp(np.array(s["proximal"]) - np.array(s["behaviour"])) for s in seqs if s["proximal"] is not None
    ])
    cases[aggregation] = {
        "loss": float(value),
        "grads": grads,
        "mean_is_weight": float(weights.mean()),
        "truncated_fraction": float((raw > CAP).mean()),
    }

out = {
    "numpy": np.__version__,
    "options": {"epsilon_low": EPS_LOW, "epsilon_high": EPS_HIGH, "is_cap": CAP, "kl_beta": BETA},
    "sequences": seqs,
    "advantages": advantages,
    "cases": cases,
}
(Path(__file__).parent / "grpo_off_policy.json").write_text(json.dumps(out, indent=1) + "\n")
print({k: (v["loss"], v["truncated_fraction"]) for k, v in cases.items()})
