"""What the kernel files share: tile-code helpers that kernels call (cuTile compiles a plain Python
function called from a kernel inline) and the sizing rules of the launchers.

Tile shapes are compile-time powers of two, while the model's sizes are not (hidden 1280, 1500
frames, 59-token prompts): launchers round each tile dimension up with ``next_power_of_2`` and
kernels mask the excess, mostly through the padding mode of ``ct.load``. The same sizes are used on
the GPU and in the emulator, so the signatures the emulator records are the ones the GPU compiles.
"""

import torch

from glm_asr_course.runtimes.cutile import MODE, ct

# The padding modes of ct.load the kernels use: ZERO adds nothing to a sum, NEG_INF never wins a max.
ZERO = ct.PaddingMode.ZERO
NEG_INF = ct.PaddingMode.NEG_INF
# No GPU: kernels run in the CPU emulator, which pays per block and per tile; the fast path's
# launchers then take the largest tiles.
EMULATED = MODE != "gpu"
# Elements in one row-kernel tile (rows x padded width): a tile of up to 16 KiB of fp32 per block.
TILE_ELEMENTS = 4096
# Elements per block of the elementwise kernels.
ELEMENTWISE_BLOCK = 2048


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a (rows, width) view with contiguous rows; a strided 2-D row view stays as it is."""
    if t.dim() == 2 and t.stride(1) == 1:
        return t
    return t.view(-1, t.shape[-1])


def rows_per_block(n_rows: int, block: int) -> int:
    """Rows (or tokens, positions) of ``block`` padded elements each that one block takes: up to
    TILE_ELEMENTS elements, and no more rows than the (power-of-two rounded) row count."""
    return max(1, min(next_power_of_2(n_rows), TILE_ELEMENTS // block))


# --------------------------------------------------------------------------------------------------
# Tile code
# --------------------------------------------------------------------------------------------------


def round_as(x, dtype):
    """fp32 tile ``x`` rounded (to nearest even) to ``dtype``'s precision and widened back to fp32:
    the value transformers materialises when it stores an intermediate in ``dtype``. A no-op for fp32."""
    return ct.astype(ct.astype(x, dtype), ct.float32)


# erf(x) / x - 1 on |x| < 1, as a polynomial E in x^2; highest power first.
ERF_NEAR_ZERO = (7.957699563121423e-05, -0.0008035623468458652, 0.0051903813146054745, -0.026854336261749268,
                 0.11283580213785172, -0.376126229763031, 0.12837916612625122)
# erfc(a) exp(a^2) on 1 <= a <= 4, as a polynomial R in u = (a - 2.5) / 1.5; highest power first.
ERFC_TAIL = (-3.317872324259952e-05, 9.565718210069463e-05, -0.00015413262008223683, 0.00036971690133213997,
             -0.0010070913704112172, 0.002424290170893073, -0.0055716331116855145, 0.0124845951795578,
             -0.02700497768819332, 0.056110888719558716, -0.11152104288339615, 0.21080635488033295)


def horner(t, coefficients):
    """The polynomial with constant ``coefficients`` (highest power first) at fp32 tile ``t``, by
    Horner's rule: one multiply-add per coefficient, the loop unrolled at compile time."""
    value = coefficients[0]
    for c in ct.static_iter(coefficients[1:]):
        value = value * t + c
    return value


def erf(x):
    """The error function of an fp32 tile, within about 1.3 fp32 ulp (cuTile has no erf).

    |x| < 1:  erf(x) = x + x * E(x^2), E of degree 6;
    |x| >= 1: erf(|x|) = 1 - exp(-x^2) * R(u), u = (min(|x|, 4) - 2.5) / 1.5, R of degree 11.
    E and R are least-squares fits of erf(x)/x - 1 and erfc(x) exp(x^2) on those ranges (weighted
    by the function's size); past |x| = 4 erf is 1 to fp32 precision. Writing erf as x + x*E keeps
    the leading term exact, and erfc as exp(-x^2) R keeps R's coefficients small, which is what
    holds the rounding error near one ulp.
    """
    near_zero = x + x * horner(x * x, ERF_NEAR_ZERO)
    a = ct.minimum(ct.abs(x), 4.0)
    tail = 1.0 - ct.exp(-(a * a)) * horner((a - 2.5) * 0.6666666666666666, ERFC_TAIL)
    return ct.where(ct.abs(x) < 1.0, near_zero, ct.where(x < 0.0, -tail, tail))
