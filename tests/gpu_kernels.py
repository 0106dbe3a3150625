"""DSL kernels shared by the GPU tests (tests/test_golden_gpu_passes.py, whose golden
trees in tests/golden/ are built from them, and tests/test_gpu_pipeline.py)."""
import polycomp as pc

N, M, K = pc.sym("N M K")
Nb, C, H, W, F = pc.sym("Nb C H W F")


@pc.tensor_expr
def matmul_bias_relu(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"],
                     bias: pc.Tensor[(M,), "float32"]):
    k = pc.reduce_axis(K, "k")
    Cm = pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = pc.compute((N, M), lambda i, j: Cm[i, j] + bias[j], name="D")
    return pc.compute((N, M), lambda i, j: pc.max(D[i, j], 0.0), name="E")


@pc.tensor_expr
def add_row(X: pc.Tensor[(N, M), "float32"], b: pc.Tensor[(M,), "float32"]):
    return pc.compute((N, M), lambda i, j: X[i, j] + b[j], name="Y")


@pc.tensor_expr
def row_softmax(X: pc.Tensor[(N, M), "float32"]):
    j = pc.reduce_axis(M, "j")
    mx = pc.compute((N,), lambda i: pc.max(X[i, j], axis=j), name="mx")
    e = pc.compute((N, M), lambda i, c: pc.exp(X[i, c] - mx[i]), name="e")
    j2 = pc.reduce_axis(M, "j2")
    s = pc.compute((N,), lambda i: pc.sum(e[i, j2], axis=j2), name="s")
    return pc.compute((N, M), lambda i, c: e[i, c] / s[i], name="y")


@pc.tensor_expr
def conv_pad(X: pc.Tensor[(Nb, C, H, W), "float32"], Wt: pc.Tensor[(F, C, 3, 3), "float32"]):
    """3x3 convolution whose zero padding is a separate prologue stage P."""
    P = pc.compute((Nb, C, H + 2, W + 2), lambda n, c, h, w: pc.select(
        (h >= 1) & (h < H + 1) & (w >= 1) & (w < W + 1), X[n, c, h - 1, w - 1], 0.0), name="P")
    rc, rh, rw = pc.reduce_axis(C, "rc"), pc.reduce_axis(3, "rh"), pc.reduce_axis(3, "rw")
    return pc.compute((Nb, F, H, W), lambda n, f, h, w: pc.sum(
        P[n, rc, h + rh, w + rw] * Wt[f, rc, rh, rw], axis=[rc, rh, rw]), name="Y")
