# SPDX-License-Identifier: Apache-2.0
# The coefficient fits of vmath.h: minimax-like (Lawson's iteratively reweighted
# least squares on a dense grid against mpmath), then rounded to float32.
# Run: /usr/bin/python3 tools/fit.py   (needs python3-numpy, python3-mpmath)
from typing import Any

import mpmath as mp
import numpy as np

mp.mp.dps = 40

def lawson(A, y, w0, iters=400):
    w = np.ones(len(y)) / len(y)
    c = None
    for _ in range(iters):
        sw = np.sqrt(w) * w0
        c, *_ = np.linalg.lstsq(A * sw[:, None], y * sw, rcond=None)
        e = np.abs((A @ c - y) * w0)
        w = w * e
        w /= w.sum()
    return c, np.max(np.abs((A @ c - y) * w0))

def fit_exp(deg):
    # e^r = 1 + r + r^2 (c2 + c3 r + ...), minimax relative error on |r| <= ln2/2
    h = float(mp.log(2) / 2)
    r = np.linspace(-h, h, 20001)
    er = np.array([float(mp.exp(v)) for v in r])
    y = (er - 1 - r)
    A = np.stack([r ** (k + 2) for k in range(deg - 1)], 1)
    c, err = lawson(A, y, 1 / er)
    return c, err

for deg in (5, 6):
    c, err = fit_exp(deg)
    print("exp deg", deg, "max rel err", err, "coeffs c2..:", [repr(float(np.float32(v))) for v in c])

def fit_erfcx(T=10.5, p=4, q=5, iters=60):
    # erfc(t) e^(t^2) = P(t) / Q(t), Q(0) = 1, minimax relative error on [0, T]
    # (linearised Lawson iterations, reweighted by 1/Q)
    t = np.linspace(0, T, 6001)
    ex = np.array([float(mp.erfc(v) * mp.exp(v * v)) for v in t])
    wq = np.ones(len(t))
    w = np.ones(len(t)) / len(t)
    best: tuple[Any, Any] | None = None
    for _ in range(iters):
        A = np.concatenate([np.stack([t ** k for k in range(p + 1)], 1),
                            np.stack([-ex * t ** k for k in range(1, q + 1)], 1)], 1)
        for _ in range(40):
            sw = np.sqrt(w) * wq / ex
            c, *_ = np.linalg.lstsq(A * sw[:, None], ex * sw, rcond=None)
            e = np.abs((A @ c - ex) * wq / ex)
            w = w * e
            w /= w.sum()
        P = np.polyval(c[:p + 1][::-1], t)
        Q = 1 + t * np.polyval(c[p + 1:][::-1], t)
        err = np.abs((P / Q - ex) / ex).max()
        if best is None or err < best[0]:
            best = (err, c.copy())
        wq = 1 / np.abs(Q)
    assert best is not None  # iters > 0: the first iteration sets it
    err, c = best
    return c[:p + 1], np.concatenate([[1.0], c[p + 1:]]), err

P, Q, err = fit_erfcx()
print("erfcx P4/Q5 on [0, 10.5] max rel err", err)
print("  P/2:", [repr(float(np.float32(v / 2))) for v in P])
print("  Q:  ", [repr(float(np.float32(v))) for v in Q])
