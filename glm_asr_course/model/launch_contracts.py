"""What the tracks' launchers accept and return, checked in one place: the shapes, strides and dtypes
of the shared operations (course_model.TrackOps) that both tracks' launchers promise. Each function
raises a ValueError naming the operation when its inputs do not fit, allocates the output where the
operation makes one, and returns the sizes the launcher's grid needs.
"""

import torch


def linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None, precision: str):
    """out = x (M, K) @ weight (N, K)^T: rows with a contiguous last dim, weight rows contiguous, one
    dtype; precision "tf32" or "ieee". Returns (M, N, K, out)."""
    M, K = x.shape
    N = weight.shape[0]
    if weight.shape[1] != K or weight.stride(1) != 1 or x.stride(1) != 1 or weight.dtype != x.dtype:
        raise ValueError(f"linear_tf32: x {tuple(x.shape)} {x.dtype} and weight {tuple(weight.shape)} "
                         f"{weight.dtype} do not match or are not row-contiguous")
    if precision not in ("tf32", "ieee"):
        raise ValueError(f"linear_tf32: precision must be 'tf32' or 'ieee', got {precision!r}")
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    return M, N, K, out


def attention_scores(q: torch.Tensor, k: torch.Tensor, causal: bool):
    """S = q k^T: q (B, H, Tq, D), k (B, H, Tk, D), any strides with a contiguous last dim; causal
    needs Tq == Tk. Returns (B, H, Tq, Tk, D, scores) with scores a new fp32 (B, H, Tq, Tk) tensor."""
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    if k.shape != (B, H, Tk, D) or (causal and Tq != Tk) or q.stride(3) != 1 or k.stride(3) != 1:
        raise ValueError(f"attention_scores: q {tuple(q.shape)} and k {tuple(k.shape)} do not fit")
    return B, H, Tq, Tk, D, torch.empty((B, H, Tq, Tk), dtype=torch.float32, device=q.device)


def fp32_rows(scores: torch.Tensor, operation: str) -> torch.Tensor:
    """A contiguous fp32 (..., N) tensor seen as (rows, N) (scores a kernel rewrites in place)."""
    if scores.dtype != torch.float32 or not scores.is_contiguous():
        raise ValueError(f"{operation}: the scores must be a contiguous fp32 tensor")
    return scores.view(-1, scores.shape[-1])


def attention_output(p: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None):
    """O = p v: p (B, H, Tq, Tk) fp32, v (B, H, Tk, D), out (B, H, Tq, D) in v's dtype or any such
    view with a contiguous last dim (None: allocated). Returns (B, H, Tq, Tk, D, out)."""
    B, H, Tq, Tk = p.shape
    D = v.shape[3]
    if v.shape != (B, H, Tk, D) or p.stride(3) != 1 or v.stride(3) != 1:
        raise ValueError(f"attention_output: p {tuple(p.shape)} and v {tuple(v.shape)} do not fit")
    if out is None:
        out = torch.empty((B, H, Tq, D), dtype=v.dtype, device=v.device)
    if out.shape != (B, H, Tq, D) or out.stride(3) != 1:
        raise ValueError(f"attention_output: out {tuple(out.shape)} should be {(B, H, Tq, D)}")
    return B, H, Tq, Tk, D, out


def rope_tables(max_positions: int, rotary_dim: int, device):
    """cos, sin: two new (max_positions, rotary_dim // 2) fp32 tables; rotary_dim must be even."""
    if rotary_dim % 2:
        raise ValueError(f"rope_tables: rotary_dim must be even, got {rotary_dim}")
    cos = torch.empty((max_positions, rotary_dim // 2), dtype=torch.float32, device=device)
    return cos, torch.empty_like(cos)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, rotary_dim: int):
    """x (B, T, H, D) with a contiguous last dim, rotated in place on its first rotary_dim channels by
    (max_positions, rotary_dim / 2) tables; positions (B, T) or (T,) shared by every row. Returns
    (B, T, H, half, positions as (B, T))."""
    if x.dim() != 4 or x.stride(-1) != 1:
        raise ValueError(f"apply_rope: x must be (B, T, H, D) with a contiguous last dim, got {tuple(x.shape)}")
    B, T, H, D = x.shape
    half = rotary_dim // 2
    if rotary_dim % 2 or not 0 < rotary_dim <= D or cos.shape[1] != half or sin.shape != cos.shape:
        raise ValueError(f"apply_rope: rotary_dim {rotary_dim} does not fit head size {D} and tables "
                         f"{tuple(cos.shape)}")
    return B, T, H, half, positions.expand(B, T)


def same_shape(operation: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """Elementwise operands: the same shape and dtype, contiguous."""
    if a.shape != b.shape or a.dtype != b.dtype or not (a.is_contiguous() and b.is_contiguous()):
        raise ValueError(f"{operation}: operands {tuple(a.shape)} {a.dtype} and {tuple(b.shape)} {b.dtype} must "
                         "match and be contiguous")


def write_kv_cache(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor):
    """k, v (B, T, Hkv, D) into caches (B, Hkv, Tmax, D) of one layout. Returns (B, T, Hkv, D)."""
    B, T, H, D = k.shape
    if (v.shape != k.shape or k_cache.shape[:2] != (B, H) or k_cache.shape[3] != D or v_cache.shape != k_cache.shape
            or v_cache.stride() != k_cache.stride() or k.stride(3) != 1 or v.stride(3) != 1):
        raise ValueError(f"write_kv_cache: k {tuple(k.shape)}, v {tuple(v.shape)} and caches "
                         f"{tuple(k_cache.shape)}, {tuple(v_cache.shape)} do not fit")
    return B, T, H, D
