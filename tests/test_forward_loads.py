"""The ``forward-loads`` IR pass (:mod:`polycomp.hw.cpu.forward_loads`): IR in, IR out
on a fused stencil row (fdtd-2d's three statements over one vector loop)."""
from __future__ import annotations

from polycomp import ir
from polycomp.hw.cpu.forward_loads import _Forward


def _vec(buf, base, lanes=8):
    return ir.Load(buf, (ir.Ramp(base, ir.IntImm(1), lanes),), buf.dtype, lanes)


def _store(buf, base, value, lanes=8):
    return ir.Store(buf, (ir.Ramp(base, ir.IntImm(1), lanes),), value, lanes)


def _fdtd_row():
    """``ey[r] -= .5 (hz[r] - hz[r-1])``, ``ex[r] -= .5 (hz[r] - hz[r][-1])``,
    ``hz[r-1] -= .7 (ex[r-1][+1] - ex[r-1] + ey[r] - ey[r-1])`` at ``8v`` of row ``r``
    (rows of 16), vectorised."""
    ex, ey, hz = (ir.Buffer(n, "float64", (64,), flat=True) for n in ("ex", "ey", "hz"))
    v = ir.Var("v")
    r = ir.Var("r", is_param=True)
    row = r * 16 + v * 8
    prev = (r - 1) * 16 + v * 8
    half, c7 = ir.Broadcast(ir.FloatImm(0.5, "float64"), 8, "float64"), \
        ir.Broadcast(ir.FloatImm(0.7, "float64"), 8, "float64")
    s1 = _store(ey, row, _vec(ey, row) - half * (_vec(hz, row) - _vec(hz, prev)))
    s2 = _store(ex, row, _vec(ex, row) - half * (_vec(hz, row) - _vec(hz, row - 1)))
    s3 = _store(hz, prev, _vec(hz, prev) - c7 * (_vec(ex, prev + 1) - _vec(ex, prev)
                                                 + _vec(ey, row) - _vec(ey, prev)))
    loop = ir.For(v, ir.IntImm(0), ir.IntImm(2), "serial", ir.Block((s1, s2, s3)))
    return loop, (ex, ey, hz)


def _loads(node, buf):
    out: list = []
    ir.walk(node, lambda n: out.append(n)
            if isinstance(n, ir.Load) and n.buffer is buf else None)
    return out


def _run(loop):
    return _Forward().stmt(loop)


def test_stored_and_repeated_values_are_reused():
    loop, (ex, ey, hz) = _fdtd_row()
    out = _run(loop)
    # hz[r] and hz[r-1] loaded once (the ey and ex rows share hz[r]; the hz row reads
    # the hz[r-1] the ey row read, before its own store), ey[r] taken from its store
    assert len(_loads(loop, hz)) == 5 and len(_loads(out, hz)) == 3
    assert len(_loads(loop, ey)) == 3 and len(_loads(out, ey)) == 2
    assert len(_loads(out, ex)) == 3          # ex[r], ex[r-1], ex[r-1][+1]: all distinct
    lets = []
    ir.walk(out, lambda n: lets.append(n) if isinstance(n, ir.LetStmt) else None)
    assert len(lets) == 3                     # hz[r], hz[r-1], the new ey[r]
    stores = []
    ir.walk(out, lambda n: stores.append(n) if isinstance(n, ir.Store) else None)
    assert [s.buffer for s in stores] == [ey, ex, hz]   # no statement reordered


def test_a_store_forgets_the_buffers_values():
    ex, hz = (ir.Buffer(n, "float64", (64,), flat=True) for n in ("ex", "hz"))
    v = ir.Var("v")
    a, b = v * 8, v * 8 + 16
    s1 = _store(ex, a, _vec(hz, a) + _vec(hz, b))
    s2 = _store(hz, b, _vec(ex, a))          # ex[a] from s1's store
    s3 = _store(ex, b, _vec(hz, a))          # hz was stored (at another index): reload
    loop = ir.For(v, ir.IntImm(0), ir.IntImm(2), "serial", ir.Block((s1, s2, s3)))
    out = _run(loop)
    assert len(_loads(out, ex)) == 0
    assert len(_loads(out, hz)) == 3


def test_scalar_runs_are_left_alone():
    a = ir.Buffer("a", "float64", (8,), flat=True)
    v = ir.Var("v")
    s1 = ir.Store(a, (v,), ir.Load(a, (v,), "float64") + ir.FloatImm(1.0, "float64"))
    s2 = ir.Store(a, (v + 1,), ir.Load(a, (v,), "float64"))
    loop = ir.For(v, ir.IntImm(0), ir.IntImm(4), "serial", ir.Block((s1, s2)))
    assert ir.structural_equal(_run(loop), loop)
