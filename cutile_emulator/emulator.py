"""A tile-level CPU emulator of the part of NVIDIA cuTile (``cuda.tile``) the course kernels use.

cuTile has no CPU interpreter. This module stands in for ``cuda.tile`` on machines without a GPU:
``glm_asr_course.runtimes.cutile`` exports it as ``ct`` there, so a kernel file written against
``ct.*`` runs unchanged. Launching a kernel runs its Python body once per block of the grid, in
order, with ``ct.bid`` set; every tile operation is one torch operation on the whole tile (so a
kernel costs a Python loop over blocks, not over elements).

What it keeps from the real compiler (docs/cutile_api_notes.md has the sources):

* tiles have power-of-two dimensions fixed when the kernel is written (Python ints);
* ``load`` / ``store`` index arrays in tile units; elements of a tile past the array's end load the
  padding value and are dropped on store; a tile wholly outside the array is an error (undefined on
  the GPU). ``PaddingMode.UNDETERMINED`` (the default) loads NaN for floats, so a kernel that relies
  on it fails here instead of by chance on the GPU;
* dtypes: runtime scalar arguments are strict int32 / float32 (a float argument is rounded to fp32),
  Python numbers and ``ct.Constant`` values are loosely typed (a Python float is a float32 constant,
  even next to a float64 tile), and binary operations promote by cuTile's table (refusing float16
  with bfloat16, signed with unsigned, tfloat32 with anything); storing needs an implicit cast
  (float32 into a bfloat16 array is refused: ``astype`` first);
* conversions round to nearest even (to bfloat16, float16, float32, and to tfloat32: the float32
  mantissa rounded to 10 bits, as cuTile's default ``astype(x, ct.tfloat32)`` does on Hopper);
* ``mma`` takes two operands of one dtype from cuTile's table (bf16 / f16 / tf32 / f32 / f64 / int8)
  and accumulates in the accumulator's dtype; the products are summed in fp64 and rounded once, so
  the emulator is at least as exact as the tensor cores;
* ``max`` / ``min`` / ``maximum`` / ``minimum`` ignore NaN unless ``propagate_nan=True``.

What it does not model: the compiler's fusion of ``a * b + c`` into one FMA (the GPU may differ by
an fp32 ulp there), approximate math modes (``RoundingMode.APPROX`` computes exactly here), integer
overflow checks, memory ordering and atomics. Every ``ct.X`` it does not implement raises one
``CutileEmulatorError`` line naming the call. Each launch is recorded (kernel, argument dtypes /
shapes / strides, constants, grid) so glm_asr_lab/cutile_compile_check.py can compile the same signatures
with the real compiler.
"""

from __future__ import annotations

import builtins
import enum
import inspect
import math
import typing
from dataclasses import dataclass

import torch

from cutile_emulator.tf32 import TF32_ROUNDINGS, round_to_tf32

_EMULATOR = "cuda.tile emulator"


class CutileEmulatorError(AttributeError):
    """Kernel code the emulator cannot run: an unsupported ``ct`` call, or code the real compiler
    rejects or whose result cuTile leaves undefined. An ``AttributeError`` so that ``hasattr(ct, x)``
    answers False for what is missing."""

    def __init__(self, message: str):
        super().__init__(f"{_EMULATOR}: {message}")


# ==================================================================================================
# Data types and promotion
# ==================================================================================================

_BOOL, _INT, _FLOAT = 0, 1, 2  # categories, in promotion order


class DType:
    """A cuTile dtype: compared by identity; calling it makes a strictly typed scalar."""

    def __init__(self, name: str, torch_dtype: torch.dtype, category: int, bits: int, *,
                 signed: bool = True, restricted: bool = False):
        self.name, self.torch_dtype, self.category, self.bitwidth = name, torch_dtype, category, bits
        self.signed, self.restricted = signed, restricted

    def __repr__(self):
        return self.name

    def __call__(self, value):
        return astype(value, self)


bool_ = DType("bool_", torch.bool, _BOOL, 8)
int8 = DType("int8", torch.int8, _INT, 8)
int16 = DType("int16", torch.int16, _INT, 16)
int32 = DType("int32", torch.int32, _INT, 32)
int64 = DType("int64", torch.int64, _INT, 64)
uint8 = DType("uint8", torch.uint8, _INT, 8, signed=False)
float16 = DType("float16", torch.float16, _FLOAT, 16)
bfloat16 = DType("bfloat16", torch.bfloat16, _FLOAT, 16)
float32 = DType("float32", torch.float32, _FLOAT, 32)
float64 = DType("float64", torch.float64, _FLOAT, 64)
# A tensor-core input format: fp32 range, 10 mantissa bits. Held as float32 values already rounded.
tfloat32 = DType("tfloat32", torch.float32, _FLOAT, 32, restricted=True)

_DTYPES = (bool_, int8, int16, int32, int64, uint8, float16, bfloat16, float32, float64, tfloat32)
_FROM_TORCH = {d.torch_dtype: d for d in _DTYPES if not d.restricted}


def _loose_dtype(value) -> DType:
    """The dtype cuTile gives a loosely typed Python number when it meets a typed operand."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        if -2 ** 31 <= value < 2 ** 31:
            return int32
        if -2 ** 63 <= value < 2 ** 63:
            return int64
        raise CutileEmulatorError(f"integer constant {value} does not fit int64")
    if isinstance(value, float):
        return float32
    raise CutileEmulatorError(f"{type(value).__name__} value {value!r} is not a number cuTile can use")


def _promote_strict(a: DType, b: DType) -> DType:
    """cuTile's table for two typed operands."""
    if a is b:
        return a
    if a.restricted or b.restricted:
        raise CutileEmulatorError(f"implicit promotion of {a} and {b} is not supported "
                                  "(tfloat32 only meets tfloat32): convert with ct.astype first")
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.category == _INT:
        if a.signed != b.signed:
            raise CutileEmulatorError(f"implicit promotion of {a} and {b} is not supported "
                                      "(signed with unsigned): convert with ct.astype first")
        return a if a.bitwidth >= b.bitwidth else b
    if {a, b} == {float16, bfloat16}:
        raise CutileEmulatorError("implicit promotion of float16 and bfloat16 is not supported: "
                                  "convert with ct.astype first")
    return a if a.bitwidth >= b.bitwidth else b


def _promote(x, y, force_float: bool = False) -> DType:
    """Result dtype of a binary operation on x and y (tiles or loose Python numbers, not both loose)."""
    if isinstance(x, Tile) and isinstance(y, Tile):
        dtype = _promote_strict(x.dtype, y.dtype)
    else:
        tile, loose = (x, y) if isinstance(x, Tile) else (y, x)
        loose_dtype = _loose_dtype(loose)
        category = tile.dtype.category
        if loose_dtype.category == category:
            dtype = tile.dtype
            if category == _INT and not force_float:
                info = torch.iinfo(dtype.torch_dtype)
                if not info.min <= loose <= info.max:
                    raise CutileEmulatorError(f"integer constant {loose} is out of range of {dtype}")
        else:
            dtype = loose_dtype if loose_dtype.category > category else tile.dtype
    if force_float and dtype.category != _FLOAT:
        return float32
    return dtype


def _check_implicit_cast(value, target: DType, what: str):
    """What cuTile accepts without ct.astype: a value whose promotion with target is target."""
    if isinstance(value, Tile):
        try:
            ok = _promote_strict(value.dtype, target) is target
        except CutileEmulatorError:
            ok = False
        if not ok:
            raise CutileEmulatorError(f"{what}: cannot implicitly cast {value.dtype} to {target}; "
                                      "convert with ct.astype first")
        return
    loose = _loose_dtype(value)
    if target.category == _BOOL:
        ok = loose.category <= _INT and value in (0, 1)
    else:
        ok = loose.category <= target.category
    if not ok:
        raise CutileEmulatorError(f"{what}: cannot implicitly cast {value!r} to {target}")


# ==================================================================================================
# Rounding
# ==================================================================================================


class RoundingMode(enum.Enum):
    RN = "nearest_even"
    RZ = "zero"
    RM = "negative_inf"
    RP = "positive_inf"
    RA = "nearest_away"
    FULL = "full"
    APPROX = "approx"
    RZI = "nearest_int_to_zero"


class PaddingMode(enum.Enum):
    UNDETERMINED = "undetermined"
    ZERO = "zero"
    NEG_ZERO = "neg_zero"
    NAN = "nan"
    POS_INF = "pos_inf"
    NEG_INF = "neg_inf"


def _round_to_tf32(x: torch.Tensor, mode: RoundingMode) -> torch.Tensor:
    """float32 values rounded to tfloat32 (cutile_emulator.tf32): RN to nearest even (cuTile's
    default), RA ties away from zero, RZ truncation."""
    if mode.value not in TF32_ROUNDINGS:
        raise CutileEmulatorError(f"ct.astype to tfloat32 with rounding_mode={mode} is not supported")
    return round_to_tf32(x, mode.value)


def _convert(data: torch.Tensor, source: DType, target: DType, mode: RoundingMode | None) -> torch.Tensor:
    """Tile data of dtype ``source`` as dtype ``target``: float conversions round to nearest even."""
    if mode not in (None, RoundingMode.RN) and target is not tfloat32:
        raise CutileEmulatorError(f"ct.astype with rounding_mode={mode} is emulated only for tfloat32")
    if target is tfloat32:
        if source.category != _FLOAT:
            raise CutileEmulatorError(f"ct.astype from {source} to tfloat32 is not supported")
        return _round_to_tf32(data.to(torch.float32), mode or RoundingMode.RN)
    if target.category == _BOOL:
        return data != 0
    return data.to(target.torch_dtype)


def _flush_denormals(data: torch.Tensor) -> torch.Tensor:
    tiny = torch.finfo(data.dtype).tiny
    return torch.where(data.abs() < tiny, torch.zeros_like(data).copysign(data), data)


# ==================================================================================================
# Tiles
# ==================================================================================================


def _is_power_of_two(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


def _constant_shape(shape, what: str, allow_empty: bool = False) -> tuple[int, ...]:
    """A tile shape: Python ints (compile-time constants), each a power of two."""
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or (not shape and not allow_empty):
        raise CutileEmulatorError(f"{what}: the shape must be a tuple of constant ints, got {shape!r}")
    for dim in shape:
        if isinstance(dim, Tile):
            raise CutileEmulatorError(f"{what}: tile shapes are compile-time constants; {shape} holds a "
                                      "runtime value (pass the size as a ct.Constant[int] parameter)")
        if not _is_power_of_two(dim):
            raise CutileEmulatorError(f"{what}: every tile dimension must be a power of two, got {tuple(shape)}")
    return tuple(shape)


class Tile:
    """An immutable tile: ``data`` (torch, CPU) in ``dtype``'s torch dtype (tfloat32: as float32)."""

    __slots__ = ("data", "dtype")

    def __init__(self, data: torch.Tensor, dtype: DType):
        self.data, self.dtype = data, dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.dim()

    def __repr__(self):
        return f"Tile({self.dtype}, {list(self.shape)}: {self.data.tolist()})"

    def __getattr__(self, name):
        raise CutileEmulatorError(f"ct.Tile.{name} is not supported (tiles have: astype, dtype, ndim, "
                                  "permute, reshape, shape, transpose, [None / : / ...] indexing, "
                                  "arithmetic and comparisons)")

    # A 0-d tile is a scalar: Python control flow and range() may use it.
    def __bool__(self):
        if self.data.dim() != 0:
            raise CutileEmulatorError(f"the truth value of a {list(self.shape)} tile is ambiguous: use "
                                      "ct.where, ct.maximum / ct.minimum or a reduction")
        return bool(self.data)

    def __index__(self):
        if self.data.dim() != 0 or self.dtype.category == _FLOAT:
            raise CutileEmulatorError(f"a {self.dtype} {list(self.shape)} tile is not an integer scalar")
        return int(self.data)

    def astype(self, dtype, *, rounding_mode=None):
        return astype(self, dtype, rounding_mode=rounding_mode)

    def reshape(self, shape):
        return reshape(self, shape)

    def permute(self, axes):
        return permute(self, axes)

    def transpose(self, axis0=None, axis1=None):
        return transpose(self, axis0, axis1)

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if any(k is not None and k is not Ellipsis and k != slice(None) for k in key):
            raise CutileEmulatorError(f"tiles cannot be indexed by {key!r}: only None (a new axis of "
                                      "size 1), ':' and '...' are allowed")
        return Tile(self.data[key], self.dtype)

    def __add__(self, other):
        return _binary("add", self, other)

    def __radd__(self, other):
        return _binary("add", other, self)

    def __sub__(self, other):
        return _binary("sub", self, other)

    def __rsub__(self, other):
        return _binary("sub", other, self)

    def __mul__(self, other):
        return _binary("mul", self, other)

    def __rmul__(self, other):
        return _binary("mul", other, self)

    def __truediv__(self, other):
        return _binary("truediv", self, other)

    def __rtruediv__(self, other):
        return _binary("truediv", other, self)

    def __floordiv__(self, other):
        return _binary("floordiv", self, other)

    def __rfloordiv__(self, other):
        return _binary("floordiv", other, self)

    def __mod__(self, other):
        return _binary("mod", self, other)

    def __rmod__(self, other):
        return _binary("mod", other, self)

    def __pow__(self, other):
        return _binary("pow", self, other)

    def __rpow__(self, other):
        return _binary("pow", other, self)

    def __and__(self, other):
        return _binary("and", self, other)

    def __rand__(self, other):
        return _binary("and", other, self)

    def __or__(self, other):
        return _binary("or", self, other)

    def __ror__(self, other):
        return _binary("or", other, self)

    def __xor__(self, other):
        return _binary("xor", self, other)

    def __rxor__(self, other):
        return _binary("xor", other, self)

    def __lt__(self, other):
        return _binary("lt", self, other)

    def __le__(self, other):
        return _binary("le", self, other)

    def __gt__(self, other):
        return _binary("gt", self, other)

    def __ge__(self, other):
        return _binary("ge", self, other)

    def __eq__(self, other):
        return _binary("eq", self, other)

    def __ne__(self, other):
        return _binary("ne", self, other)

    __hash__ = None

    def __neg__(self):
        if self.dtype.category == _BOOL or self.dtype.restricted:
            raise CutileEmulatorError(f"cannot negate a {self.dtype} tile")
        return Tile(-self.data, self.dtype)

    def __invert__(self):
        if self.dtype.category == _FLOAT:
            raise CutileEmulatorError("~ needs a bool or integer tile")
        return Tile(~self.data, self.dtype)

    def __matmul__(self, other):
        return matmul(self, other)


def _scalar_tile(value, dtype: DType) -> Tile:
    return Tile(torch.tensor(value, dtype=dtype.torch_dtype), dtype)


def _data_as(x, dtype: DType) -> torch.Tensor:
    """x (a tile or a loose number) as torch data of dtype, converted as cuTile's promotion does: a
    Python number first becomes a constant of its own concrete dtype (a float becomes float32, even
    next to a float64 tile: 0.001 * x64 multiplies by 0.0010000000474974513), then converts."""
    if not isinstance(x, Tile):
        concrete = _loose_dtype(x)
        x = Tile(torch.tensor(x, dtype=concrete.torch_dtype), concrete)
    return x.data if x.dtype is dtype else _convert(x.data, x.dtype, dtype, None)


_ARITHMETIC = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.div, "pow": torch.pow,
    "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"), "mod": torch.remainder,
}
_BITWISE = {"and": torch.bitwise_and, "or": torch.bitwise_or, "xor": torch.bitwise_xor}
_COMPARE = {"lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}
_PYTHON_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "pow": lambda a, b: a ** b, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b, "max": builtins.max, "min": builtins.min,
}


def _require_operand(x, what: str):
    if isinstance(x, Tile):
        return
    if isinstance(x, (bool, int, float)):
        return
    raise CutileEmulatorError(f"{what}: {type(x).__name__} is not a tile or a number")


def _binary(fn: str, x, y, *, flush_to_zero: bool = False, propagate_nan: bool = False):
    _require_operand(x, fn)
    _require_operand(y, fn)
    if not isinstance(x, Tile) and not isinstance(y, Tile):
        return _PYTHON_BINARY[fn](x, y)  # loose constants fold in Python, as in cuTile
    for operand in (x, y):
        if isinstance(operand, Tile) and operand.dtype.restricted:
            raise CutileEmulatorError(f"{fn} of a tfloat32 tile: tfloat32 only feeds ct.mma; "
                                      "convert with ct.astype(x, ct.float32)")
    if fn in _BITWISE:
        dtype = _promote(x, y)
        if dtype.category == _FLOAT:
            raise CutileEmulatorError(f"bitwise {fn} needs bool or integer operands, got {dtype}")
        return Tile(_BITWISE[fn](_data_as(x, dtype), _data_as(y, dtype)), dtype)
    dtype = _promote(x, y, force_float=(fn == "truediv"))
    a, b = _data_as(x, dtype), _data_as(y, dtype)
    if fn in _COMPARE:
        return Tile(_COMPARE[fn](a, b), bool_)
    if fn in ("max", "min"):
        if dtype.category == _FLOAT and not propagate_nan:
            out = torch.fmax(a, b) if fn == "max" else torch.fmin(a, b)
        else:
            out = torch.maximum(a, b) if fn == "max" else torch.minimum(a, b)
    else:
        if dtype.category == _BOOL:
            raise CutileEmulatorError(f"{fn} of bool operands: convert with ct.astype first")
        out = _ARITHMETIC[fn](a, b)
    if flush_to_zero:
        out = _flush_denormals(out)
    return Tile(out.to(dtype.torch_dtype), dtype)


# ==================================================================================================
# Arrays (kernel arguments)
# ==================================================================================================


class Array:
    """A global array: a strided view of a torch tensor, as cuTile sees a kernel's tensor argument."""

    __slots__ = ("tensor", "dtype")

    def __init__(self, tensor: torch.Tensor):
        if tensor.dtype not in _FROM_TORCH:
            raise CutileEmulatorError(f"tensors of {tensor.dtype} are not supported")
        if any(s < 0 for s in tensor.stride()):
            raise CutileEmulatorError("arrays with negative strides are not supported")
        self.tensor, self.dtype = tensor, _FROM_TORCH[tensor.dtype]

    @property
    def shape(self) -> tuple[Tile, ...]:
        return tuple(_scalar_tile(n, int32) for n in self.tensor.shape)

    @property
    def strides(self) -> tuple[Tile, ...]:
        return tuple(_scalar_tile(s, int32) for s in self.tensor.stride())

    @property
    def ndim(self) -> int:
        return self.tensor.dim()

    def __getattr__(self, name):
        raise CutileEmulatorError(f"ct.Array.{name} is not supported (arrays have: dtype, ndim, shape, "
                                  "slice, strides)")

    def slice(self, axis, start, stop) -> "Array":
        axis = _constant_int(axis, "Array.slice axis")
        axis = axis + self.ndim if axis < 0 else axis
        if not 0 <= axis < self.ndim:
            raise CutileEmulatorError(f"Array.slice: axis {axis} of a {self.ndim}-d array")
        start, stop, size = _int_value(start), _int_value(stop), self.tensor.shape[axis]
        if not (0 <= start < size and start <= stop <= size):
            raise CutileEmulatorError(f"Array.slice: [{start}, {stop}) is not inside [0, {size}) "
                                      "(undefined in cuTile)")
        return Array(self.tensor.narrow(axis, start, stop - start))


def _require_array(array, what: str) -> Array:
    if not isinstance(array, Array):
        raise CutileEmulatorError(f"{what}: the first argument must be an array (a kernel's tensor "
                                  f"argument), got {type(array).__name__}")
    return array


def _constant_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CutileEmulatorError(f"{what} must be a constant int, got {value!r}")
    return value


def _int_value(value) -> int:
    """A runtime or constant integer scalar as a Python int."""
    if isinstance(value, Tile):
        return value.__index__()
    if isinstance(value, bool) or not isinstance(value, int):
        raise CutileEmulatorError(f"expected an integer scalar, got {value!r}")
    return value


def _axis_order(order, ndim: int, what: str) -> tuple[int, ...]:
    if order == "C":
        return tuple(range(ndim))
    if order == "F":
        return tuple(reversed(range(ndim)))
    if isinstance(order, tuple) and sorted(order) == list(range(ndim)):
        return order
    raise CutileEmulatorError(f"{what}: order must be 'C', 'F' or a permutation of {ndim} axes, got {order!r}")


def _check_hints(what: str, latency, allow_tma):
    if latency is not None and (not isinstance(latency, int) or not 1 <= latency <= 10):
        raise CutileEmulatorError(f"{what}: latency must be a constant int in [1, 10], got {latency!r}")
    if allow_tma is not None and not isinstance(allow_tma, bool):
        raise CutileEmulatorError(f"{what}: allow_tma must be a constant bool, got {allow_tma!r}")


def _tile_region(view: torch.Tensor, index, shape, what: str, check_bounds: bool):
    """The slices of the array view and of the tile that a tile index covers, clipped to the array."""
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) != view.dim():
        raise CutileEmulatorError(f"{what}: index {index} has {len(index)} entries, the array {view.dim()} dims")
    array_part, tile_part = [], []
    for i, (tile_index, extent, size) in enumerate(zip(index, shape, view.shape)):
        start = _int_value(tile_index) * extent
        lo, hi = builtins.max(start, 0), builtins.min(start + extent, size)
        if hi <= lo:
            raise CutileEmulatorError(f"{what}: tile {tuple(_int_value(t) for t in index)} of shape {shape} "
                                      f"lies entirely outside the array of shape {tuple(view.shape)} "
                                      "(undefined in cuTile)")
        if not check_bounds and (lo != start or hi != start + extent):
            raise CutileEmulatorError(f"{what}: check_bounds=False but tile {index} of shape {shape} crosses "
                                      f"the array's edge on axis {i} (undefined in cuTile)")
        array_part.append(slice(lo, hi))
        tile_part.append(slice(lo - start, hi - start))
    return tuple(array_part), tuple(tile_part)


_PADDING_VALUES = {
    PaddingMode.ZERO: 0.0, PaddingMode.NEG_ZERO: -0.0, PaddingMode.NAN: math.nan,
    PaddingMode.POS_INF: math.inf, PaddingMode.NEG_INF: -math.inf,
}


def _padding_value(mode, dtype: DType):
    if not isinstance(mode, PaddingMode):
        raise CutileEmulatorError(f"padding_mode must be a ct.PaddingMode, got {mode!r}")
    if mode is PaddingMode.UNDETERMINED:
        # cuTile leaves these lanes unspecified: NaN (an integer type's minimum, True for bools) makes
        # a kernel that relies on them fail visibly.
        if dtype.category == _FLOAT:
            return math.nan
        return torch.iinfo(dtype.torch_dtype).min if dtype.category == _INT else True
    if dtype.category != _FLOAT and mode is not PaddingMode.ZERO:
        raise CutileEmulatorError(f"padding mode {mode.name} has no {dtype} value")
    return _PADDING_VALUES[mode]


# ==================================================================================================
# The ct.* functions
# ==================================================================================================


@dataclass
class _BlockState:
    bid: tuple[int, int, int] = (0, 0, 0)
    grid: tuple[int, int, int] | None = None


_STATE = _BlockState()


def _require_in_kernel(what: str):
    if _STATE.grid is None:
        raise CutileEmulatorError(f"{what} is only available inside a running kernel")


def _grid_axis(what: str, axis) -> int:
    """The grid axis that ``what`` (ct.bid, ct.num_blocks) asks about: a constant 0, 1 or 2, asked
    inside a running kernel."""
    _require_in_kernel(what)
    axis = _constant_int(axis, f"{what} axis")
    if axis not in (0, 1, 2):
        raise CutileEmulatorError(f"{what} axis must be 0, 1 or 2, got {axis}")
    return axis


def bid(axis) -> Tile:
    return _scalar_tile(_STATE.bid[_grid_axis("ct.bid", axis)], int32)


def num_blocks(axis) -> Tile:
    return _scalar_tile(_STATE.grid[_grid_axis("ct.num_blocks", axis)], int32)


def num_tiles(array, /, axis, shape, order="C") -> Tile:
    arr = _require_array(array, "ct.num_tiles")
    shape = _constant_shape(shape, "ct.num_tiles")
    if len(shape) != arr.ndim:
        raise CutileEmulatorError(f"ct.num_tiles: shape {shape} does not match the array's {arr.ndim} dims")
    axis = _constant_int(axis, "ct.num_tiles axis")
    view_shape = arr.tensor.permute(_axis_order(order, arr.ndim, "ct.num_tiles")).shape
    return _scalar_tile(-(-view_shape[axis] // shape[axis]), int32)


def cdiv(x, y):
    return _binary("floordiv", _binary("add", x, _binary("sub", y, 1)), y)


def load(array, /, index, shape, *, order="C", padding_mode=PaddingMode.UNDETERMINED, check_bounds=True,
         latency=None, allow_tma=None) -> Tile:
    arr = _require_array(array, "ct.load")
    shape = _constant_shape(shape, "ct.load", allow_empty=True)
    tile_shape = shape or (1,) * arr.ndim
    if len(tile_shape) != arr.ndim:
        raise CutileEmulatorError(f"ct.load: tile shape {shape} does not match the array's {arr.ndim} dims")
    _check_hints("ct.load", latency, allow_tma)
    pad = _padding_value(padding_mode, arr.dtype)
    view = arr.tensor.permute(_axis_order(order, arr.ndim, "ct.load"))
    array_part, tile_part = _tile_region(view, index, tile_shape, "ct.load", check_bounds)
    data = torch.full(tile_shape, pad, dtype=arr.dtype.torch_dtype)
    data[tile_part] = view[array_part]
    return Tile(data.reshape(shape), arr.dtype)


def store(array, /, index, tile, *, order="C", check_bounds=True, latency=None, allow_tma=None) -> None:
    arr = _require_array(array, "ct.store")
    _require_operand(tile, "ct.store")
    _check_implicit_cast(tile, arr.dtype, "ct.store")
    _check_hints("ct.store", latency, allow_tma)
    data = _data_as(tile, arr.dtype)
    if data.dim() == 0:
        data = data.reshape((1,) * arr.ndim)
    elif data.dim() != arr.ndim:
        raise CutileEmulatorError(f"ct.store: a {list(data.shape)} tile into a {arr.ndim}-d array "
                                  "(reshape the tile to the array's rank)")
    view = arr.tensor.permute(_axis_order(order, arr.ndim, "ct.store"))
    array_part, tile_part = _tile_region(view, index, tuple(data.shape), "ct.store", check_bounds)
    view[array_part] = data[tile_part]


def _gather_indices(arr: Array, indices, mask, what: str):
    """The broadcast element indices, clamped in-bounds, and which of them are valid."""
    if not isinstance(indices, tuple):
        indices = (indices,)
    if len(indices) != arr.ndim:
        raise CutileEmulatorError(f"{what}: {len(indices)} index tiles for a {arr.ndim}-d array")
    parts = []
    for index in indices:
        if isinstance(index, Tile):
            if index.dtype.category != _INT:
                raise CutileEmulatorError(f"{what}: indices must be integer tiles, got {index.dtype}")
            parts.append(index.data.to(torch.int64))
        else:
            parts.append(torch.tensor(_int_value(index), dtype=torch.int64))
    parts = torch.broadcast_tensors(*parts)
    valid = torch.ones(parts[0].shape, dtype=torch.bool)
    for part, size in zip(parts, arr.tensor.shape):
        valid &= (part >= 0) & (part < size)
    if mask is not None:
        mask_data = mask.data if isinstance(mask, Tile) else torch.tensor(bool(mask))
        valid = valid & mask_data.to(torch.bool)
    clamped = tuple(part.clamp(0, builtins.max(size - 1, 0)) for part, size in zip(parts, arr.tensor.shape))
    return clamped, valid


def gather(array, indices, /, *, mask=None, padding_value=0, check_bounds=True, latency=None) -> Tile:
    arr = _require_array(array, "ct.gather")
    _check_hints("ct.gather", latency, None)
    _check_implicit_cast(padding_value, arr.dtype, "ct.gather padding_value")
    index, valid = _gather_indices(arr, indices, mask, "ct.gather")
    if not check_bounds and not bool(valid.all()) and mask is None:
        raise CutileEmulatorError("ct.gather: check_bounds=False with an index outside the array (undefined)")
    values = arr.tensor[index]
    return Tile(torch.where(valid, values, _data_as(padding_value, arr.dtype)), arr.dtype)


def scatter(array, indices, value, /, *, mask=None, check_bounds=True, latency=None) -> None:
    arr = _require_array(array, "ct.scatter")
    _check_hints("ct.scatter", latency, None)
    _require_operand(value, "ct.scatter")
    _check_implicit_cast(value, arr.dtype, "ct.scatter")
    index, valid = _gather_indices(arr, indices, mask, "ct.scatter")
    data = torch.broadcast_to(_data_as(value, arr.dtype), valid.shape)
    arr.tensor[tuple(i[valid] for i in index)] = data[valid]


def arange(size, /, *, dtype, start=0, step=1) -> Tile:
    size = _constant_shape(size, "ct.arange")[0]
    dtype = _require_dtype(dtype, "ct.arange")
    first, stride = _int_value(start), _int_value(step)
    return Tile(torch.arange(size, dtype=torch.int64).mul(stride).add(first).to(dtype.torch_dtype), dtype)


def _require_dtype(dtype, what: str) -> DType:
    if not isinstance(dtype, DType):
        raise CutileEmulatorError(f"{what}: dtype must be a ct dtype (ct.float32, ...), got {dtype!r}")
    return dtype


def full(shape, fill_value, dtype) -> Tile:
    shape = _constant_shape(shape, "ct.full", allow_empty=True)
    dtype = _require_dtype(dtype, "ct.full")
    _require_operand(fill_value, "ct.full")
    _check_implicit_cast(fill_value, dtype, "ct.full fill_value")
    if isinstance(fill_value, Tile) and fill_value.ndim != 0:
        raise CutileEmulatorError("ct.full: fill_value must be a scalar")
    return Tile(_data_as(fill_value, dtype).expand(shape).clone(), dtype)


def zeros(shape, dtype) -> Tile:
    return full(shape, 0, dtype)


def ones(shape, dtype) -> Tile:
    return full(shape, 1, dtype)


def astype(x, dtype, /, *, rounding_mode=None) -> Tile:
    dtype = _require_dtype(dtype, "ct.astype")
    if rounding_mode is not None and not isinstance(rounding_mode, RoundingMode):
        raise CutileEmulatorError(f"ct.astype: rounding_mode must be a ct.RoundingMode, got {rounding_mode!r}")
    if not isinstance(x, Tile):
        _require_operand(x, "ct.astype")
        x = _scalar_tile(x, _loose_dtype(x))
    if x.dtype is dtype:
        return x
    return Tile(_convert(x.data, x.dtype, dtype, rounding_mode), dtype)


def _require_tile(x, what: str) -> Tile:
    if not isinstance(x, Tile):
        raise CutileEmulatorError(f"{what}: expected a tile, got {type(x).__name__}")
    return x


def reshape(x, /, shape) -> Tile:
    x = _require_tile(x, "ct.reshape")
    if isinstance(shape, int):
        shape = (shape,)
    inferred = tuple(x.data.numel() // builtins.max(1, -math.prod(shape)) if d == -1 else d for d in shape)
    _constant_shape(inferred, "ct.reshape", allow_empty=True)
    if math.prod(inferred) != x.data.numel():
        raise CutileEmulatorError(f"ct.reshape: cannot reshape {x.shape} to {tuple(shape)}")
    return Tile(x.data.reshape(inferred), x.dtype)


def permute(x, /, axes) -> Tile:
    x = _require_tile(x, "ct.permute")
    if sorted(axes) != list(range(x.ndim)):
        raise CutileEmulatorError(f"ct.permute: {axes} is not a permutation of {x.ndim} axes")
    return Tile(x.data.permute(tuple(axes)), x.dtype)


def transpose(x, /, axis0=None, axis1=None) -> Tile:
    x = _require_tile(x, "ct.transpose")
    if axis0 is None and axis1 is None:
        if x.ndim != 2:
            raise CutileEmulatorError(f"ct.transpose of a {x.ndim}-d tile needs axis0 and axis1")
        axis0, axis1 = 0, 1
    return Tile(x.data.transpose(axis0, axis1), x.dtype)


def expand_dims(x, /, axis) -> Tile:
    x = _require_tile(x, "ct.expand_dims")
    return Tile(x.data.unsqueeze(_constant_int(axis, "ct.expand_dims axis")), x.dtype)


def broadcast_to(x, /, shape) -> Tile:
    x = _require_tile(x, "ct.broadcast_to")
    shape = _constant_shape(shape, "ct.broadcast_to")
    return Tile(torch.broadcast_to(x.data, shape).clone(), x.dtype)


def where(cond, x, y, /) -> Tile:
    _require_operand(x, "ct.where")
    _require_operand(y, "ct.where")
    if isinstance(cond, Tile):
        condition = cond.data if cond.dtype is bool_ else cond.data != 0
    elif isinstance(cond, (bool, int)):
        condition = torch.tensor(bool(cond))
    else:
        raise CutileEmulatorError(f"ct.where: the condition must be a bool tile, got {type(cond).__name__}")
    if isinstance(x, Tile) or isinstance(y, Tile):
        dtype = _promote(x, y)
    else:  # two numbers: the stronger category's concrete dtype
        dtype = builtins.max(_loose_dtype(x), _loose_dtype(y), key=lambda d: d.category)
    return Tile(torch.where(condition, _data_as(x, dtype), _data_as(y, dtype)), dtype)


def maximum(x, y, /, *, flush_to_zero=False, propagate_nan=False):
    return _binary("max", x, y, flush_to_zero=flush_to_zero, propagate_nan=propagate_nan)


def minimum(x, y, /, *, flush_to_zero=False, propagate_nan=False):
    return _binary("min", x, y, flush_to_zero=flush_to_zero, propagate_nan=propagate_nan)


def add(x, y, /, *, rounding_mode=None, flush_to_zero=False):
    return _binary("add", x, y, flush_to_zero=flush_to_zero)


def sub(x, y, /, *, rounding_mode=None, flush_to_zero=False):
    return _binary("sub", x, y, flush_to_zero=flush_to_zero)


def mul(x, y, /, *, rounding_mode=None, flush_to_zero=False):
    return _binary("mul", x, y, flush_to_zero=flush_to_zero)


def truediv(x, y, /, *, rounding_mode=None, flush_to_zero=False):
    return _binary("truediv", x, y, flush_to_zero=flush_to_zero)


def pow(x, y, /):  # noqa: A001 - cuTile's name
    return _binary("pow", x, y)


def _math_function(name: str, op, options: tuple[str, ...] = ()):
    """cuTile's elementwise ``ct.<name>(x, /, **options)``: ``op`` (a torch function) of a tile or a
    number; integer and bool tiles become float32, floats keep their dtype. ``options`` are the
    keywords cuTile's function takes, any other is refused as Python refuses it: flush_to_zero
    flushes denormal inputs and results, rounding_mode is accepted and computes exactly."""

    def math_function(x, /, **keywords):
        for keyword in keywords:
            if keyword not in options:
                raise TypeError(f"ct.{name}() got an unexpected keyword argument {keyword!r}")
        flush_to_zero = keywords.get("flush_to_zero", False)
        _require_operand(x, f"ct.{name}")
        if not isinstance(x, Tile):
            return op(torch.tensor(float(x), dtype=torch.float64)).item()
        if x.dtype.restricted:
            raise CutileEmulatorError(f"ct.{name} of a tfloat32 tile: convert with ct.astype(x, ct.float32)")
        dtype = x.dtype if x.dtype.category == _FLOAT else float32
        data = _data_as(x, dtype)
        if flush_to_zero:
            data = _flush_denormals(data)
        out = op(data).to(dtype.torch_dtype)
        return Tile(_flush_denormals(out) if flush_to_zero else out, dtype)

    math_function.__name__ = math_function.__qualname__ = name
    return math_function


exp = _math_function("exp", torch.exp, ("rounding_mode",))
exp2 = _math_function("exp2", torch.exp2, ("flush_to_zero",))
log = _math_function("log", torch.log)
log2 = _math_function("log2", torch.log2)
sqrt = _math_function("sqrt", torch.sqrt, ("rounding_mode", "flush_to_zero"))
rsqrt = _math_function("rsqrt", torch.rsqrt, ("flush_to_zero",))
sin = _math_function("sin", torch.sin)
cos = _math_function("cos", torch.cos)
tanh = _math_function("tanh", torch.tanh, ("rounding_mode",))
floor = _math_function("floor", torch.floor)
ceil = _math_function("ceil", torch.ceil)


def abs(x, /):  # noqa: A001 - cuTile's name
    _require_operand(x, "ct.abs")
    if not isinstance(x, Tile):
        return builtins.abs(x)
    return Tile(x.data.abs(), x.dtype)


def negative(x, /):
    return -x


def isnan(x, /):
    x = _require_tile(x, "ct.isnan")
    return Tile(torch.isnan(x.data), bool_)


def _reduce(fn: str, x, axis, keepdims: bool, propagate_nan: bool = True) -> Tile:
    x = _require_tile(x, f"ct.{fn}")
    if x.dtype.restricted:
        raise CutileEmulatorError(f"ct.{fn} of a tfloat32 tile: convert with ct.astype(x, ct.float32)")
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a + x.ndim if a < 0 else a for a in axes)
    data = x.data
    if fn == "sum":
        out = data.sum(dim=axes, keepdim=keepdims, dtype=data.dtype if x.dtype.category == _FLOAT else None)
    else:
        if x.dtype.category == _FLOAT and not propagate_nan:
            # cuTile's max / min skip NaN (an all-NaN slice stays NaN).
            fill = -math.inf if fn == "max" else math.inf
            all_nan = torch.isnan(data).all(dim=axes, keepdim=keepdims) if axes else torch.isnan(data)
            data = torch.where(torch.isnan(data), torch.tensor(fill, dtype=data.dtype), data)
            out = data.amax(dim=axes, keepdim=keepdims) if fn == "max" else data.amin(dim=axes, keepdim=keepdims)
            out = torch.where(all_nan, torch.tensor(math.nan, dtype=data.dtype), out)
        else:
            out = data.amax(dim=axes, keepdim=keepdims) if fn == "max" else data.amin(dim=axes, keepdim=keepdims)
    return Tile(out.to(x.dtype.torch_dtype), x.dtype)


def sum(x, /, axis=None, *, keepdims=False, rounding_mode=None, flush_to_zero=False):  # noqa: A001
    return _reduce("sum", x, axis, keepdims)


def max(x, /, axis=None, *, keepdims=False, flush_to_zero=False, propagate_nan=False):  # noqa: A001
    return _reduce("max", x, axis, keepdims, propagate_nan)


def min(x, /, axis=None, *, keepdims=False, flush_to_zero=False, propagate_nan=False):  # noqa: A001
    return _reduce("min", x, axis, keepdims, propagate_nan)


_MMA_ACCUMULATORS = {
    float16: (float16, float32), bfloat16: (float32,), float32: (float32,), tfloat32: (float32,),
    float64: (float64,), int8: (int32,), uint8: (int32,),
}


def _matrix_operands(x, y, what: str):
    x, y = _require_tile(x, what), _require_tile(y, what)
    if x.ndim not in (2, 3) or y.ndim not in (2, 3) or x.shape[-1] != y.shape[-2]:
        raise CutileEmulatorError(f"{what}: cannot multiply {x.shape} by {y.shape}")
    return x, y


def _exact_product(x: Tile, y: Tile, acc: torch.Tensor | None) -> torch.Tensor:
    """x @ y (+ acc) summed in fp64 (int64 for integers), before the one final rounding."""
    wide = torch.int64 if x.dtype.category == _INT else torch.float64
    out = torch.matmul(x.data.to(wide), y.data.to(wide))
    return out if acc is None else out + acc.to(wide)


def mma(x, y, /, acc, *, use_fast_acc=False) -> Tile:
    x, y = _matrix_operands(x, y, "ct.mma")
    acc = _require_tile(acc, "ct.mma accumulator")
    if x.dtype is not y.dtype and {x.dtype, y.dtype} != {int8, uint8}:
        raise CutileEmulatorError(f"ct.mma: x and y must have the same dtype, got {x.dtype} and {y.dtype} "
                                  "(convert with ct.astype)")
    if x.dtype not in _MMA_ACCUMULATORS:
        raise CutileEmulatorError(f"ct.mma: unsupported input dtype {x.dtype} (supported: "
                                  f"{', '.join(map(str, _MMA_ACCUMULATORS))})")
    if acc.dtype not in _MMA_ACCUMULATORS[x.dtype]:
        raise CutileEmulatorError(f"ct.mma: a {x.dtype} product needs a "
                                  f"{' or '.join(map(str, _MMA_ACCUMULATORS[x.dtype]))} accumulator, "
                                  f"got {acc.dtype}")
    if use_fast_acc:
        raise CutileEmulatorError("ct.mma: use_fast_acc applies to fp8 inputs only")
    out = _exact_product(x, y, acc.data)
    if out.shape != acc.data.shape:
        raise CutileEmulatorError(f"ct.mma: the product is {tuple(out.shape)}, the accumulator {acc.shape}")
    return Tile(out.to(acc.dtype.torch_dtype), acc.dtype)


def matmul(x, y, /) -> Tile:
    x, y = _matrix_operands(x, y, "ct.matmul")
    dtype = _promote_strict(x.dtype, y.dtype)
    if dtype not in _MMA_ACCUMULATORS:
        raise CutileEmulatorError(f"ct.matmul: unsupported input dtype {dtype}")
    x, y = astype(x, dtype), astype(y, dtype)
    out = _exact_product(x, y, None)
    if dtype is tfloat32:
        return Tile(_round_to_tf32(out.to(torch.float32), RoundingMode.RN), dtype)
    return Tile(out.to(dtype.torch_dtype), dtype)


# ==================================================================================================
# Kernels, launches and the launch record
# ==================================================================================================


class ConstantAnnotation:
    """Marks a kernel parameter as a compile-time constant (``ct.Constant[int]``)."""

    def __repr__(self):
        return "ConstantAnnotation()"


_T = typing.TypeVar("_T")
Constant = typing.Annotated[_T, ConstantAnnotation()]


def _is_constant_hint(hint) -> bool:
    return typing.get_origin(hint) is typing.Annotated and any(
        isinstance(m, ConstantAnnotation) for m in hint.__metadata__)


# cuTile refuses to unroll a ct.static_iter loop of more items than this.
_STATIC_ITER_LIMIT = 1000


def static_iter(iterable):
    """``for item in ct.static_iter(items)``: cuTile unrolls the loop at compile time, one copy of
    the body per item; here it is an ordinary Python loop over the same items."""
    items = tuple(iterable)
    if len(items) > _STATIC_ITER_LIMIT:
        raise CutileEmulatorError(f"ct.static_iter over {len(items)} items: cuTile unrolls at most "
                                  f"{_STATIC_ITER_LIMIT}")
    return items


class kernel:  # noqa: N801 - cuTile's name
    """``@ct.kernel``: keeps the Python function; ``launch`` runs it once per block."""

    def __init__(self, function=None, /, **compiler_options):
        if not inspect.isfunction(function):
            raise CutileEmulatorError("@ct.kernel must decorate a Python function")
        self._pyfunc = function
        self.compiler_options = compiler_options
        self.__name__, self.__qualname__ = function.__name__, function.__qualname__
        self.__module__, self.__doc__ = function.__module__, function.__doc__
        self._constant_params = None

    def __new__(cls, function=None, /, **compiler_options):
        if function is None:  # @ct.kernel(occupancy=...) form
            return lambda f: cls(f, **compiler_options)
        return super().__new__(cls)

    def __repr__(self):
        return f"<cuda.tile emulator kernel {self.__module__}.{self.__qualname__}>"

    def __call__(self, *args, **kwargs):
        raise CutileEmulatorError(f"{self.__name__}: kernels are launched, not called "
                                  "(glm_asr_course.runtimes.cutile.launch(grid, kernel, *args))")

    @property
    def parameters(self) -> list[tuple[str, bool]]:
        """(name, is a ct.Constant) for each parameter, in order."""
        if self._constant_params is None:
            hints = typing.get_type_hints(self._pyfunc, include_extras=True)
            names = list(inspect.signature(self._pyfunc).parameters)
            self._constant_params = [(n, _is_constant_hint(hints.get(n))) for n in names]
        return self._constant_params


LAUNCHES: dict[tuple, dict] = {}  # one entry per distinct kernel signature, in first-launch order


def _check_constant(name: str, value):
    # cuTile's calling conventions for launches and exported kernels take these three kinds.
    if isinstance(value, (bool, int, float)):
        return value
    raise CutileEmulatorError(f"constant parameter {name}: a {type(value).__name__} cannot be passed "
                              "(ct.Constant arguments are bool, int or float)")


def _kernel_argument(name: str, value):
    """A launch argument as the kernel body sees it, and its record entry."""
    if isinstance(value, torch.Tensor):
        array = Array(value)
        return array, {"param": name, "kind": "array", "dtype": array.dtype.name,
                       "shape": list(value.shape), "strides": list(value.stride()),
                       "aligned16": value.data_ptr() % 16 == 0}
    if isinstance(value, bool):
        return _scalar_tile(value, bool_), {"param": name, "kind": "scalar", "dtype": "bool_"}
    if isinstance(value, int):
        if not -2 ** 31 <= value < 2 ** 31:
            raise CutileEmulatorError(f"argument {name} = {value} does not fit the int32 of a scalar argument")
        return _scalar_tile(value, int32), {"param": name, "kind": "scalar", "dtype": "int32"}
    if isinstance(value, float):
        # cuTile passes a float argument as fp32: round it the same way.
        return _scalar_tile(value, float32), {"param": name, "kind": "scalar", "dtype": "float32"}
    raise CutileEmulatorError(f"argument {name}: {type(value).__name__} cannot be passed to a kernel "
                              "(tensors, bool, int and float can; mark other values ct.Constant)")


def grid_dependency_control_wait() -> None:
    """``ct.grid_dependency_control_wait``: on a GPU, wait for the kernel before this one (launched with
    programmatic dependent launch); here every launch runs after the one before has finished."""
    _require_in_kernel("ct.grid_dependency_control_wait")


def grid_dependency_control_launch_dependents() -> None:
    """``ct.grid_dependency_control_launch_dependents``: on a GPU, let the next kernel start early; a
    hint with nothing to do here."""
    _require_in_kernel("ct.grid_dependency_control_launch_dependents")


def launch(stream, grid, kern, args, *, programmatic_dependent_launch=False) -> None:
    """``ct.launch``: run ``kern`` over ``grid`` (1 to 3 ints) with ``args`` (a tuple), one block after
    another, at once (``stream`` is ignored: the CPU has no queue; so is
    ``programmatic_dependent_launch``: the kernel before has finished when this one starts)."""
    if not isinstance(kern, kernel):
        raise CutileEmulatorError(f"launch: {kern!r} is not a @ct.kernel of the emulator")
    grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    if not 1 <= len(grid) <= 3 or not all(isinstance(g, int) and g >= 1 for g in grid):
        raise CutileEmulatorError(f"launch {kern.__name__}: the grid must be 1 to 3 positive ints, got {grid}")
    grid3 = grid + (1,) * (3 - len(grid))
    params = kern.parameters
    if len(args) != len(params):
        raise CutileEmulatorError(f"launch {kern.__name__}: {len(args)} arguments for {len(params)} parameters")
    values, record = [], []
    for (name, is_constant), value in zip(params, args):
        if is_constant:
            values.append(_check_constant(name, value))
            record.append({"param": name, "kind": "constant", "value": value})
        else:
            converted, entry = _kernel_argument(name, value)
            values.append(converted)
            record.append(entry)
    key = (kern.__module__, kern.__qualname__, repr(record))
    entry = LAUNCHES.setdefault(key, {"kernel": f"{kern.__module__}.{kern.__qualname__}", "params": record,
                                      "grid": list(grid), "launches": 0})
    entry["launches"] += 1
    outer = (_STATE.bid, _STATE.grid)
    _STATE.grid = grid3
    # Tile operations are small: torch's intra-op threads only contend for the cores (on a shared
    # 2-core machine a transcription ran 16x slower with them), so blocks run on one thread.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for z in range(grid3[2]):
            for y in range(grid3[1]):
                for x in range(grid3[0]):
                    _STATE.bid = (x, y, z)
                    if kern._pyfunc(*values) is not None:
                        raise CutileEmulatorError(f"{kern.__name__} returned a value: kernels return nothing")
    finally:
        _STATE.bid, _STATE.grid = outer
        torch.set_num_threads(threads)


# ==================================================================================================
# Everything else
# ==================================================================================================

IMPLEMENTED = sorted(
    name for name, value in list(globals().items())
    if not name.startswith("_") and not inspect.ismodule(value)
    and name not in ("annotations", "dataclass", "LAUNCHES", "CutileEmulatorError")
)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise CutileEmulatorError(f"ct.{name} is not supported (the emulator implements: {', '.join(IMPLEMENTED)})")
