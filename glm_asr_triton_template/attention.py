# Generated from glm_asr_triton_example/ by glm_asr_lab/make_template.py. Your copy: fill in the TODO kernels.
"""The course's attention kernels for GLM-ASR, in Triton: the textbook path, three launches, each
kernel above its launcher.

    attention_scores_kernel / attention_scores    S = Q K^T * scale in fp32, -inf above the diagonal
                                                  when causal
    softmax_inplace_kernel / softmax_inplace      P = softmax(S), written over S
    attention_output_kernel / attention_output    O = P V

Each (B, H, T, ...) operand reaches a kernel as a pointer and its batch, head and token strides (last
dim contiguous), so a view into the fused q|k|v output or into the KV cache needs no copy, and a
head stride of 0 lets several query heads read one kv head (GQA). The scores and output kernels run
on a (query block, batch x head) grid; triton_helpers's batch_and_head splits the second axis. Where
the course model calls them, in its encoder and decoder attention: docs/course.md#where-the-model-uses-them.

In the encoder the (..., Tq, Tk) fp32 scores cross memory four times (written, read and rewritten
by the softmax, read by P V); the example's fast path, fused flash attention, never writes them.
That difference is worth measuring.

Self-check: python glm_asr_triton_template/attention.py  (without a GPU: the Triton interpreter)
"""


import torch
import triton
import triton.language as tl
from glm_asr_course.kernels.todo_kernels import student_kernel  # noqa: E402

from glm_asr_course.model import launch_contracts
from glm_asr_course.runtimes.triton_helpers import (INTERPRET, batch_and_head, dot, round_to, rows_per_program,
                                                    warps_for_row)


@student_kernel("attention_scores_kernel", reference="glm_asr_triton_example.attention", guide="docs/guide-triton.md#attention_scores_kernel")
def attention_scores_kernel(q_ptr, k_ptr, s_ptr, n_heads, Tq, Tk, scale,
                            stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
                            stride_sb, stride_sh, stride_sq,
                            CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """S = Q K^T * scale for one (batch, head) and BLOCK_M query rows, fp32 scores.

    q: (B, H, Tq, HEAD_DIM), k: (B, H, Tk, HEAD_DIM), given by their b / h / t strides (last dim
    contiguous; a stride may be 0, e.g. query heads sharing one kv head); s: (B, H, Tq, Tk) fp32,
    strides stride_sb / stride_sh / stride_sq.
    Grid: (cdiv(Tq, BLOCK_M), B * H); program (i, bh), with b, h = batch_and_head(bh, n_heads)
    (b = bh // n_heads, h = bh % n_heads), keeps its BLOCK_M query rows in registers and sweeps the
    keys in BLOCK_N blocks, storing each (BLOCK_M, BLOCK_N) tile of S.
    CAUSAL: query m sees keys n <= m; store -inf above the diagonal (softmax turns it into 0).
    Masking: query rows >= Tq, key rows >= Tk and channels >= HEAD_DIM (BLOCK_D is HEAD_DIM rounded up
    to a power of two >= 16) load 0.0; only rows < Tq and keys < Tk are stored.
    INPUT_PRECISION: "tf32" or "ieee" for fp32 q and k (see linear_kernel_tf32).
    Hint: this file's dot(q, tl.trans(k), None, INPUT_PRECISION) accumulates in fp32 (and handles bf16
    under the interpreter); multiply by scale after the dot.
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @triton.jit.


@student_kernel("softmax_inplace_kernel", reference="glm_asr_triton_example.attention", guide="docs/guide-triton.md#softmax_inplace_kernel")
def softmax_inplace_kernel(s_ptr, n_rows, n_cols, stride_row, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """Softmax of the fp32 scores, in place, ROWS rows of n_cols keys per program.

    s_ptr: n_rows rows of n_cols fp32 values, stride_row elements apart (the (B, H, Tq, Tk) scores
    seen as (B * H * Tq) rows of Tk).
    Grid: (cdiv(n_rows, ROWS),); program p reads rows p*ROWS .. p*ROWS + ROWS - 1, each whole in a
    BLOCK_N = next_power_of_2(n_cols) tile, normalises them and writes them back over themselves
    (ROWS is 1 on a GPU; the interpreter takes many: write the kernel for a (ROWS, BLOCK_N) tile).
    Masking: lanes >= n_cols load -inf and are not stored; causal -inf entries inside a row come out
    as exactly 0. Rows >= n_rows are never stored (give them zeros, not -inf: 0 / 0 otherwise).
    Hint: as softmax_kernel: subtract the row max, exponentiate, divide by the sum. A causal row always
    keeps its diagonal key, so its max is finite.
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @triton.jit.


@student_kernel("attention_output_kernel", reference="glm_asr_triton_example.attention", guide="docs/guide-triton.md#attention_output_kernel")
def attention_output_kernel(p_ptr, v_ptr, o_ptr, n_heads, Tq, Tk,
                            stride_pb, stride_ph, stride_pq, stride_vb, stride_vh, stride_vt,
                            stride_ob, stride_oh, stride_ot,
                            HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """O = P V for one (batch, head) and BLOCK_M query rows.

    p: (B, H, Tq, Tk) fp32 probabilities; v: (B, H, Tk, HEAD_DIM) in the activation dtype;
    o: (B, H, Tq, HEAD_DIM) in o's dtype. All given by their b / h / t strides, last dims contiguous.
    Grid: (cdiv(Tq, BLOCK_M), B * H), as attention_scores_kernel: walk the keys in BLOCK_N blocks,
    acc (BLOCK_M, BLOCK_D, fp32) += p_tile (BLOCK_M, BLOCK_N) @ v_tile (BLOCK_N, BLOCK_D).
    Masking: p loads 0.0 outside (Tq, Tk); v rows >= Tk and channels >= HEAD_DIM load 0.0; only rows
    < Tq and channels < HEAD_DIM are stored.
    Hint: transformers casts the probabilities to v's dtype before the product: round_to(p, v.dtype)
    does the same in bf16 (a no-op in fp32). Round the result once, at the store (round_to, not
    .to(): docs/guide-triton.md#interpreter-traps).
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @triton.jit.


def _tiles(Tq: int, Tk: int, head_dim: int) -> dict:
    """BLOCK_M query rows x BLOCK_N keys per step, BLOCK_D padded channels. One decode token (Tq <= 16)
    takes a 16-row tile, the smallest tl.dot accepts; the interpreter takes few, large tiles."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    if INTERPRET:
        return dict(BLOCK_M=min(triton.next_power_of_2(max(Tq, 16)), 256),
                    BLOCK_N=min(triton.next_power_of_2(max(Tk, 16)), 256), BLOCK_D=block_d)
    return dict(BLOCK_M=16 if Tq <= 16 else 64, BLOCK_N=64, BLOCK_D=block_d, num_warps=4)


def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool = False, *,
                     precision: str = "tf32") -> torch.Tensor:
    """S = q k^T * scale as a new fp32 (B, H, Tq, Tk) tensor; causal: -inf where key > query.

    q (B, H, Tq, D), k (B, H, Tk, D), any strides with a contiguous last dim; any head size D.
    """
    B, H, Tq, Tk, D, scores = launch_contracts.attention_scores(q, k, causal)
    tiles = _tiles(Tq, Tk, D)
    attention_scores_kernel[(triton.cdiv(Tq, tiles["BLOCK_M"]), B * H)](
        q, k, scores, H, Tq, Tk, scale,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        scores.stride(0), scores.stride(1), scores.stride(2),
        CAUSAL=causal, HEAD_DIM=D, INPUT_PRECISION=precision, **tiles,
    )
    return scores


def softmax_inplace(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a contiguous fp32 tensor, in place (one row per program on a GPU)."""
    n_rows, n_cols = launch_contracts.fp32_rows(scores, "softmax_inplace").shape
    block = triton.next_power_of_2(n_cols)
    per_program = rows_per_program(n_rows, block)
    softmax_inplace_kernel[(triton.cdiv(n_rows, per_program),)](scores, n_rows, n_cols, n_cols, BLOCK_N=block,
                                                                ROWS=per_program, num_warps=warps_for_row(block))
    return scores


def attention_output(p: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None = None, *,
                     precision: str = "tf32") -> torch.Tensor:
    """O = p v into out, allocated when None (shapes: launch_contracts.attention_output); out may be a
    token-major (B, Tq, H, D) buffer seen through permute(0, 2, 1, 3): the next linear reads it as rows."""
    B, H, Tq, Tk, D, out = launch_contracts.attention_output(p, v, out)
    tiles = _tiles(Tq, Tk, D)
    attention_output_kernel[(triton.cdiv(Tq, tiles["BLOCK_M"]), B * H)](
        p, v, out, H, Tq, Tk,
        p.stride(0), p.stride(1), p.stride(2), v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        HEAD_DIM=D, INPUT_PRECISION=precision, **tiles,
    )
    return out


if __name__ == "__main__":  # the self-check: every case of glm_asr_course/kernels/kernel_cases.py
    from glm_asr_course.kernels.self_check import main

    raise SystemExit(main(__file__))

