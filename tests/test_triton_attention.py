"""Triton RoPE, conv stem and attention kernels against plain torch: the course path's attention
(attention.py, with glue.mask_scores), the fast path's flash attention and decoding (fast_attention.py,
fast_rope.py), and the glue both share (RoPE rotation, cache writes, the conv stem).

References: transformers' rotate_half / apply_rotary_pos_emb and rotary tables re-written in torch,
torch.nn.functional.conv1d + gelu, and softmax attention with masks in float64. Without a GPU the
kernels run in Triton's interpreter, hence the small shapes; head sizes include ones that are not a
power of two (24, 40, 80, 96: padded and masked inside the kernels). Every output buffer is filled
with NaN before the launch, so an element the kernel forgets to write fails the test. fp32 runs as
IEEE fp32 ("ieee"), so the 1e-5 tolerance holds on a GPU too.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from glm_asr_triton_example.attention import decoder_attention, encoder_attention  # noqa: E402
from glm_asr_triton_example.conv import conv1d  # noqa: E402
from glm_asr_triton_example.fast_attention import decode_attention, flash_attention  # noqa: E402
from glm_asr_triton_example.fast_rope import project_qkv_into_cache  # noqa: E402
from glm_asr_triton_example.glue import apply_rope, rope_qkv_into_cache  # noqa: E402
from glm_asr_triton_example.rope import rope_tables  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.bfloat16]
IEEE = "ieee"
# max |got - ref| / max |ref|: fp32 must match to 1e-5; bf16 allows a few bf16 ulps of the largest value.
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def rel_err(got, ref):
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1e-30)).item()


def nan_like(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device=DEV)


# --------------------------------------------------------------------------------------------------
# transformers' RoPE, in torch
# --------------------------------------------------------------------------------------------------


def hf_inv_freq(rotary_dim, theta):
    """compute_default_rope_parameters: built on the CPU (its default device), then moved."""
    return (1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))).to(DEV)


def hf_tables(positions, rotary_dim, theta, dtype):
    """GlmAsrRotaryEmbedding.forward: cos, sin (B, T, rotary_dim) for integer positions (B, T)."""
    inv_freq = hf_inv_freq(rotary_dim, theta)
    freqs = (inv_freq[None, :, None].expand(positions.shape[0], -1, 1) @ positions[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_rope(x, cos, sin):
    """apply_rotary_pos_emb (partial rotary) for x (B, T, H, D), cos / sin (B, T, rotary_dim)."""
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    rotary_dim = cos.shape[-1]
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat([x_rot * cos + rotate_half(x_rot) * sin, x_pass], dim=-1)


def half_tables(positions_max, rotary_dim, theta):
    """The (P, rotary_dim/2) fp32 tables the kernels take, built by transformers' formula."""
    freqs = torch.arange(positions_max, device=DEV).float()[:, None] * hf_inv_freq(rotary_dim, theta)[None, :]
    return freqs.cos(), freqs.sin()


# --------------------------------------------------------------------------------------------------
# RoPE: the course tables (rope.py), the rotation and cache writes (glue.py, fast_rope.py)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,head_dim,rotary_dim", [(3, 16, 8), (3, 16, 16), (5, 64, 32), (2, 128, 128)])
@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("T", [1, 17])
def test_apply_rope(dtype, heads, head_dim, rotary_dim, per_row, T):
    B = 2
    # x is the q part of a fused (B, T, 3*H*D) projection output: strided rows.
    qkv = torch.randn(B, T, 3 * heads * head_dim, device=DEV).to(dtype)
    before = qkv.clone()
    x = qkv[..., : heads * head_dim].view(B, T, heads, head_dim)
    if per_row:
        positions = torch.arange(T, device=DEV)[None, :] + torch.tensor([[0], [37]], device=DEV)
        positions = positions.to(torch.int32)
    else:
        positions = torch.arange(T, device=DEV) + 5
    pos_bt = positions if per_row else positions[None].expand(B, -1)
    cos, sin = half_tables(64, rotary_dim, 10000.0)
    ref = hf_rope(before[..., : heads * head_dim].view(B, T, heads, head_dim), *hf_tables(pos_bt, rotary_dim, 10000.0, dtype))

    got = apply_rope(x, cos, sin, positions, rotary_dim)
    assert got.data_ptr() == x.data_ptr()
    if dtype == torch.bfloat16:
        # Every bf16 rounding point of transformers is reproduced: bit-exact.
        assert torch.equal(got, ref)
    else:
        assert rel_err(got, ref) < 1e-6
    # Channels past rotary_dim and the k / v parts of the fused buffer are untouched.
    assert torch.equal(qkv[..., heads * head_dim:], before[..., heads * head_dim:])
    assert torch.equal(x[..., rotary_dim:], before[..., : heads * head_dim].view(B, T, heads, head_dim)[..., rotary_dim:])


@pytest.mark.parametrize("dtype", DTYPES)
def test_apply_rope_q_and_k_with_kernel_tables(dtype):
    """Encoder use: q and k heads of the fused output rotated by one launch, tables from rope_tables."""
    B, T, H, D, R = 2, 33, 4, 64, 32
    qkv = torch.randn(B, T, 3 * H * D, device=DEV).to(dtype)
    before = qkv.clone()
    cos, sin = rope_tables(T, R, 10000.0, DEV)
    positions = torch.arange(T, device=DEV)
    apply_rope(qkv[..., : 2 * H * D].view(B, T, 2 * H, D), cos, sin, positions, R)
    ref = hf_rope(before[..., : 2 * H * D].view(B, T, 2 * H, D), *hf_tables(positions[None].expand(B, -1), R, 10000.0, dtype))
    assert rel_err(qkv[..., : 2 * H * D].view(B, T, 2 * H, D), ref) < (1e-6 if dtype == torch.float32 else 8e-3)
    assert torch.equal(qkv[..., 2 * H * D:], before[..., 2 * H * D:])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_q,n_kv,head_dim,rotary_dim", [(4, 1, 16, 8), (4, 2, 64, 64), (8, 2, 32, 16), (4, 4, 128, 128)])
@pytest.mark.parametrize("T,cache_pos", [(17, 0), (1, 9), (3, 21)])
def test_rope_qkv_into_cache(dtype, n_q, n_kv, head_dim, rotary_dim, T, cache_pos):
    B, Tmax = 2, 24
    kv_start = torch.tensor([0, 3], dtype=torch.int32, device=DEV)
    qkv = torch.randn(B, T, (n_q + 2 * n_kv) * head_dim, device=DEV).to(dtype)
    q_out = nan_like((B, T, n_q, head_dim), dtype)
    k_cache = nan_like((B, n_kv, Tmax, head_dim), dtype)
    v_cache = nan_like((B, n_kv, Tmax, head_dim), dtype)
    cos, sin = half_tables(64, rotary_dim, 10000.0)
    rope_qkv_into_cache(qkv, n_q, n_kv, head_dim, cos, sin, rotary_dim, q_out, k_cache, v_cache,
                        torch.tensor([cache_pos], dtype=torch.int32, device=DEV), kv_start)

    # transformers: position_ids = cumsum(attention_mask) - 1, pads clamped to 0.
    slots = cache_pos + torch.arange(T, device=DEV)
    positions = (slots[None, :] - kv_start[:, None]).clamp_min(0)
    cos_ref, sin_ref = hf_tables(positions, rotary_dim, 10000.0, dtype)
    q, k, v = qkv.split([n_q * head_dim, n_kv * head_dim, n_kv * head_dim], dim=-1)
    q_ref = hf_rope(q.view(B, T, n_q, head_dim), cos_ref, sin_ref)
    k_ref = hf_rope(k.view(B, T, n_kv, head_dim), cos_ref, sin_ref).transpose(1, 2)
    v_ref = v.view(B, T, n_kv, head_dim).transpose(1, 2)
    live = slice(cache_pos, cache_pos + T)
    if dtype == torch.bfloat16:
        assert torch.equal(q_out, q_ref)
        assert torch.equal(k_cache[:, :, live], k_ref)
    else:
        assert rel_err(q_out, q_ref) < 1e-6
        assert rel_err(k_cache[:, :, live], k_ref) < 1e-6
    assert torch.equal(v_cache[:, :, live], v_ref)
    # Only the T new slots are written.
    untouched = torch.ones(Tmax, dtype=torch.bool, device=DEV)
    untouched[live] = False
    assert k_cache[:, :, untouched].isnan().all() and v_cache[:, :, untouched].isnan().all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,T,n_q,n_kv,head_dim,rotary_dim", [
    (1, 1, 4, 2, 64, 64),     # decode at batch 1: one launch, GEMV + RoPE + cache write
    (1, 1, 2, 1, 128, 128),
    (1, 1, 4, 1, 32, 16),     # partial rotary: RMSNorm-prologue GEMV, then rope_qkv_into_cache
    (2, 1, 4, 2, 64, 64),     # a batch: the same two launches
    (1, 5, 4, 2, 64, 64),     # a prompt
])
def test_project_qkv_into_cache(dtype, B, T, n_q, n_kv, head_dim, rotary_dim):
    """transformers' order: RMSNorm, q/k/v projections (rounded), RoPE; k and v land in the cache."""
    H, Tmax, cache_pos, eps = 96, 24, 9, 1e-5
    g = torch.Generator().manual_seed(head_dim * 10 + B * 3 + T)
    x = (torch.randn(B * T, H, generator=g) * 2).to(DEV, dtype)
    norm_weight = torch.randn(H, generator=g).to(DEV, dtype)
    weight = (torch.randn((n_q + 2 * n_kv) * head_dim, H, generator=g) * H ** -0.5).to(DEV, dtype)
    kv_start = torch.tensor([0, 3][:B], dtype=torch.int32, device=DEV)
    q_out = nan_like((B, T, n_q, head_dim), dtype)
    k_cache = nan_like((B, n_kv, Tmax, head_dim), dtype)
    v_cache = nan_like((B, n_kv, Tmax, head_dim), dtype)
    cos, sin = half_tables(64, rotary_dim, 10000.0)
    project_qkv_into_cache(x, weight, norm_weight, eps, n_q, n_kv, head_dim, cos, sin, rotary_dim, q_out, k_cache,
                           v_cache, torch.tensor([cache_pos], dtype=torch.int32, device=DEV), kv_start,
                           precision=IEEE)

    normed = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(dtype)
    qkv = ((norm_weight * normed).double() @ weight.double().T).to(dtype).view(B, T, -1)
    positions = (cache_pos + torch.arange(T, device=DEV)[None, :] - kv_start[:, None]).clamp_min(0)
    cos_ref, sin_ref = hf_tables(positions, rotary_dim, 10000.0, dtype)
    q, k, v = qkv.split([n_q * head_dim, n_kv * head_dim, n_kv * head_dim], dim=-1)
    live = slice(cache_pos, cache_pos + T)
    refs = [(q_out, hf_rope(q.view(B, T, n_q, head_dim), cos_ref, sin_ref)),
            (k_cache[:, :, live], hf_rope(k.view(B, T, n_kv, head_dim), cos_ref, sin_ref).transpose(1, 2)),
            (v_cache[:, :, live], v.view(B, T, n_kv, head_dim).transpose(1, 2))]
    for got, ref in refs:
        assert rel_err(got, ref) < (1e-5 if dtype == torch.float32 else 2e-2)
        if dtype == torch.bfloat16:  # same rounding points: equal bar rare accumulation-order flips
            assert (got == ref).double().mean().item() > 0.97
    untouched = torch.ones(Tmax, dtype=torch.bool, device=DEV)
    untouched[live] = False
    assert k_cache[:, :, untouched].isnan().all() and v_cache[:, :, untouched].isnan().all()


# --------------------------------------------------------------------------------------------------
# conv.py
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c_in,c_out,t_in,stride,time_major", [
    (16, 32, 17, 1, False), (24, 48, 33, 2, True), (8, 16, 1, 1, False), (16, 16, 2, 2, True),
    (40, 136, 75, 2, False), (72, 40, 150, 1, True),
])
@pytest.mark.parametrize("gelu", [True, False])
def test_conv1d(dtype, c_in, c_out, t_in, stride, time_major, gelu):
    B = 2
    if time_major:
        # The second conv reads the first one's (B, T, C) output through a transposed view.
        x = torch.randn(B, t_in, c_in, device=DEV).to(dtype).transpose(1, 2)
    else:
        x = torch.randn(B, c_in, t_in, device=DEV).to(dtype)
    w = (torch.randn(c_out, c_in, 3, device=DEV) / (3 * c_in) ** 0.5).to(dtype)
    b = (0.5 * torch.randn(c_out, device=DEV)).to(dtype)
    t_out = (t_in + 2 - 3) // stride + 1
    out = nan_like((B, t_out, c_out), dtype)
    got = conv1d(x, w, b, stride, gelu=gelu, precision=IEEE, out=out)
    ref = torch.nn.functional.conv1d(x.double(), w.double(), b.double(), stride=stride, padding=1).transpose(1, 2)
    if gelu:
        ref = torch.nn.functional.gelu(ref)
    assert got is out and got.shape == (B, t_out, c_out)
    assert rel_err(got, ref) < TOL[dtype]


# --------------------------------------------------------------------------------------------------
# Attention: the course path (attention.py) and the fast path (fast_attention.py)
# --------------------------------------------------------------------------------------------------


def ref_attention(q, k, v, scale, causal=False, kv_start=None):
    """float64 softmax attention; q (B, Hq, Tq, D), k / v (B, Hkv, Tk, D). Rows with no visible key -> 0."""
    q, k, v = q.double(), k.double(), v.double()
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    s = q @ k.transpose(-1, -2) * scale
    Tq, Tk = s.shape[-2:]
    keys = torch.arange(Tk, device=DEV)
    visible = torch.ones(q.shape[0], 1, Tq, Tk, dtype=torch.bool, device=DEV)
    if causal:
        visible &= keys[None, None, None, :] <= torch.arange(Tq, device=DEV)[None, None, :, None]
    if kv_start is not None:
        visible &= keys[None, None, None, :] >= kv_start.long()[:, None, None, None]
    return torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1).nan_to_num(0.0) @ v


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("W,H,T,D", [(1, 2, 1, 16), (2, 3, 17, 64), (1, 2, 75, 24), (1, 1, 70, 40), (1, 2, 33, 80),
                                     (1, 1, 20, 96)])
def test_course_encoder_attention(dtype, W, H, T, D):
    """The course path's encoder attention: q, k, v views into one fused (W, T, 3*H*D) output, the
    result written token-major through a permuted view of the o_proj input buffer."""
    qkv = torch.randn(W, T, 3, H, D, device=DEV).to(dtype)
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
    out = nan_like((W, T, H, D), dtype)
    encoder_attention(q, k, v, D ** -0.5, out.transpose(1, 2), precision=IEEE)
    assert rel_err(out.transpose(1, 2), ref_attention(q, k, v, D ** -0.5)) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,Hq,Hkv,D,kv_start", [(1, 2, 2, 16, [0, 0]), (17, 4, 2, 16, [0, 5]), (33, 8, 2, 24, [3, 0]),
                                                 (20, 4, 1, 80, [0, 9])])
def test_course_decoder_attention_prefill(dtype, T, Hq, Hkv, D, kv_start):
    """Prefill through the three course kernels: causal, GQA by a zero head stride, left padding
    masked by glue.mask_scores (a padding query sees only itself, so nothing is NaN)."""
    B, Tmax = 2, T + 9
    q = torch.randn(B, Hq, T, D, device=DEV).to(dtype)
    k_cache, v_cache = (torch.randn(B, Hkv, Tmax, D, device=DEV).to(dtype) for _ in range(2))
    starts = torch.tensor(kv_start, dtype=torch.int32, device=DEV)
    counters = torch.tensor([0, T], dtype=torch.int32, device=DEV)
    got = decoder_attention(q, k_cache, v_cache, D ** -0.5, causal=True, n_keys=T, kv_start=starts,
                            cache_pos=counters[:1], valid_len=counters[1:], precision=IEEE)
    ref = ref_attention(q, k_cache[:, :, :T], v_cache[:, :, :T], D ** -0.5, causal=True, kv_start=starts)
    assert torch.isfinite(got).all()
    for b, start in enumerate(kv_start):  # real queries: transformers' attention; padding queries: themselves
        assert rel_err(got[b, :, start:], ref[b, :, start:]) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("Hq,Hkv,D", [(2, 2, 16), (4, 2, 64), (8, 2, 40)])
@pytest.mark.parametrize("valid", [1, 17, 40])
def test_course_decoder_attention_decode(dtype, Hq, Hkv, D, valid):
    """One decode token scored against every slot of a 48-slot cache: slots at or past the live length
    (holding stale values) and the left padding are masked on the device."""
    B, Tmax = 2, 48
    kv_start = torch.tensor([0, min(3, valid - 1)], dtype=torch.int32, device=DEV)
    q = torch.randn(B, Hq, 1, D, device=DEV).to(dtype)
    k_cache, v_cache = (torch.randn(B, Hkv, Tmax, D, device=DEV).to(dtype) for _ in range(2))
    counters = torch.tensor([valid - 1, valid], dtype=torch.int32, device=DEV)
    got = decoder_attention(q, k_cache, v_cache, D ** -0.5, causal=False, n_keys=Tmax, kv_start=kv_start,
                            cache_pos=counters[:1], valid_len=counters[1:], precision=IEEE)
    ref = ref_attention(q, k_cache[:, :, :valid], v_cache[:, :, :valid], D ** -0.5, kv_start=kv_start)
    assert rel_err(got, ref) < TOL[dtype]


def _check_flash(got, ref, dtype, out):
    assert got is out and got.is_contiguous()
    assert torch.isfinite(got).all()
    assert rel_err(got, ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,T,H,D", [(2, 1, 2, 16), (2, 17, 3, 64), (1, 75, 2, 64), (1, 33, 2, 16), (1, 40, 2, 24),
                                     (1, 17, 1, 80), (1, 9, 2, 96)])
def test_flash_attention_encoder(dtype, B, T, H, D):
    """Non-causal self-attention on q, k, v views into one fused (B, T, 3*H*D) output."""
    qkv = torch.randn(B, T, 3, H, D, device=DEV).to(dtype)
    q, k, v = qkv.unbind(2)
    scale = D ** -0.5
    out = nan_like((B, T, H, D), dtype)
    got = flash_attention(q, k, v, scale, causal=False, precision=IEEE, out=out)
    ref = ref_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale).transpose(1, 2)
    _check_flash(got, ref, dtype, out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("Tq,Tk,Hq,Hkv,D,kv_start", [
    (17, 75, 4, 2, 32, None), (1, 40, 4, 1, 16, None), (33, 17, 2, 2, 64, [0, 5]),
])
def test_flash_attention_cross_lengths(dtype, Tq, Tk, Hq, Hkv, D, kv_start):
    """Tq != Tk, GQA and left padding on token-major ("bthd") k / v."""
    B = 2
    q = torch.randn(B, Tq, Hq, D, device=DEV).to(dtype)
    k = torch.randn(B, Tk, Hkv, D, device=DEV).to(dtype)
    v = torch.randn(B, Tk, Hkv, D, device=DEV).to(dtype)
    starts = None if kv_start is None else torch.tensor(kv_start, dtype=torch.int32, device=DEV)
    scale = D ** -0.5
    out = nan_like((B, Tq, Hq, D), dtype)
    got = flash_attention(q, k, v, scale, causal=False, precision=IEEE, kv_start=starts, out=out)
    ref = ref_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale, kv_start=starts).transpose(1, 2)
    _check_flash(got, ref, dtype, out)


PREFILL_CASES = [
    # (T, Hq, Hkv, D, kv_start)
    (1, 2, 2, 16, [0, 0]),
    (17, 4, 2, 16, [0, 5]),
    (33, 8, 2, 64, [3, 0]),
    (75, 4, 1, 64, [0, 40]),
    (40, 4, 4, 128, [0, 9]),
    (17, 4, 2, 40, [0, 3]),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,Hq,Hkv,D,kv_start", PREFILL_CASES)
def test_flash_attention_prefill_from_cache(dtype, T, Hq, Hkv, D, kv_start):
    """Decoder prefill: causal, GQA, left padding, k / v read from (B, Hkv, Tmax, D) caches."""
    B, Tmax = 2, T + 7
    q = torch.randn(B, T, Hq, D, device=DEV).to(dtype)
    k_cache = torch.randn(B, Hkv, Tmax, D, device=DEV).to(dtype)
    v_cache = torch.randn(B, Hkv, Tmax, D, device=DEV).to(dtype)
    # Slots past the prompt are not part of this attention: poison them.
    k_cache[:, :, T:] = float("nan")
    v_cache[:, :, T:] = float("nan")
    starts = torch.tensor(kv_start, dtype=torch.int32, device=DEV)
    scale = D ** -0.5
    out = nan_like((B, T, Hq, D), dtype)
    got = flash_attention(q, k_cache, v_cache, scale, causal=True, precision=IEEE, kv_start=starts, out=out,
                          kv_layout="bhtd")
    ref = ref_attention(q.transpose(1, 2), k_cache[:, :, :T], v_cache[:, :, :T], scale, causal=True,
                        kv_start=starts).transpose(1, 2)
    _check_flash(got, ref, dtype, out)
    # Left-padding queries see no key at all: zeros, never NaN.
    for b, s in enumerate(kv_start):
        assert (got[b, :s] == 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attention_long_causal(dtype):
    """More than one query block: the unmasked interior loop below the diagonal runs too."""
    B, T, Hq, Hkv, D = 2, 300, 4, 2, 64
    qkv = torch.randn(B, T, Hq + 2 * Hkv, D, device=DEV).to(dtype)
    q, k, v = qkv.split([Hq, Hkv, Hkv], dim=2)
    starts = torch.tensor([0, 70], dtype=torch.int32, device=DEV)
    scale = D ** -0.5
    out = nan_like((B, T, Hq, D), dtype)
    got = flash_attention(q, k, v, scale, causal=True, precision=IEEE, kv_start=starts, out=out)
    ref = ref_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale, causal=True,
                        kv_start=starts).transpose(1, 2)
    _check_flash(got, ref, dtype, out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("Hq,Hkv,D", [(2, 2, 16), (4, 2, 64), (8, 2, 16), (4, 1, 24)])
@pytest.mark.parametrize("cache_len", [1, 17, 40])
@pytest.mark.parametrize("split_size", [16, 64])
def test_decode_attention(dtype, Hq, Hkv, D, cache_len, split_size):
    B, Tmax = 2, 40
    kv_start = torch.tensor([0, min(3, cache_len - 1)], dtype=torch.int32, device=DEV)
    # q is the q part of a fused (B, 1, (Hq + 2*Hkv) * D) projection output.
    q = torch.randn(B, 1, (Hq + 2 * Hkv) * D, device=DEV).to(dtype)[..., : Hq * D].view(B, 1, Hq, D)
    k_cache = torch.randn(B, Hkv, Tmax, D, device=DEV).to(dtype)
    v_cache = torch.randn(B, Hkv, Tmax, D, device=DEV).to(dtype)
    ref = ref_attention(q.transpose(1, 2), k_cache[:, :, :cache_len], v_cache[:, :, :cache_len], scale := D ** -0.5,
                        kv_start=kv_start).transpose(1, 2)
    # Slots past cache_len and the left padding must never be read: poison them.
    for cache in (k_cache, v_cache):
        cache[:, :, cache_len:] = float("nan")
        cache[1, :, : kv_start[1]] = float("nan")
    out = nan_like((B, 1, Hq, D), dtype)
    got = decode_attention(q, k_cache, v_cache, torch.tensor([cache_len], dtype=torch.int32, device=DEV),
                           kv_start, scale, out=out, precision=IEEE, split_size=split_size)
    assert got is out and torch.isfinite(got).all()
    assert rel_err(got, ref) < TOL[dtype]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_decode_step_cuda_graph_replay():
    """rope_qkv_into_cache + decode_attention captured once, replayed with the position on the device."""
    B, Hq, Hkv, D, Tmax, prompt = 2, 8, 2, 64, 64, 20
    dtype = torch.bfloat16
    kv_start = torch.tensor([0, 4], dtype=torch.int32, device=DEV)
    cos, sin = rope_tables(Tmax, D, 10000.0, DEV)
    k_cache = torch.randn(B, Hkv, Tmax, D, device=DEV).to(dtype)
    v_cache = torch.randn(B, Hkv, Tmax, D, device=DEV).to(dtype)
    qkv = torch.empty(B, 1, (Hq + 2 * Hkv) * D, device=DEV, dtype=dtype)
    q_out = torch.empty(B, 1, Hq, D, device=DEV, dtype=dtype)
    out = torch.empty(B, 1, Hq, D, device=DEV, dtype=dtype)
    cache_pos = torch.tensor([prompt], dtype=torch.int32, device=DEV)
    cache_len = cache_pos + 1

    def step():
        rope_qkv_into_cache(qkv, Hq, Hkv, D, cos, sin, D, q_out, k_cache, v_cache, cache_pos, kv_start)
        decode_attention(q_out, k_cache, v_cache, cache_len, kv_start, D ** -0.5, out=out, precision=IEEE)

    qkv.normal_()
    step()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for pos in range(prompt, prompt + 5):
        qkv.normal_()
        cache_pos.fill_(pos)
        cache_len.fill_(pos + 1)
        graph.replay()
        ref = ref_attention(q_out.transpose(1, 2), k_cache[:, :, : pos + 1], v_cache[:, :, : pos + 1], D ** -0.5,
                            kv_start=kv_start).transpose(1, 2)
        assert rel_err(out, ref) < TOL[dtype]
        # The step wrote this token's k into slot pos.
        k_new = qkv[..., Hq * D: (Hq + Hkv) * D].view(B, 1, Hkv, D)
        positions = (pos - kv_start).clamp_min(0)[:, None]
        assert torch.equal(k_cache[:, :, pos: pos + 1], hf_rope(k_new, *hf_tables(positions, D, 10000.0, dtype)).transpose(1, 2))
