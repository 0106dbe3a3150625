"""Layer normalisation over the last dimension of an (N, D) matrix, DSL only.

    polycomp run examples/layernorm.py --shape N=32,D=768
    polycomp explain examples/layernorm.py --target cuda

y = (x - mean) * rsqrt(var + eps) * gamma + beta.  The row sum and the sum of squared
deviations are two reduction stages; the scaling by 1/D (from the symbolic extent D)
happens where they are used, because a reduction must be the whole body of its stage.
"""
import numpy as np

import polycomp as pc

N, D = pc.sym("N D")
EPS = 1e-5


@pc.tensor_expr
def layernorm(X: pc.Tensor[(N, D), "float32"], gamma: pc.Tensor[(D,), "float32"],
              beta: pc.Tensor[(D,), "float32"]):
    inv_d = 1.0 / pc.cast(D, "float32")
    k = pc.reduce_axis(D, "k")
    # a reduction is the whole body of its stage: sum first, scale where it is used
    total = pc.compute((N,), lambda i: pc.sum(X[i, k], axis=k), name="total")
    k2 = pc.reduce_axis(D, "k2")
    sq = pc.compute((N,), lambda i: pc.sum((X[i, k2] - total[i] * inv_d) ** 2, axis=k2),
                    name="sq")
    return pc.compute((N, D), lambda i, j: (X[i, j] - total[i] * inv_d)
                      * pc.rsqrt(sq[i] * inv_d + EPS) * gamma[j] + beta[j], name="Y")


def reference_layernorm(X, gamma, beta):
    """numpy reference used by `polycomp run`."""
    mu = X.mean(axis=1, keepdims=True)
    var = ((X - mu) ** 2).mean(axis=1, keepdims=True)
    return ((X - mu) / np.sqrt(var + EPS) * gamma + beta).astype(np.float32)
