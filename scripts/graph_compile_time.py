"""Wall and CPU time of one graph compilation through ``torch.compile``: the reduced
ResNet-18 of ``tests/test_graph_conv.py`` (``cpu`` target), its static first call then
the symbolic-batch recompilation, with a fresh kernel cache (a temporary
``POLYCOMP_CACHE_DIR``).  CPU is split into this process (Python, isl) and its gcc
children.  Compare ``POLYCOMP_PARALLEL_BUILD=0`` and ``=1`` in alternating runs
(docs/graph.md, "Compile time")::

    for p in 0 1 0 1; do POLYCOMP_PARALLEL_BUILD=$p python scripts/graph_compile_time.py; done
"""
import os
import tempfile
import time

os.environ["POLYCOMP_CACHE_DIR"] = tempfile.mkdtemp(prefix="polycomp_compile_time_")

import torch  # noqa: E402

from polycomp.graph.convnets import resnet18  # noqa: E402
from polycomp.graph.dynamo import polycomp_backend  # noqa: E402


def main() -> None:
    m = resnet18(width=8, blocks=(1, 1, 1, 1), num_classes=10)
    cm = torch.compile(m, backend=lambda gm, ex: polycomp_backend(
        gm, ex, options={"target": "cpu", "strict": True}))
    for s in [(1, 3, 32, 32), (2, 3, 32, 32)]:
        t0, c0, ch0 = time.perf_counter(), time.process_time(), os.times()
        with torch.no_grad():
            cm(torch.randn(s))
        ch1 = os.times()
        gcc = (ch1.children_user + ch1.children_system) - \
            (ch0.children_user + ch0.children_system)
        print(f"POLYCOMP_PARALLEL_BUILD={os.environ.get('POLYCOMP_PARALLEL_BUILD', '1')} "
              f"{s}: wall {time.perf_counter() - t0:.2f} s, Python CPU "
              f"{time.process_time() - c0:.2f} s, gcc CPU {gcc:.2f} s", flush=True)


if __name__ == "__main__":
    main()
