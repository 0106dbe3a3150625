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


# --------------------------------------------------------------------------- half precision
# The same chains with float16 / bfloat16 inputs, written exactly as the float32 ones:
# ops.batch_matmul widens the operands to float32 and accumulates in float32 (as the
# Tensor Core GEMM path expects), the softmax and the middle stages run in float32, and
# O is float32.  On "cuda" / "cuda-sm90" they compile to the Tensor Core chain kernel
# (scheduler/chain/tc_kernel.py); the CPU targets do not fuse them.

def _half_kernels(dtype: str, tag: str) -> dict:
    @pc.tensor_expr(name=f"bmm_chain_{tag}")
    def bmm(X: pc.Tensor[(B, M, K), dtype], Y: pc.Tensor[(B, K, L), dtype],
            Z: pc.Tensor[(B, L, N), dtype]):
        return ops.batch_matmul(ops.batch_matmul(X, Y, name="T"), Z, name="O")

    @pc.tensor_expr(name=f"causal_attention_{tag}")
    def causal(Q: pc.Tensor[(B, M, K), dtype], KT: pc.Tensor[(B, K, L), dtype],
               V: pc.Tensor[(B, L, N), dtype]):
        t = ops.batch_matmul(Q, KT, name="T")
        sc = pc.compute((B, M, L),
                        lambda b, i, j: pc.select(j > i, float("-inf"), t[b, i, j] * 0.125),
                        name="Sc")
        return ops.batch_matmul(ops.softmax(sc, axis=-1, name="S"), V, name="O")

    @pc.tensor_expr(name=f"masked_attention_{tag}")
    def masked(Q: pc.Tensor[(B, M, K), dtype], KT: pc.Tensor[(B, K, L), dtype],
               V: pc.Tensor[(B, L, N), dtype], mask: pc.Tensor[(M, L), "float32"]):
        t = ops.batch_matmul(Q, KT, name="T")
        sc = pc.compute((B, M, L), lambda b, i, j: t[b, i, j] + mask[i, j], name="Sc")
        return ops.batch_matmul(ops.softmax(sc, axis=-1, name="S"), V, name="O")

    @pc.tensor_expr(name=f"attention_k_rows_{tag}")
    def k_rows(Q: pc.Tensor[(B, M, K), dtype], Kr: pc.Tensor[(B, L, K), dtype],
               V: pc.Tensor[(B, L, N), dtype]):
        """softmax(Q K^T) V with K stored as rows [B, L, K]."""
        k = pc.reduce_axis(K, "k")
        t = pc.compute((B, M, L),
                       lambda b, i, j: pc.sum(pc.cast(Q[b, i, k], "float32")
                                              * pc.cast(Kr[b, j, k], "float32"), axis=k),
                       name="T")
        return ops.batch_matmul(ops.softmax(t, axis=-1, name="S"), V, name="O")

    @pc.tensor_expr(name=f"mm_relu_chain_{tag}")
    def mm_relu(X: pc.Tensor[(M, K), dtype], Y: pc.Tensor[(K, L), dtype],
                Z: pc.Tensor[(L, N), dtype]):
        t = ops.matmul(X, Y, name="T")
        r = pc.compute((M, L), lambda i, j: pc.max(t[i, j], 0.0), name="R")
        return ops.matmul(r, Z, name="O")
    return {"bmm_chain": bmm, "causal_attention": causal, "masked_attention": masked,
            "attention_k_rows": k_rows, "mm_relu_chain": mm_relu}


HALF = {"float16": _half_kernels("float16", "f16"), "bfloat16": _half_kernels("bfloat16", "bf16")}
bmm_chain_f16 = HALF["float16"]["bmm_chain"]
causal_attention_f16 = HALF["float16"]["causal_attention"]
masked_attention_f16 = HALF["float16"]["masked_attention"]
attention_k_rows_f16 = HALF["float16"]["attention_k_rows"]
causal_attention_bf16 = HALF["bfloat16"]["causal_attention"]


@pc.tensor_expr
def attention_f16_out(Q: pc.Tensor[(B, M, K), "float16"], KT: pc.Tensor[(B, K, L), "float16"],
                      V: pc.Tensor[(B, L, N), "float16"]):
    """causal_attention_f16 with a float16 output (out_dtype: a cast stage after O)."""
    t = ops.batch_matmul(Q, KT, name="T")
    sc = pc.compute((B, M, L), lambda b, i, j: pc.select(j > i, float("-inf"), t[b, i, j] * 0.125),
                    name="Sc")
    return ops.batch_matmul(ops.softmax(sc, axis=-1, name="S"), V, out_dtype="float16",
                            name="O")


@pc.tensor_expr
def bmm_chain_bf16_out(X: pc.Tensor[(B, M, K), "bfloat16"], Y: pc.Tensor[(B, K, L), "bfloat16"],
                       Z: pc.Tensor[(B, L, N), "bfloat16"]):
    """bmm_chain in bfloat16 with a bfloat16 output."""
    return ops.batch_matmul(ops.batch_matmul(X, Y, name="T"), Z, out_dtype="bfloat16", name="O")
# --------------------------------------------------------------------------- NPU chains
# The cube multiplies float16 operands into float32: T and the stages between the
# products are float32 and P is cast back to float16 before the second product
# (FlashAttention's P); scheduler/chain/npu_detect.py.  (Prefixed ``npu_``: the Tensor
# Core chains above take the plain ``*_f16`` names; the kernels keep their names.)

@pc.tensor_expr(name="bmm_chain_f16")
def npu_bmm_chain_f16(X: pc.Tensor[(B, M, K), "float16"], Y: pc.Tensor[(B, K, L), "float16"],
                  Z: pc.Tensor[(B, L, N), "float16"]):
    t = ops.batch_matmul(X, Y, name="T")
    p = pc.compute((B, M, L), lambda b, i, j: pc.cast(t[b, i, j], "float16"), name="P")
    return ops.batch_matmul(p, Z, name="O")


@pc.tensor_expr(name="bmm_softmax_chain_f16")
def npu_bmm_softmax_chain_f16(X: pc.Tensor[(B, M, K), "float16"],
                          Y: pc.Tensor[(B, K, L), "float16"],
                          Z: pc.Tensor[(B, L, N), "float16"]):
    s = ops.softmax(ops.batch_matmul(X, Y, name="T"), axis=-1, name="S")
    p = pc.compute((B, M, L), lambda b, i, j: pc.cast(s[b, i, j], "float16"), name="P")
    return ops.batch_matmul(p, Z, name="O")


@pc.tensor_expr(name="causal_attention_f16")
def npu_causal_attention_f16(Q: pc.Tensor[(B, M, K), "float16"],
                         KT: pc.Tensor[(B, K, L), "float16"],
                         V: pc.Tensor[(B, L, N), "float16"]):
    t = ops.batch_matmul(Q, KT, name="T")
    sc = pc.compute((B, M, L), lambda b, i, j: pc.select(j > i, float("-inf"), t[b, i, j] * 0.125),
                    name="Sc")
    s = ops.softmax(sc, axis=-1, name="S")
    p = pc.compute((B, M, L), lambda b, i, j: pc.cast(s[b, i, j], "float16"), name="P")
    return ops.batch_matmul(p, V, name="O")


@pc.tensor_expr(name="masked_attention_f16")
def npu_masked_attention_f16(Q: pc.Tensor[(B, M, K), "float16"],
                         KT: pc.Tensor[(B, K, L), "float16"],
                         V: pc.Tensor[(B, L, N), "float16"],
                         mask: pc.Tensor[(M, L), "float32"]):
    t = ops.batch_matmul(Q, KT, name="T")
    sc = pc.compute((B, M, L), lambda b, i, j: t[b, i, j] + mask[i, j], name="Sc")
    s = ops.softmax(sc, axis=-1, name="S")
    p = pc.compute((B, M, L), lambda b, i, j: pc.cast(s[b, i, j], "float16"), name="P")
    return ops.batch_matmul(p, V, name="O")


@pc.tensor_expr(name="mm_relu_chain_f16")
def npu_mm_relu_chain_f16(X: pc.Tensor[(M, K), "float16"], Y: pc.Tensor[(K, L), "float16"],
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
    """``cast(softmax?(scale? * X Y), fp16) Z`` with constant shapes: the NPU
    benchmark's kernel (benchmarks/chains_npu.py)."""
    from polycomp.benchmarks.chains_npu import _fp16_chain
    return _fp16_chain(m, k, l, n, softmax, scale, False, batch=b, name="const_chain")


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


# --------------------------------------------------------------------------- test helpers

def float32_inputs(name, b, m, k, l, n, rng, nan=False, split_mask=False):  # noqa: E741
    """Random float32 inputs of the float32 chain ``name`` (X, Y, Z and, for
    ``masked_attention``, an additive mask with a row masked in full; ``split_mask`` also
    masks the first half of row 0, so whole ``l`` splits of a row are -inf); ``nan``
    puts a NaN in ``X``."""
    import numpy as np
    f = np.float32
    if name == "mm_relu_chain":
        xs = [rng.standard_normal(s).astype(f) for s in ((m, k), (k, l), (l, n))]
    else:
        xs = [rng.standard_normal(s).astype(f) for s in ((b, m, k), (b, k, l), (b, l, n))]
    if name == "masked_attention":
        mask = np.where(rng.random((m, l)) < 0.3, -np.inf, 0).astype(f)
        mask[m // 2, :] = -np.inf                      # a row masked in full
        if split_mask:
            mask[0, : l // 2] = -np.inf                # a row masked in its first splits
        xs.append(mask)
    if nan:
        xs[0].flat[0] = np.nan
    return xs


def check_float32(out, ref):
    """``out`` is numpy's ``ref`` for a float32 chain: NaN where it is NaN, else within
    2e-4 relative to the element and to the largest magnitude."""
    import numpy as np
    assert out.shape == ref.shape
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-4 * max(1.0, np.nanmax(
        np.abs(ref), initial=0.0)))
