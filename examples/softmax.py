"""Row softmax of an (N, M) matrix, written with the DSL directly.

    polycomp run examples/softmax.py --shape N=64,M=1000
    polycomp compile examples/softmax.py --target cuda --check

Four stages: the row maximum, exp(x - max), the row sum, the division.  A reduction is
the whole body of its compute stage, so each one is a stage of its own.
"""
import numpy as np

import polycomp as pc

N, M = pc.sym("N M")


@pc.tensor_expr
def softmax(X: pc.Tensor[(N, M), "float32"]):
    j = pc.reduce_axis(M, "j")
    row_max = pc.compute((N,), lambda i: pc.max(X[i, j], axis=j), name="row_max")
    e = pc.compute((N, M), lambda i, k: pc.exp(X[i, k] - row_max[i]), name="e")
    j2 = pc.reduce_axis(M, "j2")
    row_sum = pc.compute((N,), lambda i: pc.sum(e[i, j2], axis=j2), name="row_sum")
    return pc.compute((N, M), lambda i, k: e[i, k] / row_sum[i], name="Y")


def reference_softmax(X):
    """numpy reference used by `polycomp run`."""
    e = np.exp(X - X.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
