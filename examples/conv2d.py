"""2-D convolution (NCHW, 3x3 filter, stride 1, zero padding 1), DSL only.

    polycomp run examples/conv2d.py --shape B=2,C=8,F=16,H=17,W=23
    polycomp compile examples/conv2d.py --target cuda --check

The padding is a ``select``: the read of X is guarded by the bounds test, so the
polyhedral model restricts that access to the guard and no out-of-bounds element is
ever read.  Batch, channels and the image size are symbolic; the filter size is fixed.
"""
import numpy as np

import polycomp as pc

B, C, F, H, W = pc.sym("B C F H W")
R = S = 3
PAD = 1


@pc.tensor_expr
def conv2d(X: pc.Tensor[(B, C, H, W), "float32"], Wt: pc.Tensor[(F, C, R, S), "float32"]):
    c = pc.reduce_axis(C, "c")
    r = pc.reduce_axis(R, "r")
    s = pc.reduce_axis(S, "s")

    def x_padded(n, ci, y, x):
        inside = (y >= 0) & (y < H) & (x >= 0) & (x < W)
        return pc.select(inside, X[n, ci, y, x], 0.0)

    return pc.compute(
        (B, F, H, W),
        lambda n, f, y, x: pc.sum(x_padded(n, c, y + r - PAD, x + s - PAD) * Wt[f, c, r, s],
                                  axis=[c, r, s]),
        name="Y")


def reference_conv2d(X, Wt):
    """numpy reference used by `polycomp run`."""
    n, _, h, w = X.shape
    xp = np.pad(X, ((0, 0), (0, 0), (PAD, PAD), (PAD, PAD)))
    out = np.zeros((n, Wt.shape[0], h, w), np.float64)
    for r in range(R):
        for s in range(S):
            out += np.einsum("bchw,fc->bfhw", xp[:, :, r:r + h, s:s + w], Wt[:, :, r, s])
    return out.astype(np.float32)
