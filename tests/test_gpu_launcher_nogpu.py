"""Without pycuda or a GPU, build(kernel, "cuda") fails with a clear TargetError."""
import pytest

import polycomp as pc
from polycomp.driver import build
from polycomp.errors import TargetError
from polycomp.hw.cuda.launcher import gpu_available


@pytest.mark.skipif(gpu_available(), reason="a GPU is present: the launcher runs instead")
def test_build_cuda_without_gpu_raises_target_error():
    N = pc.sym("N")

    @pc.tensor_expr
    def twice(x: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: x[i] * 2.0, name="y")

    with pytest.raises(TargetError, match="pycuda"):
        build(twice, "cuda")
