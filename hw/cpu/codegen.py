"""C99 code generation for the CPU targets.

Emits one function ``void <kernel>(int64_t <params>..., const T* restrict <inputs>...,
T* restrict <outputs>...)`` with global temporaries ``malloc``ed (64-byte aligned) for
their lifetime, loops of kind ``parallel`` as ``#pragma omp parallel for
schedule(static)``, ``vectorized`` loops as ``#pragma omp simd`` and ``unrolled`` loops
with ``#pragma GCC unroll``.  Vector intrinsics (AVX2/AVX-512) are printed by the
vectorize pass's printer extension (:mod:`polycomp.hw.cpu.vector_printer`), which also
takes the per-thread buffers of a parallel region from the thread's workspace
(``pc_ws_take`` / ``pc_ws_give`` below: kept between calls).
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import UsageError
from polycomp.hw.clike import C_PRELUDE, CLikePrinter, legalize_names
from polycomp.hw.cpu.parallel_marks import omp_schedule

#: First line of generated C under ``fp_exact``: gcc then contracts no ``a*b + c`` into
#: an FMA in this file whatever ``-ffp-contract`` the build passes.
FP_EXACT_C_PRAGMA = '#pragma GCC optimize ("fp-contract=off")\n'
#: the line that ends the part of a generated source that the kernels of one target
#: share (headers, helpers, the vector prelude): :func:`polycomp.hw.cpu.build.build_shared`
#: precompiles what comes before it once (a precompiled header), so a build parses only
#: the kernel's own code
PRELUDE_END = "/* ---- end of the polycomp prelude ---- */\n"

C_HEADER = r"""#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#define PC_INLINE static inline
static inline float pc_bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t pc_f32_to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); u += 0x7fffu + ((u >> 16) & 1u); return (uint16_t)(u >> 16); }
/* set when an allocation of a temporary fails; the caller checks and clears it */
int pc_alloc_failed = 0;
/* set when a gather index is outside its dimension (the load reads element 0 instead);
   the caller checks and clears it (IndexOutOfRangeError) */
int pc_index_error = 0;
PC_INLINE int64_t pc_gather_index(int64_t v, int64_t n) { if (__builtin_expect((uint64_t)v < (uint64_t)n, 1)) return v; __atomic_store_n(&pc_index_error, 1, __ATOMIC_RELAXED); return 0; }
#include <pthread.h>
/* each thread's workspace for the per-thread buffers of parallel regions (packed GEMM
   panels), kept between calls up to PC_WS_KEEP bytes: a buffer malloc'ed and freed per
   call was page-faulted in again at each call in the OpenMP workers (their arenas trim
   the heap top); freed when the thread exits */
#define PC_WS_KEEP ((size_t)4 << 20)
static __thread char* pc_ws_base;
static __thread size_t pc_ws_cap;
static __thread int pc_ws_busy;
static pthread_key_t pc_ws_key;
static pthread_once_t pc_ws_once = PTHREAD_ONCE_INIT;
static void pc_ws_make_key(void) { (void)pthread_key_create(&pc_ws_key, free); }
static __attribute__((unused)) void* pc_ws_take(size_t bytes, int* kept) {
  *kept = 0;
  if (bytes <= PC_WS_KEEP && !pc_ws_busy) {
    if (pc_ws_cap < bytes) {
      free(pc_ws_base);
      pc_ws_base = (char*)aligned_alloc(64, bytes);
      pc_ws_cap = pc_ws_base ? bytes : 0;
      (void)pthread_once(&pc_ws_once, pc_ws_make_key);
      (void)pthread_setspecific(pc_ws_key, pc_ws_base);
    }
    if (pc_ws_base) { pc_ws_busy = 1; *kept = 1; return pc_ws_base; }
  }
  return aligned_alloc(64, bytes);
}
static __attribute__((unused)) void pc_ws_give(void* p, int kept) {
  if (kept) pc_ws_busy = 0; else free(p);
}
/* a kernel temporary of PC_KEEP_MIN .. PC_KEEP_MAX bytes (the C of a GEMM with M = 3072
   rows, its epilogue values), kept between calls in its allocation's per-thread slot
   (option keep_temporaries, POLYCOMP_KEEP_TEMPS=0 off): allocated and freed per call it
   came from fresh mmap'ed pages, each 4 KiB page faulted and zeroed at every call (37.7 MB
   a call for BERT's 3072 x 3072 FFN product: ~9200 faults, 20-80 ms of system time);
   2 MiB-aligned and advised for transparent huge pages; freed when the thread exits */
#include <sys/mman.h>
#define PC_KEEP_MIN ((size_t)1 << 20)
#define PC_KEEP_MAX ((size_t)1 << 30)
#define PC_KEEP_ALIGN ((size_t)2 << 20)
typedef struct pc_keep { char* base; size_t cap; int busy; int linked; struct pc_keep* next; } pc_keep;
static __thread pc_keep* pc_keep_list;
static pthread_key_t pc_keep_key;
static pthread_once_t pc_keep_once = PTHREAD_ONCE_INIT;
static void pc_keep_free_all(void* head) {
  for (pc_keep* s = (pc_keep*)head; s != NULL; s = s->next) { free(s->base); s->base = NULL; s->cap = 0; }
}
static int pc_keep_key_made;
static void pc_keep_make_key(void) { pc_keep_key_made = pthread_key_create(&pc_keep_key, pc_keep_free_all) == 0; }
/* a library unloaded before its threads exit must not leave them a destructor to call */
static void __attribute__((destructor)) pc_keep_unload(void) { if (pc_keep_key_made) (void)pthread_key_delete(pc_keep_key); }
static __attribute__((unused)) void* pc_keep_take(pc_keep* s, size_t bytes, int* kept) {
  *kept = 0;
  if (bytes >= PC_KEEP_MIN && bytes <= PC_KEEP_MAX && !s->busy) {
    if (s->cap < bytes) {
      size_t n = (bytes + PC_KEEP_ALIGN - 1) / PC_KEEP_ALIGN * PC_KEEP_ALIGN;
      free(s->base);
      s->base = (char*)aligned_alloc(PC_KEEP_ALIGN, n);
      s->cap = s->base ? n : 0;
#ifdef MADV_HUGEPAGE
      if (s->base) (void)madvise(s->base, n, MADV_HUGEPAGE);
#endif
      if (!s->linked) {
        s->linked = 1; s->next = pc_keep_list; pc_keep_list = s;
        (void)pthread_once(&pc_keep_once, pc_keep_make_key);
        (void)pthread_setspecific(pc_keep_key, pc_keep_list);
      }
    }
    if (s->base) { s->busy = 1; *kept = 1; return s->base; }
  }
  return aligned_alloc(64, (bytes + 63) / 64 * 64);
}
static __attribute__((unused)) void pc_keep_give(pc_keep* s, void* p, int kept) {
  if (kept) s->busy = 0; else free(p);
}
""" + C_PRELUDE

#: The C statement that records a failed allocation (read by
#: :class:`polycomp.hw.cpu.build.CFunction` after each call).
ALLOC_FAILED_SET = "__atomic_store_n(&pc_alloc_failed, 1, __ATOMIC_RELAXED);"


class CPrinter(CLikePrinter):
    types = dt.C_TYPES

    def for_(self, s: ir.For) -> None:
        if s.kind == "parallel":
            self.emit(f"#pragma omp parallel for {omp_schedule(s)}")
        elif s.kind == "vectorized":
            self.emit("#pragma omp simd")
        elif s.kind == "unrolled":
            self.emit(f"#pragma GCC unroll {int(s.annotation('unroll', 16))}")
        super().for_(s)

    def let_chain(self, s) -> int:
        """How many scalar ``let`` s with distinct names start at ``s``."""
        names: set = set()
        while isinstance(s, ir.LetStmt) and self.plain_let(s) and s.var.name not in names:
            names.add(s.var.name)
            s = s.body
        return len(names)

    def stmt(self, s) -> None:
        """A chain of two or more scalar ``let`` s (:mod:`polycomp.lowering.index_cse`
        binds a tile's index values so) is one C block of ``const`` locals around the
        body, not one nested block per ``let``: the same scopes (no two of the chain's
        names equal), without the indentation growing by a level per ``let``."""
        n = self.let_chain(s)
        if n < 2:
            return super().stmt(s)
        self.emit("{")
        self.level += 1
        self.lets_then(s, n)
        self.level -= 1
        self.emit("}")

    def block(self, s) -> None:
        """A loop's or branch's body that starts with scalar ``let`` s declares them in
        the C block the loop or branch opens (no block of their own)."""
        n = self.let_chain(s)
        if n == 0:
            return super().block(s)
        self.level += 1
        self.lets_then(s, n)
        self.level -= 1

    def lets_then(self, s, n: int) -> None:
        """The ``const`` locals of the first ``n`` (scalar) lets of ``s``, then the body."""
        for _ in range(n):
            self.bind_scalar(s)
            s = s.body
        self.stmt(s)

    def plain_let(self, s: ir.LetStmt) -> bool:
        """Whether ``s`` binds a scalar (printed as a ``const`` local)."""
        return True

    def intrinsic(self, e: ir.Call) -> str:
        if e.name == "prefetch":       # hw/cpu/prefetch.py: (element, for writing)
            at, write = e.args
            return (f"__builtin_prefetch({at.buffer.name} + {self.expr(at.indices[0])}, "
                    f"{write.value}, 3)")
        if e.name == ir.GATHER_INDEX:  # checked: see C_HEADER's pc_gather_index
            return f"pc_gather_index({self.expr(e.args[0])}, {self.expr(e.args[1])})"
        return super().intrinsic(e)

    def allocate(self, s: ir.Allocate) -> None:
        b = s.buffer
        size = self.expr(ir.shape_product(b.shape))
        ty = self.storage_type(b.dtype)
        if b.scope == "local":
            self.emit("{")
            self.level += 1
            self.emit(f"{ty} {b.name}[{size}] __attribute__((aligned(64)));")
        elif keep_temporary(b):
            slot = f"pc_keep_{b.name}"
            self.emit("{")
            self.level += 1
            self.emit(f"static __thread pc_keep {slot};")
            self.emit(f"int {slot}_kept;")
            self.emit(f"{ty}* restrict {b.name} = ({ty}*)pc_keep_take(&{slot}, "
                      f"sizeof({ty}) * (size_t)({size}), &{slot}_kept);")
            self.emit(f"if ({b.name} == NULL) {{ {ALLOC_FAILED_SET} }} else {{")
            self.level += 1
        else:
            self.emit("{")
            self.level += 1
            self.emit(f"{ty}* restrict {b.name} = ({ty}*)aligned_alloc(64, "
                      f"((sizeof({ty}) * (size_t)({size}) + 63) / 64) * 64);")
            # a failed allocation skips the work and is reported by the caller
            # (CFunction raises ResourceLimitError), never a NULL dereference
            self.emit(f"if ({b.name} == NULL) {{ {ALLOC_FAILED_SET} }} else {{")
            self.level += 1
        self.stmt(s.body)
        if b.scope != "local" and keep_temporary(b):
            self.emit(f"pc_keep_give(&pc_keep_{b.name}, {b.name}, pc_keep_{b.name}_kept);")
            self.level -= 1
            self.emit("}")
        elif b.scope != "local":
            self.emit(f"free({b.name});")
            self.level -= 1
            self.emit("}")
        self.level -= 1
        self.emit("}")


#: a temporary of a constant size below this many bytes is allocated per call as before
#: (the heap serves it without page faults); the C header's ``PC_KEEP_MIN``
KEEP_MIN_BYTES = 1 << 20


def keep_temporaries_enabled() -> bool:
    """``POLYCOMP_KEEP_TEMPS=0`` at compile time: every temporary ``malloc``ed and freed
    per call, as before (comparisons)."""
    return os.environ.get("POLYCOMP_KEEP_TEMPS", "1") != "0"


def keep_temporary(b: ir.Buffer) -> bool:
    """Whether the global temporary ``b`` is taken from its allocation's kept per-thread
    slot (``pc_keep_take`` of the C header) instead of ``aligned_alloc`` / ``free`` per
    call: when its size is symbolic or at least :data:`KEEP_MIN_BYTES` (the header keeps
    only ``PC_KEEP_MIN`` .. ``PC_KEEP_MAX`` bytes at run time).  Such a buffer was mapped
    fresh at every call and each of its pages faulted and zeroed by the kernel: BERT
    batch 8 seq 384's FFN kernel spent 20-80 ms of system time a call on its two 37.7 MB
    temporaries (docs/graph.md, "BERT batch 8 seq 384 on the Zen 3 host")."""
    if b.scope == "local" or not keep_temporaries_enabled():
        return False
    n = 1
    for d in b.shape:
        c = ir.const(d)
        if not isinstance(c, ir.IntImm):
            return True
        n *= int(c.value)
    return n * dt.itemsize(b.dtype) >= KEEP_MIN_BYTES


def signature(func: ir.LoweredFunc, printer: CLikePrinter, qualifier: str = "") -> str:
    parts = [f"int64_t {p.name}" for p in func.params]
    for b in func.inputs:
        parts.append(f"const {printer.storage_type(b.dtype)}* restrict {b.name}")
    for b in func.outputs:
        parts.append(f"{printer.storage_type(b.dtype)}* restrict {b.name}")
    return f"{qualifier}void {func.name}({', '.join(parts) or 'void'})"


def emit_c(func: ir.LoweredFunc, printer_cls=CPrinter, extra_header: str = "",
           names_legal: bool = False) -> str:
    """The C source of a flattened :class:`~polycomp.ir.LoweredFunc` (buffers and
    variables whose names C cannot use are renamed; arguments keep their order).
    ``names_legal``: ``func`` came out of :func:`~polycomp.hw.clike.legalize_names`
    (which would return it unchanged): the check is skipped."""
    if not names_legal:
        func = legalize_names(func)
    p = printer_cls()
    p.stmt(func.body)
    head = f"/* generated by polycomp: kernel {func.name} */\n" + C_HEADER + extra_header + \
        PRELUDE_END
    # functions the printer outlined (the vector printer's register tiles) go first
    helpers = "".join("\n" + f for f in getattr(p, "functions", ()))
    return head + helpers + "\n" + signature(func, p) + " {\n" + "\n".join(p.lines) + "\n}\n"


# ------------------------------------------------------------ multi-version modules


def _host_signature(mf: ir.ModuleFunction, p: CPrinter) -> str:
    f = mf.func
    if mf.result == "void":
        return signature(f, p, "" if mf.exported else "static ")
    parts = [f"int64_t {v.name}" for v in f.params]
    parts += [f"const {p.storage_type(b.dtype)}* restrict {b.name}" for b in f.inputs]
    parts += [f"{p.storage_type(b.dtype)}* restrict {b.name}" for b in f.outputs]
    static = "" if mf.exported else "static "
    return f"{static}{p.storage_type(mf.result)} {f.name}({', '.join(parts) or 'void'})"


def emit_module(backend, module: ir.LoweredModule, versions: Sequence) -> str:
    """The C source of ``module``; ``backend`` (the C backend) gives each version's
    printer and header parts from its compile state."""
    states = [ck.state for ck in versions]
    exact = {bool(s.options.fp_exact) for s in states}
    if len(exact) > 1:
        raise UsageError(f"multi-version {module.name}: versions differ in fp_exact (one "
                         f"translation unit takes one floating-point mode)")
    printers: dict[int, type] = {}
    header: list[str] = []
    for mf in module.of_role(ir.VERSION):
        ck = versions[mf.version]
        printers[mf.version], parts = backend.printer_and_header(ck.final_ir, ck.state)
        header += [x for x in parts if x and x not in header]
    n = len(module.of_role(ir.VERSION))
    out = [(FP_EXACT_C_PRAGMA if exact == {True} else "")
           + f"/* generated by polycomp: kernel {module.name}, {n} versions, their selector "
           f"and dispatcher (one module) */\n" + C_HEADER + "".join(header) + PRELUDE_END]
    for mf in module.functions:
        p = printers.get(mf.version, CPrinter)() if mf.role == ir.VERSION else CPrinter()
        if hasattr(p, "outline_prefix"):     # outlined register tiles, named per version
            p.outline_prefix = f"pc_v{mf.version}"
        p.stmt(mf.func.body)
        comment = f"/* {mf.comment} */\n" if mf.comment else ""
        out += getattr(p, "functions", [])
        out.append(comment + _host_signature(mf, p) + " {\n" + "\n".join(p.lines) + "\n}\n")
    return "\n".join(out)
