"""DLPack interop: any ``__dlpack__`` tensor (numpy, torch CPU) in, zero-copy, and the
caller's array type out (torch in -> torch out).

What a torch tensor must be, and what is done otherwise (one :class:`ArgumentError` line
naming the argument, never a raw ``BufferError``):

* a dense (``torch.strided``) CPU tensor: a sparse, meta or CUDA tensor is refused;
* a tensor with the *negative* or *conjugate* bit set (``z.conj().imag``, ``z.conj()``)
  is resolved first (one copy), so its values are read with their sign;
* ``bfloat16`` (which numpy's DLPack import does not know) is passed as its int16 bits
  and viewed as ``ml_dtypes.bfloat16`` (zero-copy, both ways);
* a tensor that requires grad while grad mode is on is refused (polycomp kernels do not
  record autograd: the result would silently lose its gradient); under
  ``torch.no_grad()`` it is read through ``detach()``;
* an object whose ``__dlpack__`` raises is reported with that exception's message.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from polycomp.errors import ArgumentError, user_location


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _torch_to_numpy(x: Any, what: str, written: bool) -> np.ndarray:
    import torch
    if x.layout != torch.strided:
        raise ArgumentError(f"{what} is a {x.layout} tensor: polycomp reads dense tensors "
                            f"(call .to_dense() first)", user_location())
    if x.device.type != "cpu":
        why = "it has no data" if x.device.type == "meta" else \
            "polycomp's compiled graphs and built C kernels run on the CPU (call .cpu())"
        raise ArgumentError(f"{what} is a tensor on device {x.device}: {why}", user_location())
    if x.requires_grad:
        if torch.is_grad_enabled():
            raise ArgumentError(
                f"{what} requires grad: polycomp kernels do not record autograd, so the "
                f"result would lose its gradient; call under torch.no_grad() (or pass "
                f".detach())", user_location())
        x = x.detach()
    if x.is_neg() or x.is_conj():  # lazy negation/conjugation: materialise it
        if written:
            raise ArgumentError(f"{what} has the {'negative' if x.is_neg() else 'conjugate'} "
                                f"bit set (a lazy view): it cannot be written in place; "
                                f"pass a tensor without it (.resolve_neg(), .resolve_conj())",
                                user_location())
        x = x.resolve_neg().resolve_conj()
    try:
        if x.dtype == torch.bfloat16:
            from polycomp.dtypes import to_numpy as np_dtype
            return np.from_dlpack(x.view(torch.int16)).view(np_dtype("bfloat16"))
        return np.from_dlpack(x)
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        raise ArgumentError(f"{what} ({x.dtype} tensor) cannot be read through DLPack: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}",
                            user_location()) from None


def to_numpy(x: Any, what: str = "an argument", written: bool = False) -> np.ndarray:
    """A numpy view (zero-copy where possible) of ``x``; ``what`` names it in errors;
    ``written``: ``x`` is an ``out=`` array the caller expects to be written in place."""
    if isinstance(x, np.ndarray):
        return x
    if _is_torch(x) and hasattr(x, "layout"):
        return _torch_to_numpy(x, what, written)
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except Exception as e:  # the object's own __dlpack__ failed: report it, once
            raise ArgumentError(f"{what} ({type(x).__name__}) cannot be read through "
                                f"DLPack: its __dlpack__ raised {type(e).__name__}: {e}",
                                user_location()) from None
    try:
        return np.asarray(x)
    except Exception as e:
        raise ArgumentError(f"{what} ({type(x).__name__}) is not an array: {e}",
                            user_location()) from None


def from_caller(xs: Sequence[Any], names: Sequence[str] | None = None,
                written: bool = False) -> tuple[list[np.ndarray], str]:
    """numpy views of the caller's arrays and the kind to return ("torch" or "numpy");
    ``names`` name the arguments in errors; ``written``: they are ``out=`` arrays."""
    if all(type(x) is np.ndarray for x in xs):      # the common case, without labels
        return list(xs), "numpy"
    kind = "torch" if any(_is_torch(x) for x in xs) else "numpy"
    label = "out[{}]" if written else "argument {}"
    return [to_numpy(x, (label.format(k) if written else label.format(k + 1))
                     + (f" ({names[k]!r})" if names and k < len(names) else ""), written)
            for k, x in enumerate(xs)], kind


def _to_torch(a: np.ndarray):
    import torch

    from polycomp.dtypes import to_numpy as np_dtype
    if a.dtype == np_dtype("bfloat16"):
        return torch.from_dlpack(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


def to_caller(result: Any, kind: str) -> Any:
    if kind != "torch":
        return result
    if isinstance(result, (tuple, list)):
        return tuple(_to_torch(r) for r in result)
    return _to_torch(result)


def call_with_dlpack(call, inputs: Sequence[Any], out: Any, params: dict) -> Any:
    """Run ``call(*numpy_inputs, out=numpy_outs, **params)`` for a built kernel whose
    arguments may be DLPack tensors; ``out`` tensors are written in place."""
    arrays, kind = from_caller(inputs)
    if out is None:
        return to_caller(call(*arrays, **params), kind)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    call(*arrays, out=from_caller(outs, written=True)[0], **params)
    return out


def needs_conversion(inputs: Sequence[Any], out: Any) -> bool:
    xs = list(inputs) + (list(out) if isinstance(out, (list, tuple)) else
                         [] if out is None else [out])
    return any(not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__") for x in xs)
