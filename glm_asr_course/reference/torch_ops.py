"""The model's operations in plain torch, as transformers computes them: the one reference that every
kernel check (kernel_cases, the fast paths' self-checks, the tests) compares against.

Float64 where a kernel keeps fp32 (so the reference's own rounding does not count against it);
transformers' own roundings where they decide bf16 results (the rotary tables are fp32 products,
RoPE's products are rounded to the activation dtype one by one).
"""

import torch


def attention(q, k, v, scale, causal=False, kv_start=None, *, q_offset=0, n_valid=None):
    """softmax(q k^T * scale) v in float64 over (B, Hq, Tq, D) queries and (B, Hkv, Tk, D) keys and
    values, GQA by repeating each kv head for its Hq / Hkv query heads. causal: query t (at slot
    q_offset + t) sees keys up to its slot; kv_start (B,): a row's keys below it are left padding;
    n_valid: only the first n_valid keys exist. A query that sees no key gives zeros."""
    q, k, v = q.double(), k.double(), v.double()
    if n_valid is not None:
        k, v = k[:, :, :n_valid], v[:, :, :n_valid]
    k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], 1)
    s = q @ k.transpose(-1, -2) * scale
    Tq, Tk = s.shape[-2:]
    keys = torch.arange(Tk, device=q.device)
    visible = torch.ones(q.shape[0], 1, Tq, Tk, dtype=torch.bool, device=q.device)
    if causal:
        visible &= keys[None, None, None, :] <= (q_offset + torch.arange(Tq, device=q.device))[None, None, :, None]
    if kv_start is not None:
        visible &= keys[None, None, None, :] >= kv_start.long().to(q.device)[:, None, None, None]
    return torch.softmax(s.masked_fill(~visible, float("-inf")), -1).nan_to_num(0.0) @ v


def rope_angles(positions, rotary_dim, theta):
    """transformers' rotary angles, (P, rotary_dim / 2) fp32: position * inv_freq, one fp32 product,
    inv_freq = 1 / theta^(2i / rotary_dim) built in fp32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
    return positions.float()[:, None] * inv_freq.to(positions.device)[None, :]


def rope_tables(positions, rotary_dim, theta):
    """transformers' rotary tables at these positions, reduced to the half width: (P, rotary_dim / 2)
    fp32 cos and sin of the rope_angles."""
    angle = rope_angles(positions, rotary_dim, theta)
    return angle.cos(), angle.sin()


def rope(x, cos, sin, rotary_dim):
    """transformers' apply_rotary_pos_emb (rotate-half) on the first rotary_dim channels of x
    (B, T, H, D); cos, sin (B, T, rotary_dim / 2) fp32, cast to x's dtype, each product rounded to it."""
    cos = torch.cat([cos, cos], -1).to(x.dtype)[:, :, None, :]
    sin = torch.cat([sin, sin], -1).to(x.dtype)[:, :, None, :]
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    x1, x2 = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2:]
    return torch.cat([rot * cos + torch.cat([-x2, x1], -1) * sin, rest], -1)
