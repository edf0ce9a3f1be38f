"""The three numeric precisions a transcription can run in, named for what they are.

    bf16   bfloat16 weights and activations; every matmul accumulates in fp32.
    tf32   fp32 weights and activations; matmuls on the tensor cores with TF32 operands (10-bit
           mantissa), the course kernels' default and what the name linear_kernel_tf32 refers to.
    fp32   IEEE fp32 throughout, no TF32 anywhere: the precision whose results are comparable, token
           for token, with transformers' fp32 model (run with TF32 off).

tf32 is the default on a GPU, fp32 on a CPU: a CPU has no tensor cores; there the cuTile emulator
and Triton's interpreter (with the course's fix) round tf32 operands as the tensor cores would, and
PyTorch and NumPy multiply fp32 in IEEE whatever was asked.

A kernel that multiplies fp32 tiles receives ``Precision.dot`` ("tf32" or "ieee") as a compile-time
argument, so one process can hold models of different precisions side by side (the demo does).
"""

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from glm_asr_course.errors import UserError


@dataclass(frozen=True)
class Precision:
    name: str
    dtype: torch.dtype
    dot: str  # how fp32 matmul operands meet the tensor cores: "tf32" or "ieee" (bf16 ignores it)
    description: str

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def __str__(self) -> str:
        return f"{self.name} ({self.description})"


PRECISIONS = {
    "bf16": Precision("bf16", torch.bfloat16, "ieee", "bfloat16 weights and activations, fp32 accumulation"),
    "tf32": Precision("tf32", torch.float32, "tf32", "fp32 weights and activations, TF32 tensor-core matmuls"),
    "fp32": Precision("fp32", torch.float32, "ieee", "IEEE fp32 throughout, comparable with transformers' fp32"),
}
DEFAULT_PRECISION = {"cuda": "tf32", "cpu": "fp32"}  # by device: see the module docstring
# --dtype, kept for scripts written before --precision: the storage dtype names the precision.
DTYPE_ALIASES = {"float32": "tf32", "bfloat16": "bf16"}


def get_precision(precision: "Precision | str") -> Precision:
    """A Precision from itself or its name; a UserError naming the choices otherwise."""
    if isinstance(precision, Precision):
        return precision
    if precision in PRECISIONS:
        return PRECISIONS[precision]
    raise UserError(f"unknown precision {precision!r}; choose one of: {', '.join(PRECISIONS)}")


def from_options(precision: str | None, dtype: str | None, device: str) -> Precision:
    """The precision asked for by --precision and/or the older --dtype (both given must agree), else
    the device's default."""
    if dtype is not None and precision is not None and DTYPE_ALIASES[dtype] != precision and not (
            dtype == "float32" and precision == "fp32"):
        raise UserError(f"--dtype {dtype} and --precision {precision} disagree; give --precision alone")
    if precision is not None:
        return PRECISIONS[precision]
    return PRECISIONS[DTYPE_ALIASES[dtype] if dtype is not None else DEFAULT_PRECISION[device]]


@contextmanager
def torch_matmul_precision(precision: Precision):
    """torch's own matmuls and convolutions (cuBLAS, cuDNN) at ``precision`` for the duration: TF32
    only for "tf32" (torch leaves cuDNN convolutions in TF32 by default)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    tf32 = precision.dot == "tf32" and precision.dtype == torch.float32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


