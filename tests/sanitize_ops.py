"""Build every op-library kernel (float32 or its first dtype) for target ``c`` with
``-fsanitize=address,undefined`` and run it on small random inputs against its numpy
reference. Run as a script with libasan preloaded (see tests/test_trust_rt_sanitize.py):
ASan/UBSan reports abort the process with a non-zero status."""
import sys

import numpy as np

from polycomp.driver import compile_kernel
from polycomp.frontend.ops import OPS
from polycomp.hw.cpu.build import DEFAULT_FLAGS, CFunction, build_shared

SAN_FLAGS = tuple(f for f in DEFAULT_FLAGS if f != "-O3") + (
    "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer")


def main(names) -> int:
    rng = np.random.default_rng(0)
    for name in names:
        spec = OPS[name]
        dtype = "float32" if "float32" in spec.dtypes else spec.dtypes[0]
        shapes = spec.shapes(lambda lo, hi: min(hi, max(lo, 3)))
        xs = spec.inputs(rng, shapes, dtype)
        ck = compile_kernel(spec.kernel(dtype), "c")
        fn = CFunction(ck.final_ir, build_shared(ck.source, flags=SAN_FLAGS))
        out = fn(*xs)
        ref = spec.reference(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        refs = ref if isinstance(ref, tuple) else (ref,)
        for o, r in zip(outs, refs):
            np.testing.assert_allclose(np.asarray(o, np.float64), np.asarray(r, np.float64),
                                       rtol=1e-3, atol=1e-3, err_msg=name)
        print("ok", name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or sorted(OPS)))
