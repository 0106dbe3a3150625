"""Chain kernels shared by the chain tests and benchmarks/chains.py."""
import polycomp as pc
from polycomp.frontend import ops

B, M, N, K, L = pc.sym("B M N K L")


@pc.tensor_expr
def bmm_chain(X: pc.Tensor[(B, M, K), "float32"], Y: pc.Tensor[(B, K, L), "float32"],
              Z: pc.Tensor[(B, L, N), "float32"]):
    return ops.batch_matmul(ops.batch_matmul(X, Y, name="T"), Z, name="O")


@pc.tensor_expr
def bmm_softmax_chain(X: pc.Tensor[(B, M, K), "float32"], Y: pc.Tensor[(B, K, L), "float32"],
                      Z: pc.Tensor[(B, L, N), "float32"]):
    s = ops.softmax(ops.batch_matmul(X, Y, name="T"), axis=-1, name="S")
    return ops.batch_matmul(s, Z, name="O")


@pc.tensor_expr
def causal_attention(Q: pc.Tensor[(B, M, K), "float32"], KT: pc.Tensor[(B, K, L), "float32"],
                     V: pc.Tensor[(B, L, N), "float32"]):
    t = ops.batch_matmul(Q, KT, name="T")
    sc = pc.compute((B, M, L), lambda b, i, j: pc.select(j > i, float("-inf"), t[b, i, j] * 0.125),
                    name="Sc")
    return ops.batch_matmul(ops.softmax(sc, axis=-1, name="S"), V, name="O")


@pc.tensor_expr
def masked_attention(Q: pc.Tensor[(B, M, K), "float32"], KT: pc.Tensor[(B, K, L), "float32"],
                     V: pc.Tensor[(B, L, N), "float32"], mask: pc.Tensor[(M, L), "float32"]):
    t = ops.batch_matmul(Q, KT, name="T")
    sc = pc.compute((B, M, L), lambda b, i, j: t[b, i, j] + mask[i, j], name="Sc")
    return ops.batch_matmul(ops.softmax(sc, axis=-1, name="S"), V, name="O")


@pc.tensor_expr
def attention_k_rows(Q: pc.Tensor[(B, M, K), "float32"], Kr: pc.Tensor[(B, L, K), "float32"],
                     V: pc.Tensor[(B, L, N), "float32"]):
    """softmax(Q K^T) V with K stored as rows [B, L, K] (as models store it)."""
    k = pc.reduce_axis(K, "k")
    t = pc.compute((B, M, L), lambda b, i, j: pc.sum(Q[b, i, k] * Kr[b, j, k], axis=k),
                   name="T")
    return ops.batch_matmul(ops.softmax(t, axis=-1, name="S"), V, name="O")


@pc.tensor_expr
def mm_relu_chain(X: pc.Tensor[(M, K), "float32"], Y: pc.Tensor[(K, L), "float32"],
                  Z: pc.Tensor[(L, N), "float32"]):
    t = ops.matmul(X, Y, name="T")
    r = pc.compute((M, L), lambda i, j: pc.max(t[i, j], 0.0), name="R")
    return ops.matmul(r, Z, name="O")


def np_softmax(t):
    import numpy as np
    with np.errstate(invalid="ignore"):
        e = np.exp(t - t.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


def reference(name, *arrays):
    """numpy's unfused result of the kernel ``name``."""
    import numpy as np
    if name == "bmm_chain":
        x, y, z = arrays
        return (x @ y) @ z
    if name == "bmm_softmax_chain":
        x, y, z = arrays
        return np_softmax(x @ y) @ z
    if name == "causal_attention":
        q, kt, v = arrays
        t = (q @ kt) * np.float32(0.125)
        i, j = np.meshgrid(np.arange(t.shape[-2]), np.arange(t.shape[-1]), indexing="ij")
        return np_softmax(np.where(j > i, np.float32(-np.inf), t)) @ v
    if name == "masked_attention":
        q, kt, v, mask = arrays
        return np_softmax(q @ kt + mask) @ v
    if name == "attention_k_rows":
        q, kr, v = arrays
        return np_softmax(q @ kr.transpose(0, 2, 1)) @ v
    if name == "mm_relu_chain":
        x, y, z = arrays
        return np.maximum(x @ y, 0) @ z
    raise KeyError(name)


# ---- conv chains (scheduler/chain/conv_*.py): NCHW, stride 1, constant windows
Nb, C, H, W, F1, F2 = pc.sym("Nb C H W F1 F2")


@pc.tensor_expr
def conv3_bias_relu_conv1(X: pc.Tensor[(Nb, C, H, W), "float32"],
                          W1: pc.Tensor[(F1, C, 3, 3), "float32"],
                          b1: pc.Tensor[(F1,), "float32"],
                          W2: pc.Tensor[(F2, F1, 1, 1), "float32"]):
    """3x3 'same' then bias, relu, then 1x1: no halo."""
    t = ops.conv2d_nchw(X, W1, padding=1, name="T")
    s = ops.relu(ops.bias_add(t, b1, axis=1, name="Bi"), name="R")
    return ops.conv2d_nchw(s, W2, name="O")


@pc.tensor_expr
def conv1_relu_conv3(X: pc.Tensor[(Nb, C, H, W), "float32"],
                     W1: pc.Tensor[(F1, C, 1, 1), "float32"],
                     W2: pc.Tensor[(F2, F1, 3, 3), "float32"]):
    """1x1 then relu then 3x3 'same': the tile of T needs a one-pixel halo."""
    t = ops.conv2d_nchw(X, W1, name="T")
    return ops.conv2d_nchw(ops.relu(t, name="R"), W2, padding=1, name="O")


@pc.tensor_expr
def conv3_conv3_valid(X: pc.Tensor[(Nb, C, H, W), "float32"],
                      W1: pc.Tensor[(F1, C, 3, 3), "float32"],
                      W2: pc.Tensor[(F2, F1, 3, 3), "float32"]):
    """3x3 'valid' twice (no padding anywhere; the output is (H-4) x (W-4))."""
    t = ops.conv2d_nchw(X, W1, name="T")
    return ops.conv2d_nchw(t, W2, name="O")


def np_conv2d(x, w, pad):
    """NCHW cross-correlation, stride 1, zero padding ``pad`` (float64 accumulation)."""
    import numpy as np
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad), np.float64)
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, f, oh, ow), np.float64)
    for a in range(kh):
        for b in range(kw):
            out += np.einsum("nchw,fc->nfhw", xp[:, :, a:a + oh, b:b + ow], w[:, :, a, b])
    return out


def conv_reference(name, *arrays):
    """numpy's unfused result of the conv-chain kernel ``name`` (float64, then float32)."""
    import numpy as np
    if name == "conv3_bias_relu_conv1":
        x, w1, b1, w2 = arrays
        t = np.maximum(np_conv2d(x, w1, 1) + b1[None, :, None, None], 0)
        return np_conv2d(t, w2, 0).astype(np.float32)
    if name == "conv1_relu_conv3":
        x, w1, w2 = arrays
        return np_conv2d(np.maximum(np_conv2d(x, w1, 0), 0), w2, 1).astype(np.float32)
    if name == "conv3_conv3_valid":
        x, w1, w2 = arrays
        return np_conv2d(np_conv2d(x, w1, 0), w2, 0).astype(np.float32)
    raise KeyError(name)
