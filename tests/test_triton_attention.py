"""The Triton fast path's attention inputs and attention against plain torch: RoPE fused with the
KV-cache write and the q|k|v GEMV (fast_rope.py), flash attention and decoding (fast_attention.py),
and the conv stem both paths share (conv.py). The course kernels and the course model's attention:
tests/test_course_kernels.py and tests/test_course_model.py.

References: glm_asr_course.reference.torch_ops (transformers' RoPE and softmax attention with masks
in float64), torch.nn.functional.conv1d + gelu. Without a GPU the
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

from glm_asr_course.reference import torch_ops  # noqa: E402
from glm_asr_triton_example.conv import conv1d  # noqa: E402
from glm_asr_triton_example.fast_attention import decode_attention, flash_attention  # noqa: E402
from glm_asr_triton_example.fast_rope import project_qkv_into_cache, rope_qkv_into_cache  # noqa: E402
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


def hf_rope(x, positions, rotary_dim, dtype):
    """transformers' RoPE of x (B, T, H, D) at integer positions (B, T), in x's dtype."""
    cos, sin = torch_ops.rope_tables(positions.reshape(-1), rotary_dim, 10000.0)
    shape = (*positions.shape, rotary_dim // 2)
    return torch_ops.rope(x, cos.view(shape), sin.view(shape), rotary_dim)


def half_tables(positions_max, rotary_dim, theta):
    """The (P, rotary_dim/2) fp32 tables the kernels take, built by transformers' formula."""
    return torch_ops.rope_tables(torch.arange(positions_max, device=DEV), rotary_dim, theta)


# --------------------------------------------------------------------------------------------------
# RoPE: the course tables (rope.py), the rotation and cache writes (glue.py, fast_rope.py)
# --------------------------------------------------------------------------------------------------


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
    q, k, v = qkv.split([n_q * head_dim, n_kv * head_dim, n_kv * head_dim], dim=-1)
    q_ref = hf_rope(q.view(B, T, n_q, head_dim), positions, rotary_dim, dtype)
    k_ref = hf_rope(k.view(B, T, n_kv, head_dim), positions, rotary_dim, dtype).transpose(1, 2)
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
    q, k, v = qkv.split([n_q * head_dim, n_kv * head_dim, n_kv * head_dim], dim=-1)
    live = slice(cache_pos, cache_pos + T)
    refs = [(q_out, hf_rope(q.view(B, T, n_q, head_dim), positions, rotary_dim, dtype)),
            (k_cache[:, :, live], hf_rope(k.view(B, T, n_kv, head_dim), positions, rotary_dim, dtype).transpose(1, 2)),
            (v_cache[:, :, live], v.view(B, T, n_kv, head_dim).transpose(1, 2))]
    for got, ref in refs:
        assert rel_err(got, ref) < (1e-5 if dtype == torch.float32 else 2e-2)
        if dtype == torch.bfloat16:  # same rounding points: equal bar rare accumulation-order flips
            assert (got == ref).double().mean().item() > 0.97
    untouched = torch.ones(Tmax, dtype=torch.bool, device=DEV)
    untouched[live] = False
    assert k_cache[:, :, untouched].isnan().all() and v_cache[:, :, untouched].isnan().all()


def test_project_qkv_into_cache_with_a_gpus_tuned_tile(monkeypatch, launch_grids):
    """The one-launch decode projection takes the GPU's one-row tile from fast_linear.GEMV_TILES_BY_GPU (a
    made-up GPU's here: 4 weight rows = 2 rotation pairs a program, 32-element K steps) and still writes
    what transformers computes (the test above, run again)."""
    from glm_asr_triton_example import fast_linear, fast_rope

    monkeypatch.setattr(fast_linear, "INTERPRET", False)
    monkeypatch.setattr(fast_linear, "gpu_name", lambda device: "test GPU")
    monkeypatch.setitem(fast_linear.GEMV_TILES_BY_GPU, "test GPU", {(512, 96, torch.bfloat16): (4, 64, 4, 4)})
    grids = launch_grids(fast_rope, "qkv_rope_gemv_kernel")
    test_project_qkv_into_cache(torch.bfloat16, 1, 1, 4, 2, 64, 64)
    assert grids.grids == [((4 + 2 * 2) * 32 // 2,)]


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
    ref = torch_ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale).transpose(1, 2)
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
    ref = torch_ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale, kv_start=starts).transpose(1, 2)
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
    ref = torch_ops.attention(q.transpose(1, 2), k_cache[:, :, :T], v_cache[:, :, :T], scale, causal=True,
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
    ref = torch_ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale, causal=True,
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
    ref = torch_ops.attention(q.transpose(1, 2), k_cache[:, :, :cache_len], v_cache[:, :, :cache_len], scale := D ** -0.5,
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


@pytest.mark.parametrize("split_size,tiles", [(32, (16, 4)), (16, (16, 8)), (64, (32, 4))])
def test_decode_attention_with_the_sweeps_tiles(split_size, tiles):
    """The (BLOCK_N, num_warps) that glm_asr_lab/tuning/sweep_attention.py tries: several key steps in a
    split, one step a split, one split for the whole live cache, each against torch."""
    B, Hq, Hkv, D, Tmax, cache_len = 2, 8, 2, 32, 64, 45
    kv_start = torch.tensor([0, 5], dtype=torch.int32, device=DEV)
    q = torch.randn(B, 1, Hq, D, device=DEV).to(torch.bfloat16)
    k_cache, v_cache = (torch.randn(B, Hkv, Tmax, D, device=DEV).to(torch.bfloat16) for _ in range(2))
    ref = torch_ops.attention(q.transpose(1, 2), k_cache[:, :, :cache_len], v_cache[:, :, :cache_len], D ** -0.5,
                              kv_start=kv_start).transpose(1, 2)
    for cache in (k_cache, v_cache):
        cache[:, :, cache_len:] = float("nan")
    got = decode_attention(q, k_cache, v_cache, torch.tensor([cache_len], dtype=torch.int32, device=DEV), kv_start,
                           D ** -0.5, out=nan_like((B, 1, Hq, D), torch.bfloat16), precision=IEEE,
                           split_size=split_size, tiles=tiles)
    assert torch.isfinite(got).all() and rel_err(got, ref) < TOL[torch.bfloat16]


@pytest.mark.parametrize("dtype,Tmax,split_size", [(torch.bfloat16, 200, None), (torch.bfloat16, 300, None),
                                                    (torch.float32, 300, None), (torch.bfloat16, 300, 96)])
def test_decode_attention_with_the_gpus_defaults(monkeypatch, dtype, Tmax, split_size):
    """The split and tiles decode_attention takes on a GPU (_decode_config), run here by the interpreter: one
    split up to 256 slots, 128-slot splits and a combine past them, fp32's 64-key steps, and an explicit split
    that is no power of two (the key step must still be one)."""
    from glm_asr_triton_example import fast_attention

    monkeypatch.setattr(fast_attention, "INTERPRET", False)
    B, Hq, Hkv, D, cache_len = 2, 4, 2, 32, Tmax - 7
    kv_start = torch.tensor([0, 9], dtype=torch.int32, device=DEV)
    q = torch.randn(B, 1, Hq, D, device=DEV).to(dtype)
    k_cache, v_cache = (torch.randn(B, Hkv, Tmax, D, device=DEV).to(dtype) for _ in range(2))
    ref = torch_ops.attention(q.transpose(1, 2), k_cache[:, :, :cache_len], v_cache[:, :, :cache_len], D ** -0.5,
                              kv_start=kv_start).transpose(1, 2)
    for cache in (k_cache, v_cache):
        cache[:, :, cache_len:] = float("nan")
        cache[1, :, :9] = float("nan")
    got = decode_attention(q, k_cache, v_cache, torch.tensor([cache_len], dtype=torch.int32, device=DEV), kv_start,
                           D ** -0.5, out=nan_like((B, 1, Hq, D), dtype), precision=IEEE, split_size=split_size)
    assert torch.isfinite(got).all() and rel_err(got, ref) < TOL[dtype]


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
        ref = torch_ops.attention(q_out.transpose(1, 2), k_cache[:, :, : pos + 1], v_cache[:, :, : pos + 1],
                                  D ** -0.5, kv_start=kv_start).transpose(1, 2)
        assert rel_err(out, ref) < TOL[dtype]
        # The step wrote this token's k into slot pos.
        k_new = qkv[..., Hq * D: (Hq + Hkv) * D].view(B, 1, Hkv, D)
        positions = (pos - kv_start).clamp_min(0)[:, None]
        assert torch.equal(k_cache[:, :, pos: pos + 1], hf_rope(k_new, positions, D, dtype).transpose(1, 2))
