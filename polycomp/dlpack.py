"""DLPack interop: any ``__dlpack__`` tensor (numpy, torch CPU) in, zero-copy, and the
caller's array type out (torch in -> torch out)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def to_numpy(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        if getattr(x, "requires_grad", False):  # inference: share the storage, no autograd
            x = x.detach()
        return np.from_dlpack(x)
    return np.asarray(x)


def from_caller(xs: Sequence[Any]) -> tuple[list[np.ndarray], str]:
    """numpy views of the caller's arrays and the kind to return ("torch" or "numpy")."""
    kind = "torch" if any(_is_torch(x) for x in xs) else "numpy"
    return [to_numpy(x) for x in xs], kind


def to_caller(result: Any, kind: str) -> Any:
    if kind != "torch":
        return result
    import torch
    if isinstance(result, tuple):
        return tuple(torch.from_dlpack(r) for r in result)
    return torch.from_dlpack(result)


def call_with_dlpack(call, inputs: Sequence[Any], out: Any, params: dict) -> Any:
    """Run ``call(*numpy_inputs, out=numpy_outs, **params)`` for a built kernel whose
    arguments may be DLPack tensors; ``out`` tensors are written in place."""
    arrays, kind = from_caller(inputs)
    if out is None:
        return to_caller(call(*arrays, **params), kind)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    call(*arrays, out=[to_numpy(o) for o in outs], **params)
    return out


def needs_conversion(inputs: Sequence[Any], out: Any) -> bool:
    xs = list(inputs) + (list(out) if isinstance(out, (list, tuple)) else
                         [] if out is None else [out])
    return any(not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__") for x in xs)
