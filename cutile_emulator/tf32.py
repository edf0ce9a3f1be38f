"""TF32 rounding on the CPU, shared by the emulator and the course's CPU runtimes."""

import torch

TF32_ROUNDINGS = ("nearest_even", "nearest_away", "zero")


def round_to_tf32(x: torch.Tensor, rounding: str = "nearest_even") -> torch.Tensor:
    """fp32 values rounded to TF32's 10-bit mantissa (the 13 low bits cleared), still fp32: to nearest
    with ties to even (cuTile's default, Hopper's F2FP.TF32), to nearest with ties away from zero
    (cvt.rna.tf32.f32), or toward zero. Infinities and NaNs pass through. The CPU runtimes' TF32."""
    if rounding not in TF32_ROUNDINGS:
        raise ValueError(f"TF32 rounding {rounding!r}: one of {', '.join(TF32_ROUNDINGS)}")
    bits = x.to(torch.float32).contiguous().view(torch.int32)
    drop = 13
    low = bits & ((1 << drop) - 1)
    kept = bits & ~((1 << drop) - 1)
    half = 1 << (drop - 1)
    if rounding == "zero":
        up = torch.zeros_like(bits, dtype=torch.bool)
    elif rounding == "nearest_away":
        up = low >= half
    else:
        up = (low > half) | ((low == half) & (((bits >> drop) & 1) == 1))
    # Adding one unit of the kept field carries into the exponent exactly as a rounding should; the
    # sign bit sits apart, so magnitudes round symmetrically.
    rounded = torch.where(up, kept + (1 << drop), kept)
    return torch.where(torch.isfinite(x), rounded.view(torch.float32), x.to(torch.float32))
