"""Property tests: every registered operator (polycomp.frontend.ops.OPS), in each of its
dtypes, on random symbolic-shape instances, through

(i)   the IR interpreter on the program-order IR (``interpret(kernel)``),
(ii)  the C backend (gcc + ctypes, ``build(kernel, "c")``),
(iii) the CUDA pipeline's IR (GPU-mapped loops) through the interpreter,

compared with the operator's numpy reference.  Extents are drawn with a bias to 1,
primes and odd sizes.  Tolerances: integers exact; floats ``rtol = r0 + 4 * L * eps_acc
+ 2 * eps_out`` (r0 = 1e-5 for float32 and float16/bfloat16 accumulating in float32,
1e-12 for float64; ``L`` the reduction length of the operator, 1 for elementwise ones;
``eps_out`` the rounding of a 16-bit result) and ``atol = rtol * max(1, max|ref|)``
(a normwise bound, for sums that cancel to near 0).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ops_helpers import check_close, extent, op_params, runner

from polycomp.frontend.ops import OPS

CASES = [(name, dtype) for name, spec in OPS.items() for dtype in spec.dtypes]

def _draw_case(spec, dtype, data, cap=None):
    def dim(lo, hi):
        return data.draw(extent(lo, hi if cap is None else max(lo, min(hi, cap))))
    shapes = spec.shapes(dim)
    seed = data.draw(st.integers(0, 2 ** 32 - 1), label="seed")
    xs = spec.inputs(np.random.default_rng(seed), shapes, dtype)
    return shapes, xs, spec.reference(*xs)


@pytest.mark.parametrize("name,dtype", op_params(CASES))
@given(data=st.data())
def test_op_matches_numpy(name, dtype, data):
    """(i) the IR interpreter and (ii) the C backend."""
    spec = OPS[name]
    shapes, xs, ref = _draw_case(spec, dtype, data)
    for path in ("interpreter", "c"):
        out = runner(name, dtype, path)(*xs)
        check_close(out, ref, spec, dtype, shapes, f"{name}[{dtype}] via {path}")


#: The CUDA path is the expensive one (CUDA compilation of each kernel takes seconds, its
#: IR runs in the CUDA simulator, whose per-thread serial loops are far slower than the
#: lane-vectorised interpreter): its extents are capped and it runs a third of the
#: profile's examples.
CUDA_CAP = 24
CUDA_EXAMPLES = max(4, settings.default.max_examples // 3)
#: The CUDA path runs float32 and float64 for every operator and the 16-bit and integer
#: dtypes for representatives of each kind (tensor-core matmuls, the cast stage,
#: convolution, row reductions, elementwise conversions).
CUDA_LOW_PRECISION = {("matmul", "float16"), ("matmul", "bfloat16"), ("matmul", "int8"),
                      ("batch_matmul", "float16"), ("matmul_same_dtype", "float16"),
                      ("matmul_same_dtype", "int8"), ("conv2d", "float16"), ("conv2d", "int8"),
                      ("softmax", "float16"), ("layernorm", "bfloat16"), ("gelu", "bfloat16"),
                      ("add", "float16"), ("add_col", "int8"), ("add", "int32"),
                      ("reduce_sum_1", "int8"), ("reduce_max_1", "float16"),
                      ("mlp_gelu", "float16"), ("conv2d_bias_relu", "float16")}
#: left out: the isl AST of the promoted attention schedule takes over a minute to
#: generate today (reported to the scheduler's owner)
CUDA_SLOW = {"attention"}
CUDA_CASES = [(n, d) for n, d in CASES if n not in CUDA_SLOW
              and (d in ("float32", "float64") or (n, d) in CUDA_LOW_PRECISION)]


@pytest.mark.parametrize("name,dtype", op_params(CUDA_CASES))
@settings(max_examples=CUDA_EXAMPLES)
@given(data=st.data())
def test_op_cuda_ir_matches_numpy(name, dtype, data):
    """(iii) the CUDA pipeline's IR (GPU-mapped, promoted), run by ``interpret``."""
    spec = OPS[name]
    shapes, xs, ref = _draw_case(spec, dtype, data, cap=CUDA_CAP)
    out = runner(name, dtype, "cuda-ir")(*xs)
    check_close(out, ref, spec, dtype, shapes, f"{name}[{dtype}] via the CUDA IR")


def test_registry_covers_every_operator_and_dtype():
    """Every tensor-level operator is reached by some registered kernel, and the dtype
    coverage the tests promise is there."""
    names = set(OPS)
    for op in ("add", "sub", "mul", "div", "maximum", "minimum", "relu", "gelu", "bias_add",
               "transpose_021", "reduce_sum_1", "reduce_max_1", "softmax", "layernorm",
               "matmul", "batch_matmul", "matmul_bias_relu", "conv2d", "conv2d_s2_p1",
               "add_row", "add_col"):
        assert op in names, op
    for spec in OPS.values():
        assert {"float32", "float64"} <= set(spec.dtypes), spec.name
    covered = {d for spec in OPS.values() for d in spec.dtypes}
    assert {"float16", "bfloat16", "int32", "int8"} <= covered


def test_cuda_selection_names_registered_cases():
    assert CUDA_LOW_PRECISION <= set(CASES), CUDA_LOW_PRECISION - set(CASES)
    assert CUDA_SLOW <= set(OPS)
