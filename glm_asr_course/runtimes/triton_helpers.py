"""What this package's kernels call beyond triton.language, and the launch helpers every kernel file
shares. Two gaps of Triton 3.6's CPU interpreter (TRITON_INTERPRET=1) show in kernel code, so the
kernels use these helpers where they matter:

1. ``round_to``: the interpreter truncates fp32 -> bf16 casts (its conversion, from
   triton-lang/triton#3811, drops the low bits), where the GPU and torch round to nearest even. Use
   it wherever a kernel's bf16 rounding must match torch; on a GPU it compiles to the plain cast.
2. ``dot``: the interpreter's ``tl.dot`` multiplies bf16 operands as their raw 16-bit integer
   patterns (triton-lang/triton#11584). ``dot`` widens them to fp32 first (exact: a bf16 x bf16
   product fits fp32), under the interpreter only; on a GPU it is ``tl.dot`` at the precision asked,
   with one fix of its own: a "tf32" ``tl.dot`` hands fp32 operands to the tensor cores as they are,
   which read them truncated to TF32 (triton-lang/triton#4574), an error biased towards zero that
   cuBLAS and cuTile (both round to nearest) do not make; ``dot`` rounds them to nearest first.

The interpreter's other gaps need no change to kernel code: glm_asr_course.runtimes.triton_interpreter
closes them, called where a CPU run starts.
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
    INPUT_PRECISION says ("tf32": rounded to TF32 to nearest first; "ieee": no TF32, see
    glm_asr_course/model/precision.py); bf16 ones as they are, widened to fp32 under the interpreter."""
    if _INTERPRET:
        if a.dtype == tl.bfloat16:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
    elif INPUT_PRECISION == "tf32" and a.dtype == tl.float32:
        a = tf32_rounded(a)
        b = tf32_rounded(b)
    return tl.dot(a, b, acc, input_precision=INPUT_PRECISION)


@triton.jit
def tf32_rounded(x):
    """fp32 ``x`` rounded to TF32 (10 mantissa bits) to nearest, ties away from zero, kept as fp32: what
    cvt.rna.tf32.f32 does and the tensor cores then read exactly. GPU only (inline PTX)."""
    return tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def batch_and_head(bh, n_heads):
    """(b, h) of a program index bh = b * n_heads + h: the attention kernels' grid axis over B * H."""
    return bh // n_heads, bh % n_heads



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
