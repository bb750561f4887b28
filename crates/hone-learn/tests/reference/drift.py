"""Reference values for the drift measure: the Jensen-Shannon divergence
(base 2) of two word-count vectors, computed with scipy, which returns the
distance (its square root). Writes drift.json beside this file.

    python3 crates/hone-learn/tests/reference/drift.py
"""

import json
from pathlib import Path

import numpy as np
import scipy
from scipy.spatial.distance import jensenshannon

cases = [
    ({"what": 3, "is": 3, "#": 6}, {"what": 3, "is": 3, "#": 6}),
    ({"what": 3, "is": 3, "#": 6}, {"translate": 2, "to": 2, "french": 2, "hello": 1}),
    ({"a": 5, "b": 1, "c": 2}, {"a": 1, "b": 4, "d": 3}),
    ({"refund": 1, "order": 7, "#": 9, "where": 4}, {"order": 9, "#": 8, "where": 6, "status": 2}),
]
out = []
for p, q in cases:
    keys = sorted(set(p) | set(q))
    pv = np.array([p.get(k, 0) for k in keys], dtype=float)
    qv = np.array([q.get(k, 0) for k in keys], dtype=float)
    out.append({"p": p, "q": q, "divergence": float(jensenshannon(pv, qv, base=2) ** 2)})
(Path(__file__).parent / "drift.json").write_text(
    json.dumps({"scipy": scipy.__version__, "cases": out}, indent=1) + "\n"
)
print([round(c["divergence"], 6) for c in out])
