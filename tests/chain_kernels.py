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


# --------------------------------------------------------------------------- NPU chains
# The cube multiplies float16 operands into float32: T and the stages between the
# products are float32 and P is cast back to float16 before the second product
# (FlashAttention's P); scheduler/chain/npu_detect.py.

@pc.tensor_expr
def bmm_chain_f16(X: pc.Tensor[(B, M, K), "float16"], Y: pc.Tensor[(B, K, L), "float16"],
                  Z: pc.Tensor[(B, L, N), "float16"]):
    t = ops.batch_matmul(X, Y, name="T")
    p = pc.compute((B, M, L), lambda b, i, j: pc.cast(t[b, i, j], "float16"), name="P")
    return ops.batch_matmul(p, Z, name="O")


@pc.tensor_expr
def bmm_softmax_chain_f16(X: pc.Tensor[(B, M, K), "float16"],
                          Y: pc.Tensor[(B, K, L), "float16"],
                          Z: pc.Tensor[(B, L, N), "float16"]):
    s = ops.softmax(ops.batch_matmul(X, Y, name="T"), axis=-1, name="S")
    p = pc.compute((B, M, L), lambda b, i, j: pc.cast(s[b, i, j], "float16"), name="P")
    return ops.batch_matmul(p, Z, name="O")


@pc.tensor_expr
def causal_attention_f16(Q: pc.Tensor[(B, M, K), "float16"],
                         KT: pc.Tensor[(B, K, L), "float16"],
                         V: pc.Tensor[(B, L, N), "float16"]):
    t = ops.batch_matmul(Q, KT, name="T")
    sc = pc.compute((B, M, L), lambda b, i, j: pc.select(j > i, float("-inf"), t[b, i, j] * 0.125),
                    name="Sc")
    s = ops.softmax(sc, axis=-1, name="S")
    p = pc.compute((B, M, L), lambda b, i, j: pc.cast(s[b, i, j], "float16"), name="P")
    return ops.batch_matmul(p, V, name="O")


@pc.tensor_expr
def masked_attention_f16(Q: pc.Tensor[(B, M, K), "float16"],
                         KT: pc.Tensor[(B, K, L), "float16"],
                         V: pc.Tensor[(B, L, N), "float16"],
                         mask: pc.Tensor[(M, L), "float32"]):
    t = ops.batch_matmul(Q, KT, name="T")
    sc = pc.compute((B, M, L), lambda b, i, j: t[b, i, j] + mask[i, j], name="Sc")
    s = ops.softmax(sc, axis=-1, name="S")
    p = pc.compute((B, M, L), lambda b, i, j: pc.cast(s[b, i, j], "float16"), name="P")
    return ops.batch_matmul(p, V, name="O")


@pc.tensor_expr
def mm_relu_chain_f16(X: pc.Tensor[(M, K), "float16"], Y: pc.Tensor[(K, L), "float16"],
                      Z: pc.Tensor[(L, N), "float16"]):
    t = ops.matmul(X, Y, name="T")
    r = pc.compute((M, L), lambda i, j: pc.max(t[i, j], 0.0), name="R")
    p = pc.compute((M, L), lambda i, j: pc.cast(r[i, j], "float16"), name="P")
    return ops.matmul(p, Z, name="O")


def reference_f16(name, *arrays):
    """numpy's result of the NPU chain ``name`` (``<name>_f16``): float32 arithmetic on
    the float16 inputs, P rounded to float16 before the second product as the kernel
    says."""
    import numpy as np
    a = [x.astype(np.float32) for x in arrays]
    q, k, v = a[:3]
    t = q @ k
    if name == "bmm_chain":
        s = t
    elif name == "bmm_softmax_chain":
        s = np_softmax(t)
    elif name == "causal_attention":
        t = t * np.float32(0.125)
        i, j = np.meshgrid(np.arange(t.shape[-2]), np.arange(t.shape[-1]), indexing="ij")
        s = np_softmax(np.where(j > i, np.float32(-np.inf), t))
    elif name == "masked_attention":
        s = np_softmax(t + a[3])
    elif name == "mm_relu_chain":
        s = np.maximum(t, 0)
    else:
        raise KeyError(name)
    return s.astype(np.float16).astype(np.float32) @ v


def const_chain_f16(b, m, k, l, n, softmax, scale=None):  # noqa: E741
    """``cast(softmax?(scale? * X Y), fp16) Z`` with constant shapes (as the NPU
    benchmark's kernels)."""
    from polycomp.frontend.dsl import Kernel

    def chain(X, Y, Z):
        t = ops.batch_matmul(X, Y, name="T")
        if scale is not None:
            t = pc.compute((b, m, l), lambda i, j, q: t[i, j, q] * scale, name="Sc")
        if softmax:
            t = ops.softmax(t, axis=-1, name="S")
        p = pc.compute((b, m, l), lambda i, j, q: pc.cast(t[i, j, q], "float16"), name="P")
        return ops.batch_matmul(p, Z, name="O")
    shapes = {"X": (b, m, k), "Y": (b, k, l), "Z": (b, l, n)}
    return Kernel(chain, name="const_chain", inputs={v: pc.Tensor[s, "float16"]
                                                     for v, s in shapes.items()})
