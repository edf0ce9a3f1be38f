"""Three gaps of Triton 3.6's CPU interpreter (TRITON_INTERPRET=1), closed for this package's kernels,
and the launch helpers every kernel file shares.

1. The interpreter truncates fp32 -> bf16 casts, where the GPU (and torch) round to nearest even.
   ``round_to`` is the cast to use wherever a kernel's bf16 rounding must match torch; on a GPU it
   compiles to the plain cast.
2. The interpreter's ``tl.dot`` multiplies bf16 operands as their raw 16-bit integer patterns.
   ``dot`` widens them to fp32 first (exact: a bf16 x bf16 product fits fp32), under the
   interpreter only; on a GPU it is ``tl.dot`` on the tensor cores at the precision asked for.
3. With NumPy >= 2.4 the interpreter cannot turn a run-time scalar into a Python int, so every loop
   with a run-time bound (``range(0, n, BLOCK)``) fails (triton-lang/triton#9171, fixed after 3.6).
   Importing this module under the interpreter patches that conversion.

Importing it under the interpreter also makes calls of @triton.jit helpers (``round_to``, ``dot``)
from inside a kernel cheap: the interpreter re-patches all of triton.language (inspect.getmembers over
three modules) on every such call, although the launch that runs the kernel has already patched it.
That was half the CPU time of an interpreted transcription.
"""

import functools
import os

import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_INTERPRET = tl.constexpr(INTERPRET)

@triton.jit
def round_to(x, dtype: tl.constexpr):
    """fp32 ``x`` cast to ``dtype``, rounding to nearest even as the GPU and torch do."""
    if _INTERPRET and dtype == tl.bfloat16:
        # Add half a bf16 ulp (ties to even) to the fp32 bits and clear the 16 bits bf16 drops, so
        # the interpreter's truncating cast below is exact.
        bits = x.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def dot(a, b, acc, INPUT_PRECISION: tl.constexpr):
    """acc + a @ b accumulated in fp32 (acc None: from zero). fp32 operands meet the tensor cores as
    INPUT_PRECISION says ("tf32", or "ieee": no TF32, see glm_asr_common/model/precision.py); bf16 ones as
    they are. The interpreter multiplies in fp32 whatever is asked."""
    if _INTERPRET and a.dtype == tl.bfloat16:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=INPUT_PRECISION)


def _patch_scalar_index():
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor
    if getattr(patch_tensor, "_scalar_index_fixed", False):
        return

    def patched(tensor, scope):
        patch_tensor(tensor, scope)
        # Scalars are 1-element arrays in the interpreter; take the element explicitly.
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._scalar_index_fixed = True
    interpreter._patch_lang_tensor = patched


def _skip_repatching_in_helper_calls():
    from triton.runtime import interpreter

    patch_and_call = interpreter.InterpretedFunction.__call__

    def call(self, *args, **kwargs):
        # A helper whose only view of the language is `tl` (this package's) runs inside a launch,
        # which has patched `tl` for its duration; Triton's own helpers (tl.zeros, tl.sum, ...) also
        # reach into triton.language.core, which only their own call patches.
        if any(value is tl.core for value in self.fn.__globals__.values()):
            return patch_and_call(self, *args, **kwargs)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise interpreter.InterpreterError(repr(e)) from e

    interpreter.InterpretedFunction.__call__ = call


if INTERPRET:
    _patch_scalar_index()
    _skip_repatching_in_helper_calls()


# Programmatic dependent launch (Hopper and later): a kernel launched with launch_pdl=True may start
# while the kernel before it in the stream is still finishing, so its launch and its reads of
# constant data (weights) overlap that kernel's tail. Every such kernel must call wait_for_producer
# before it touches memory the previous kernel writes or reads. The decode step, a chain of ~170
# short kernels, is where this pays.
@functools.lru_cache(maxsize=None)
def pdl_enabled(device) -> bool:
    """True on a CUDA device of compute capability 9.0+ unless GLM_ASR_PDL=0 (for comparisons)."""
    import torch

    device = torch.device(device)
    if INTERPRET or device.type != "cuda" or os.environ.get("GLM_ASR_PDL", "1") == "0":
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


def pdl_options(device) -> dict:
    """Launch options of a PDL-aware kernel: its PDL constexpr and Triton's launch_pdl, set together."""
    enabled = pdl_enabled(device)
    return dict(PDL=enabled, launch_pdl=enabled)


@triton.jit
def wait_for_producer(PDL: tl.constexpr):
    """Block until the previous kernel has finished and its writes are visible (PDL launches only)."""
    if PDL:
        tl.extra.cuda.gdc_wait()


@triton.jit
def release_consumer(PDL: tl.constexpr):
    """Let the next kernel launch once every program of this one has reached here (a hint)."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


# ---------------------------------------------------------------------------------------------
# Launch helpers shared by the kernel files
# ---------------------------------------------------------------------------------------------

# The largest block a Triton kernel may hold (elements of one tensor): tiles are sized below it.
MAX_BLOCK_NUMEL = 1 << 20


def as_rows(t):
    """``t`` as a (rows, width) view whose rows are contiguous; a strided 2-D row view stays as is."""
    if t.dim() == 2 and t.stride(1) == 1:
        return t
    return t.view(-1, t.shape[-1])


def fma_dot(dtype, input_precision: str) -> bool:
    """Whether ``tl.dot`` on ``dtype`` operands at ``input_precision`` runs as FMAs on the CUDA cores: IEEE
    fp32 (the tensor cores take fp32 operands only rounded to TF32). Such a dot keeps each thread's slices of
    both operand tiles in registers beside its accumulator, so its tiles are sized by registers: a tile
    chosen for the tensor cores, where the operands stay in shared memory, spills (docs/performance.md,
    "IEEE fp32 on the fast path")."""
    import torch

    return dtype == torch.float32 and input_precision == "ieee"


def warps_for_row(block: int) -> int:
    """About eight elements (one 16-byte bf16 vector) per thread; one warp for short rows, 16 at most."""
    return max(1, min(16, block // 256))


def rows_per_program(n_rows: int, block: int) -> int:
    """Rows one program of a row-wise kernel takes. A GPU gets one (thousands of programs fill it);
    the interpreter pays per program, so it takes as many rows as fit one block of Triton's largest size."""
    if not INTERPRET:
        return 1
    return max(1, min(triton.next_power_of_2(n_rows), MAX_BLOCK_NUMEL // block))
