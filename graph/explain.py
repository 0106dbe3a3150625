"""``polycomp explain FILE.py`` for a file that defines graphs (and no kernels): print each
graph, its fusion partition and the Graphviz dot text (groups as clusters); with the
``graphviz`` Python package installed, ``--dump-dir DIR`` also renders ``DIR/NAME.svg``."""
from __future__ import annotations

import os
from typing import Callable

from .ir import Graph
from .partition import partition


def explain_file(path: str, write: Callable[[str], object], dump_dir: str | None = None) -> bool:
    """Explain the graphs of ``path``; False when it defines kernels or no graph."""
    if not path.endswith(".py"):
        return False
    from polycomp.kernel_files import find_kernels, load_module
    mod = load_module(path)
    graphs = [v for v in vars(mod).values() if isinstance(v, Graph)]
    if not graphs or find_kernels(mod):
        return False
    for g in graphs:
        part = partition(g)
        write(f"=== graph ===\n{g}\n\n=== {part.explain()}\n\n=== dot ===\n{part.dot()}\n")
        if dump_dir:
            try:
                import graphviz  # optional
            except ImportError:
                write("(graphviz package not installed: dot text above, no SVG)\n")
                continue
            os.makedirs(dump_dir, exist_ok=True)
            graphviz.Source(part.dot()).render(os.path.join(dump_dir, g.name), format="svg")
    return True
