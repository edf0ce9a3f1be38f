"""The course model (glm_asr_course/model/course_model.py), shared by both tracks: its attention,
composed of each track's three attention kernels and provided mask, against float64 torch at many
shapes (head sizes that are not powers of two: 24, 40, 80, 96), in IEEE fp32 and bf16; and the
binding itself (every track folder provides every operation the model calls).

Queries, keys and values are views into one fused (B, T, 3·H·D) projection output and results land
in a token-major buffer seen head-major, as in the model; every output starts as NaN, so an element
left unwritten fails. Without a GPU the kernels run in Triton's interpreter or the cuTile emulator.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from glm_asr_course.model import course_model  # noqa: E402
from glm_asr_course.reference import torch_ops  # noqa: E402
from glm_asr_course.tracks import kernel_language, track_folders  # noqa: E402

TRACKS = ("glm_asr_triton_example", "glm_asr_cutile_example")
DTYPES = [torch.float32, torch.bfloat16]
# max |got - ref| / max |ref|: fp32 (IEEE) must match to 1e-5; bf16 allows a few bf16 ulps of the largest value.
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


@pytest.fixture(scope="module", params=TRACKS)
def ops(request):
    ops = course_model.track_ops(request.param)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    return ops, dev


def rel_err(got, ref):
    return ((got.double().cpu() - ref.double().cpu()).abs().max() / ref.double().cpu().abs().max().clamp_min(1e-30)).item()


def test_every_course_folder_provides_every_operation():
    course_folders = [f for f in track_folders() if kernel_language(f) in ("triton", "cutile")]
    assert set(TRACKS) <= set(course_folders)
    for folder in course_folders:
        ops = course_model.track_ops(folder)
        assert all(callable(getattr(ops, f.name)) for f in course_model.fields(course_model.TrackOps)), folder


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("W,H,T,D", [(1, 2, 1, 16), (2, 3, 17, 64), (1, 2, 75, 24), (1, 1, 70, 40), (1, 2, 33, 80),
                                     (1, 1, 20, 96)])
def test_encoder_attention(ops, dtype, W, H, T, D):
    """q, k, v views into one fused (W, T, 3*H*D) output, the result written token-major through a
    permuted view of the o_proj input buffer."""
    ops, dev = ops
    qkv = torch.randn(W, T, 3, H, D, device=dev).to(dtype)
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
    out = torch.full((W, T, H, D), float("nan"), dtype=dtype, device=dev)
    course_model.encoder_attention(ops, q, k, v, D ** -0.5, out.transpose(1, 2), precision="ieee")
    assert rel_err(out.transpose(1, 2), torch_ops.attention(q, k, v, D ** -0.5)) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,Hq,Hkv,D,kv_start", [(1, 2, 2, 16, [0, 0]), (17, 4, 2, 16, [0, 5]), (33, 8, 2, 24, [3, 0]),
                                                 (20, 4, 1, 80, [0, 9])])
def test_decoder_attention_prefill(ops, dtype, T, Hq, Hkv, D, kv_start):
    """Causal, GQA by a zero head stride, left padding masked by glue.mask_scores (a padding query
    sees only itself, so nothing is NaN); q heads read from a fused q|k|v buffer."""
    ops, dev = ops
    B, Tmax = 2, T + 9
    q = torch.randn(B, T, Hq + 2 * Hkv, D, device=dev).to(dtype)[:, :, :Hq].transpose(1, 2)
    k_cache, v_cache = (torch.randn(B, Hkv, Tmax, D, device=dev).to(dtype) for _ in range(2))
    starts = torch.tensor(kv_start, dtype=torch.int32, device=dev)
    counters = torch.tensor([0, T], dtype=torch.int32, device=dev)
    out = torch.full((B, T, Hq, D), float("nan"), dtype=dtype, device=dev).transpose(1, 2)
    got = course_model.decoder_attention(ops, q, k_cache, v_cache, D ** -0.5, causal=True, n_keys=T, kv_start=starts,
                                         cache_pos=counters[:1], valid_len=counters[1:], precision="ieee", out=out)
    ref = torch_ops.attention(q, k_cache[:, :, :T], v_cache[:, :, :T], D ** -0.5, causal=True, kv_start=starts)
    assert got is out and torch.isfinite(got).all()
    for b, start in enumerate(kv_start):  # real queries: transformers' attention; padding queries: themselves
        assert rel_err(got[b, :, start:], ref[b, :, start:]) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("Hq,Hkv,D", [(2, 2, 16), (4, 2, 64), (8, 2, 40)])
@pytest.mark.parametrize("valid", [1, 17, 40])
def test_decoder_attention_decode(ops, dtype, Hq, Hkv, D, valid):
    """One decode token scored against every slot of a 48-slot cache: slots at or past the live length
    (holding stale values) and the left padding are masked on the device."""
    ops, dev = ops
    B, Tmax = 2, 48
    kv_start = torch.tensor([0, min(3, valid - 1)], dtype=torch.int32, device=dev)
    q = torch.randn(B, Hq, 1, D, device=dev).to(dtype)
    k_cache, v_cache = (torch.randn(B, Hkv, Tmax, D, device=dev).to(dtype) for _ in range(2))
    counters = torch.tensor([valid - 1, valid], dtype=torch.int32, device=dev)
    got = course_model.decoder_attention(ops, q, k_cache, v_cache, D ** -0.5, causal=False, n_keys=Tmax,
                                         kv_start=kv_start, cache_pos=counters[:1], valid_len=counters[1:],
                                         precision="ieee")
    ref = torch_ops.attention(q, k_cache, v_cache, D ** -0.5, kv_start=kv_start, n_valid=valid)
    assert rel_err(got, ref) < TOL[dtype]
