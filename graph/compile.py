"""``compile_graph``: propagate shapes, partition, lower each group to one kernel, build
it for the target (identical groups are built once) and return a
:class:`~polycomp.graph.runtime.CompiledGraph`.

*Weights packed at compile time* (CPU targets): a group whose matmul multiplies by a
graph constant (a linear layer's weight) is compiled with option ``prepack`` naming
that constant; where the GEMM reads it as its packed operand (``Y[k, j]``, read by
nothing else, see :func:`polycomp.scheduler.cpu.backbone_tile.prepacked_y`) the
compile records a :class:`~polycomp.scheduler.promotion.record.PrepackedInput` and the
kernel reads the argument in the micro-kernel's panel layout instead of copying it
on every call.  The constant is packed here, once (numpy, from the same
:class:`~polycomp.scheduler.promotion.footprint.Layout` the kernel indexes it by), and
the step passes the packed array (``Step.packed``).  Parameters updated in place
recompile the graph (the Dynamo backend watches them), which packs them again.
``POLYCOMP_PREPACK=0`` turns it off.  Constant convolution weights of more than
``FEW_CHANNELS`` input channels are named too (:attr:`GroupKernel.prepack`); the CPU
channel form reads them packed in its panels, ``(F/NR, KH, KW, C, NR)``
(``POLYCOMP_CONV_PREPACK=0``: laid out ``(C, KH, KW, F)`` instead, read in place).

*Each weight held once*: a constant that every step reading it reads through its packed
(``Step.packed``) or laid-out (``Step.arg_arrays``, convolution weights ``(C, KH, KW,
F)``) copy, and that is no graph output, is not passed as itself at a call; when the
graph owns its constants (``Graph.owns_constants``: the torch.fx and ONNX importers'
copies) its own array is dropped too (``Value.held`` records the copy it can be rebuilt
from; a later compilation of the same graph rebuilds it first).  A parameter owned by
the caller's module stays the caller's."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from polycomp.driver import compile_kernel, interpret
from polycomp.hw.registry import backend_for_name
from polycomp.scheduler.promotion.record import prepacked_inputs

from .ir import Graph, HeldCopy, Value
from .lower import CONV_WEIGHT_AXES, HeadSplit, argname, group_kernel, head_fold_enabled
from .partition import Group, Partition, partition
from .rewrite import (
    patch_conv_enabled,
    patchify_convs,
    qkv_stack_enabled,
    split_projections,
    stack_projections,
)
from .runtime import CompiledGraph, Step, check_dims_bound
from .shapes import propagate


def _topo_groups(part: Partition) -> list[Group]:
    """Groups in an order where every group runs after its producers."""
    owner = {n.output: g for g in part.groups for n in g.nodes}
    done: set[int] = set()
    out: list[Group] = []

    def visit(g: Group):
        if id(g) in done:
            return
        done.add(id(g))
        for v in part.inputs_of(g):
            if v in owner:
                visit(owner[v])
        out.append(g)
    for g in part.groups:
        visit(g)
    return out


# The GEMM register block for weight GEMMs (a matmul whose right operand is a constant)
# on CPU targets.  16 vector registers (AVX2): 4 rows x 3 vectors measured 1.5x faster
# than the backend's default on BERT's three weight shapes (768x3072, 3072x768, 768x768
# at 128 rows, 2 threads), but 2.5x slower on attention's Q K^T (contraction 64), which
# keeps the default.  32 registers (AVX-512): 8 rows x 3 vectors (24 accumulators); 4 x 3
# took 1.05-1.43x its CPU time on the same shapes (1 thread, weights pre-packed, Zen 4,
# docs/cpu_backend.md).
CPU_WEIGHT_GEMM_OPTIONS = {"gemm_register": (4, 3)}
CPU_WEIGHT_GEMM_OPTIONS_32 = {"gemm_register": (8, 3)}


def weight_register_override() -> tuple[int, int] | None:
    """``POLYCOMP_WEIGHT_GEMM_REGISTER=MRxNI`` (e.g. ``6x2``): the register block of every
    weight GEMM that is not a head split (those keep :func:`head_register_block`), in place
    of :data:`CPU_WEIGHT_GEMM_OPTIONS` / ``_32`` and the few-row choice -- to compare blocks
    on a host without editing them (docs/graph.md, the Zen 3 profile); None when unset."""

    from polycomp.errors import UsageError
    text = os.environ.get("POLYCOMP_WEIGHT_GEMM_REGISTER", "").strip().lower()
    if not text:
        return None
    try:
        mr, ni = (int(q) for q in text.split("x"))
    except ValueError:
        mr = ni = 0
    if mr < 1 or ni < 1:
        raise UsageError(f"POLYCOMP_WEIGHT_GEMM_REGISTER={text!r}: expected MRxNI, "
                            f"two positive integers (rows x vectors), e.g. 6x2")
    return (mr, ni)


def prepack_enabled() -> bool:
    """Weights packed at compile time (``POLYCOMP_PREPACK=0`` turns it off, for
    comparisons: every call then packs them)."""
    return os.environ.get("POLYCOMP_PREPACK", "1") != "0"


def conv_prepack_enabled() -> bool:
    """Constant convolution weights packed at compile time in the channel form's
    panels (:func:`polycomp.graph.lower.conv_weight_layouts` ``prepack``);
    ``POLYCOMP_CONV_PREPACK=0`` (or ``POLYCOMP_PREPACK=0``) lays them out ``(C, KH, KW,
    F)`` instead, read in place (for comparisons)."""
    return prepack_enabled() and os.environ.get("POLYCOMP_CONV_PREPACK", "1") != "0"


def head_register_block(dim: int, lanes: int, registers: int,
                        default: tuple[int, int]) -> tuple[int, int]:
    """The register block ``(MR, NI)`` of a projection writing heads of ``dim`` columns
    (:func:`polycomp.graph.lower.head_split`): its column tiles run per head, so a width
    ``NI*lanes`` that divides ``dim`` keeps every tile full (BERT's 64 columns in tiles
    of 48 left a 16-wide partial tile per head): the widest ``NI`` up to the default's
    that does, with up to 8 rows as the registers allow; else ``default``.  Measured on
    Zen 4 (AVX-512, 128 x 768 x 768, SCHED_FIFO, best of 40): 8 x 32 at 782 us on two
    threads against 846 us for 6 x 64 (21.3 row panels: a partial one) and 1362 us for
    4 x 64; one thread even (1401 - 1420 us)."""
    for ni in range(default[1], 0, -1):
        if ni * lanes <= dim and dim % (ni * lanes) == 0:
            mr = min(8, (registers - ni - 1) // ni)
            if mr >= 2:
                return (mr, ni)
    return default


def weight_register_block(g: Group, target: Any, block: tuple[int, int]) -> tuple[int, int]:
    """The register block of a group's weight GEMM with constant rows and columns (one
    matmul by a constant, fp32/fp64) that runs with the few-row column split
    (``scheduler/cpu/backbone_tile.py`` :func:`few_row_register_block`: column panels
    that split the columns evenly over the threads); ``block`` otherwise.  Its rows are
    the product of the output's leading extents (a row-flattened group's)."""
    from polycomp.scheduler.cpu.backbone_tile import few_row_register_block
    mms = [n for n in g.nodes if n.op == "matmul" and n.inputs[1].const is not None]
    if len(mms) != 1 or mms[0].output.dtype not in ("float32", "float64"):
        return block
    shape = mms[0].output.shape
    if not shape or not all(isinstance(d, (int, np.integer)) or
                            (getattr(d, "is_Integer", False)) for d in shape):
        return block
    rows = int(np.prod([int(d) for d in shape[:-1]], dtype=np.int64)) if len(shape) > 1 else 1
    return few_row_register_block(rows, int(shape[-1]),
                                  target.vector_lanes(mms[0].output.dtype),
                                  max(1, target.cpu.threads), block)


def _group_options(g: Group, inputs: list[Value], target: str,
                   options: dict | None, conv: list[Value] | None = None,
                   heads: HeadSplit | None = None) -> dict | None:
    """The compile options of a group's kernel on a CPU target: the weight-GEMM
    register block, and option ``prepack`` naming the constant right operands of its
    matmuls (the kernel may read them packed once, at compile time: :func:`_prepack`)
    and the convolution weights ``conv`` (:attr:`GroupKernel.prepack`)."""
    if options is not None or not target.startswith("cpu"):
        return options
    weights = [n.inputs[1] for n in g.nodes if n.op == "matmul" and n.inputs[1].const is not None]
    if not weights:
        return {"prepack": tuple(argname(v) for v in conv)} if conv else None
    from polycomp.hw.target import get_target
    cpu = get_target(target).cpu
    wide = cpu is not None and cpu.vector_registers >= 32
    out: dict = dict(CPU_WEIGHT_GEMM_OPTIONS_32 if wide else CPU_WEIGHT_GEMM_OPTIONS)
    if heads is not None and cpu is not None:
        out["gemm_register"] = head_register_block(
            heads.dim, get_target(target).vector_lanes(heads.matmul.output.dtype),
            cpu.vector_registers, out["gemm_register"])
    elif cpu is not None:
        out["gemm_register"] = weight_register_override() or \
            weight_register_block(g, get_target(target), out["gemm_register"])
    if prepack_enabled():
        names = tuple(argname(v) for v in inputs if v in weights or v in (conv or ()))
        if names:
            out["prepack"] = names
    return out


def _prepack(ck: Any, names: list[str], inputs: list[Value],
             packed: dict[Value, HeldCopy], shapes: dict | None = None) -> dict:
    """The inputs ``ck`` reads pre-packed (:func:`prepacked_inputs`), each constant
    packed once in the layout the kernel reads (shared by the steps of the same
    constant, recorded in ``packed``): ``{value: packed array}`` for the step's call.
    ``names``: the kernel's argument names, in the order of ``inputs`` (a kernel built
    for an identical group has the first group's names)."""
    out = {}
    for rec in prepacked_inputs(ck.state):
        v = inputs[names.index(rec.name)]
        if v not in packed:
            assert v.const is not None  # the option names constants only
            a = np.asarray(v.const)
            sh = tuple(int(d) for d in (shapes or {}).get(v, ()))
            if sh and sh != a.shape:   # read as a reshape (a head split's (K, H, D))
                packed[v] = HeldCopy(rec.pack(a.reshape(sh)), prepacked=rec,
                                     shape=a.shape)
            else:
                packed[v] = HeldCopy(rec.pack(a), prepacked=rec)
        out[v] = packed[v].array
    return out


def _copies(step: Step, packed: dict[Value, HeldCopy]) -> dict[Value, HeldCopy]:
    """The packed and laid-out copies ``step`` reads instead of constants."""
    out = {v: packed[v] for v in step.packed}
    for v, a in step.arg_arrays.items():
        out.setdefault(v, HeldCopy(a, axes=CONV_WEIGHT_AXES))
    return out


def _drop_copied_constants(cg: CompiledGraph, packed: dict[Value, HeldCopy]) -> None:
    """Drop the arrays of the graph's constants that ``cg`` reads only through a
    packed or laid-out copy (:meth:`CompiledGraph.constants_read`): ``Value.const``
    None, ``Value.held`` the copy.  Only for a graph that owns its constants."""
    held: dict[Value, HeldCopy] = {}
    for s in cg.steps:
        held.update(_copies(s, packed))
    read = cg.constants_read()
    for v, h in held.items():
        if v not in read and v.const is not None:
            v.const, v.held = None, h


def parallel_build_enabled() -> bool:
    """gcc builds of a graph's kernels run beside the compilation of the next ones
    (:class:`KernelBuilds`); ``POLYCOMP_PARALLEL_BUILD=0`` builds each kernel when it
    is compiled, one after another (as before; for comparisons)."""
    return os.environ.get("POLYCOMP_PARALLEL_BUILD", "1") != "0"


class KernelBuilds:
    """The builds (``ck.backend.load``: gcc, then ``dlopen``) of one graph compilation's
    C kernels.  With ``parallel``, each build is started on a thread pool as soon as its
    kernel is compiled and the compilation goes on with the next group: gcc runs as a
    subprocess, so it overlaps the Python/isl compilation of the following kernels and
    the other builds, up to one build per CPU this process may run on.  The kernel cache
    (:mod:`polycomp.cache`) is safe for concurrent builds (its lock, one ``flock`` per
    key).  :meth:`load` returns a handle that :meth:`result` turns into the loaded
    kernel; without ``parallel`` both are the identity around a build made at once (the
    former order).  The CUDA and NPU backends load in the calling thread, as before."""

    def __init__(self, parallel: bool):
        self.pool = None
        self.first = True
        if parallel:
            from concurrent.futures import ThreadPoolExecutor

            from polycomp.hw.cpu.target import cpu_threads
            workers = cpu_threads()
            if workers > 1:
                self.pool = ThreadPoolExecutor(max_workers=workers,
                                               thread_name_prefix="polycomp-build")

    def load(self, ck: Any) -> Any:
        """The loaded kernel of ``ck``, or a handle to it (a future).  The first build
        runs at once in the calling thread: on a cold cache it makes the vector
        prelude's precompiled header, which concurrent first builds would each make."""
        if self.pool is None or self.first:
            self.first = False
            return ck.backend.load(ck)
        return _PendingBuild(self.pool.submit(ck.backend.load, ck))

    @staticmethod
    def result(fn: Any) -> Any:
        """``fn`` itself, or the loaded kernel its build gave (its error raised)."""
        return fn.future.result() if isinstance(fn, _PendingBuild) else fn

    def close(self) -> None:
        """Wait for the builds still running (after an error: not to leave gcc behind)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


class _PendingBuild:
    """A kernel build started by :class:`KernelBuilds` (a step's ``fn`` until it is
    done)."""

    def __init__(self, future: Any):
        self.future = future


class Simulated:
    """A group kernel run by its backend's executor instead of a built binary: the
    GPU-semantics simulator for ``cuda`` (strict races/bounds checks), the IR interpreter
    for C targets.  Same calling convention as a built kernel."""

    def __init__(self, ck: Any):
        self.ck = ck

    def __call__(self, *inputs, out, **params):
        res = interpret(self.ck, *inputs, **params)
        res = res if isinstance(res, (tuple, list)) else (res,)
        for o, r in zip(out, res):
            np.copyto(o, r)
        return out


def _constant_readers(part: Partition, graph: Graph) -> dict[Value, int]:
    """How many groups read each constant (a graph output counts as one more reader)."""
    readers: dict[Value, int] = {}
    for g in part.groups:
        for v in part.inputs_of(g):
            readers[v] = readers.get(v, 0) + (v.const is not None)
    for v in graph.outputs:
        readers[v] = readers.get(v, 0) + 1
    return readers


def compile_graph(graph: Graph, target: str = "cpu", fuse: bool = True,
                  options: dict | None = None, simulate: bool = False) -> CompiledGraph:
    """Compile ``graph`` for ``target``; ``simulate=True`` runs each group through the
    target's executor (the CUDA simulator for ``cuda``) instead of a built binary."""
    graph.restore_constants()  # arrays an earlier compilation dropped (Value.held)
    if any(v.shape is None for n in graph.nodes for v in (n.output,)):
        propagate(graph)
    check_dims_bound(graph)  # before the partition's cost model evaluates any extent
    if backend_for_name(target).family == "c" and patch_conv_enabled():
        patchify_convs(graph)      # ViT's patch embedding: a weight GEMM, not a conv
    if backend_for_name(target).family == "c" and head_fold_enabled():
        split_projections(graph)   # GPT-2's c_attn: one projection per q, k, v
        if qkv_stack_enabled():
            stack_projections(graph)   # q, k, v of the same rows: one stacked GEMM
    part = partition(graph, fuse=fuse)
    part.groups = _topo_groups(part)
    built: dict[str, tuple[object, Any, list[str]]] = {}
    packed: dict[Value, HeldCopy] = {}   # constants packed once (weights)
    # a constant one group reads (and no graph output): once that group's step reads it
    # through a copy, its array is dropped at once (an owned graph), so the compilation
    # does not hold every weight twice at its end (BERT-12: ~330 MiB of peak)
    readers = _constant_readers(part, graph)
    steps = []
    # rows flattened for the C/CPU family (the packed GEMM then has no batch loop around
    # it); the CUDA row-reduction mapping plans N-d rows (grid y/z over the outer ones)
    flat_rows = backend_for_name(target).family == "c"
    builds = KernelBuilds(flat_rows and not simulate and parallel_build_enabled())
    try:
        for g in part.groups:
            if g.kind == "view":
                steps.append(Step(g, None, part.inputs_of(g), part.outputs_of(g), {}))
                continue
            gk = group_kernel(part, g, flatten_rows=flat_rows, conv_layout=flat_rows,
                              conv_prepack=flat_rows and options is None and
                              target.startswith("cpu") and conv_prepack_enabled())
            if gk.key not in built:
                opts = _group_options(g, gk.inputs, target, options, gk.prepack, gk.heads)
                ck = compile_kernel(gk.kernel, target, opts)
                built[gk.key] = (Simulated(ck) if simulate else builds.load(ck), ck,
                                 [argname(v) for v in gk.inputs])
            fn, ck, names = built[gk.key]
            steps.append(Step(g, fn, gk.inputs, gk.outputs,  # type: ignore[arg-type]
                              dict(gk.params.exprs), dict(gk.arg_shapes),
                              _prepack(ck, names, gk.inputs, packed, gk.arg_shapes),
                              dict(gk.arg_arrays), gk.folded))
            if graph.owns_constants:
                for v, h in _copies(steps[-1], packed).items():
                    if readers.get(v) == 1:
                        v.const, v.held = None, h
        for s in steps:             # every build done (a failed one raises its error)
            s.fn = builds.result(s.fn)
    finally:
        builds.close()
    cg = CompiledGraph(part, steps, len(built), target)
    if graph.owns_constants:
        _drop_copied_constants(cg, packed)
    return cg
