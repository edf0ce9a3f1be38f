# Generated from glm_asr_triton_example/ by utils/make_template.py. Your copy: fill in the TODO kernels.
"""The course's RoPE kernel for GLM-ASR, in Triton: the cos / sin tables of the rotary embeddings.

    compute_freqs_kernel / rope_tables   cos[p, i] = cos(p * inv_freq[i]), sin likewise,
                                         inv_freq[i] = 1 / theta^(2i / rotary_dim)

Run once per table when the model loads: the encoder's (1500 positions x 16, rotary_dim 32: the first
half of each 64-wide head, "partial rotary") and the decoder's (max positions x 64, the whole 128-wide
head). The rotation that reads them is provided glue (glue.py: rope_kernel for the encoder,
rope_qkv_to_cache_kernel for the decoder).

Self-check: python glm_asr_triton_template/rope.py  (without a GPU: the Triton interpreter)
"""


import torch

if __name__ == "__main__":  # run as a script: python glm_asr_triton_template/rope.py
    from _script import package_of

    __package__ = package_of(__file__)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from glm_asr_common.course.todo_kernels import student_kernel  # noqa: E402

from ._triton_compat import INTERPRET  # noqa: E402


@student_kernel("compute_freqs_kernel", reference="glm_asr_triton_example.rope", guide="GUIDE.md#compute_freqs_kernel")
def compute_freqs_kernel(cos_ptr, sin_ptr, max_positions, theta, stride_table,
                         ROTARY_DIM: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_P: tl.constexpr):
    """RoPE tables: cos[p, i] = cos(p * inv_freq[i]), sin[p, i] = sin(p * inv_freq[i]),
    inv_freq[i] = 1 / theta^(2i / ROTARY_DIM), for i < ROTARY_DIM / 2.

    cos_ptr, sin_ptr: (max_positions, ROTARY_DIM // 2) fp32 tables, row stride stride_table.
    Grid: (cdiv(max_positions, BLOCK_P),); program p fills rows p*BLOCK_P .. p*BLOCK_P + BLOCK_P - 1,
    BLOCK_HALF = next_power_of_2(ROTARY_DIM // 2) frequency lanes each: a (BLOCK_P, BLOCK_HALF) tile.
    Masking: positions >= max_positions and lanes >= ROTARY_DIM // 2 are not stored.
    Hint: transformers builds inv_freq in fp32 and the angle as one fp32 product position * inv_freq;
    match those roundings. Positions reach thousands of radians, where fast fp32 sin/cos lose digits:
    evaluate cos/sin of that fp32 angle in fp64 and round once to fp32. theta arrives as a Python float
    under the interpreter: build a tensor from it (tl.full), don't call .to() on it
    (GUIDE.md#interpreter-traps).
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @triton.jit.


def rope_tables(max_positions: int, rotary_dim: int, theta: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables, each (max_positions, rotary_dim // 2) fp32: angle = pos / theta^(2i/rotary_dim)."""
    assert rotary_dim % 2 == 0
    half = rotary_dim // 2
    cos = torch.empty((max_positions, half), dtype=torch.float32, device=device)
    sin = torch.empty_like(cos)
    block_p = 1024 if INTERPRET else 32  # the interpreter pays per program: few, large ones
    compute_freqs_kernel[(triton.cdiv(max_positions, block_p),)](
        cos, sin, max_positions, float(theta), cos.stride(0),
        ROTARY_DIM=rotary_dim, BLOCK_HALF=triton.next_power_of_2(half), BLOCK_P=block_p,
    )
    return cos, sin


if __name__ == "__main__":  # the self-check: every case of glm_asr_common/course/kernel_cases.py
    from glm_asr_common.course.self_check import main

    raise SystemExit(main(__file__))

