"""Data types: names, numpy equivalents, C/CUDA spellings and promotion rules.

polycomp spells dtypes as strings: ``float16 bfloat16 float32 float64 int8 int32 int64
bool``.  ``int64`` is the type of iterators and symbolic dimensions.  Arithmetic on
float16/bfloat16 values is carried out in float32 and rounded when stored (what CUDA's
``__half`` arithmetic and numpy's float16 ufuncs do per operation, up to rounding).
"""
from __future__ import annotations

import numpy as np

from .errors import DTypeError, user_location

try:  # ml_dtypes gives numpy a bfloat16
    import ml_dtypes as _ml
    _BF16 = np.dtype(_ml.bfloat16)
except Exception:  # pragma: no cover - ml_dtypes is a hard dependency
    _BF16 = None

DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "bool")
FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "int32", "int64")

_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64,
         "int8": 8, "int32": 32, "int64": 64, "bool": 1}

_ALIASES = {"f16": "float16", "half": "float16", "bf16": "bfloat16", "f32": "float32",
            "float": "float32", "f64": "float64", "double": "float64", "i8": "int8",
            "i32": "int32", "int": "int32", "i64": "int64", "bool_": "bool"}

C_TYPES = {"float16": "_Float16", "bfloat16": "uint16_t", "float32": "float",
           "float64": "double", "int8": "int8_t", "int32": "int32_t", "int64": "int64_t",
           "bool": "bool"}
CUDA_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float",
              "float64": "double", "int8": "int8_t", "int32": "int", "int64": "long long",
              "bool": "bool"}


def canonical(dtype) -> str:
    """Return the canonical name of ``dtype`` (a string, numpy dtype or type) or raise."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
        if name in DTYPES:
            return name
    else:
        try:
            nd = np.dtype(dtype)
        except TypeError:
            nd = None
        if nd is not None:
            if _BF16 is not None and nd == _BF16:
                return "bfloat16"
            if nd.name in DTYPES:
                return nd.name
    raise DTypeError(f"unknown dtype {dtype!r}; polycomp supports {', '.join(DTYPES)}",
                     user_location())


def to_numpy(dtype: str) -> np.dtype:
    if dtype == "bfloat16":
        return _BF16
    return np.dtype(dtype)


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


def bits(dtype: str) -> int:
    return _BITS[dtype]


def itemsize(dtype: str) -> int:
    return max(1, _BITS[dtype] // 8)


def compute_dtype(dtype: str) -> str:
    """The dtype arithmetic on ``dtype`` values is carried out in."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def promote(a: str, b: str) -> str:
    """numpy-like promotion of two (strongly typed) operand dtypes."""
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    fa, fb = is_float(a), is_float(b)
    if fa and not fb:
        return a
    if fb and not fa:
        return b
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    return a if _BITS[a] >= _BITS[b] else b
