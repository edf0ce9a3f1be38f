"""Checkpoints and sequences of awkward shapes, end to end and kernel by kernel, against transformers
and torch: no shape the model accepts may crash a kernel or change an id.

* Tiny checkpoints whose head_dim is not a power of two (encoder 24 and 80, decoder 40 and 96) with
  odd hidden and intermediate sizes: every track path decodes transformers' greedy ids (IEEE fp32) on
  the test clip. (Clips of several windows run in tests/test_parity.py on the usual tiny checkpoint,
  and at full size on the GPU in glm_asr_lab/gpu/clips.py.)
* Attention at the encoder's window lengths and beyond (1500, 1501, 3000 keys) with head_dim 24:
  the Triton course kernels (scores → in-place softmax → P·V) and the fast path's flash attention.

The GPU script (utils/gpu_check.sh kernels) runs this file on the GPU too.
"""

import pytest
import torch

from glm_asr_course.model.audio import load_audio
from glm_asr_course.tracks import REPO_ROOT
from glm_asr_course.reference.tiny_checkpoint import build_tiny_checkpoint
from parity import DEVICE, hf_generate, hf_model, inputs_for, track_model
from tracks import TRACKS

SHAPES = {
    # encoder hidden 96 / 4 heads = head_dim 24; decoder head_dim 40 (2 heads over 1 kv head), FFN 72
    "hd24-hd40": (dict(hidden_size=96, intermediate_size=384, num_attention_heads=4),
                  dict(hidden_size=80, intermediate_size=72, num_attention_heads=2, num_key_value_heads=1,
                       head_dim=40)),
    # encoder one head of 80; decoder head_dim 96 with q/o projections wider than the hidden size
    "hd80-hd96": (dict(hidden_size=80, intermediate_size=320, num_attention_heads=1),
                  dict(hidden_size=48, intermediate_size=40, num_attention_heads=3, num_key_value_heads=1,
                       head_dim=96)),
}
NEW_TOKENS = 6


@pytest.fixture(scope="module", params=list(SHAPES))
def awkward_ckpt(request, tmp_path_factory):
    audio, text = SHAPES[request.param]
    return build_tiny_checkpoint(tmp_path_factory.mktemp(request.param), audio=audio, text=text, seed=1)


@pytest.mark.parametrize("track", TRACKS)
def test_awkward_checkpoint_decodes_transformers_ids(track, awkward_ckpt):
    model, ckpt = track_model(track, awkward_ckpt)
    e, d = ckpt.config.encoder, ckpt.config.decoder
    assert e.head_dim & (e.head_dim - 1) and d.head_dim & (d.head_dim - 1), "head_dims must not be powers of two"
    inputs = inputs_for(ckpt, [load_audio(REPO_ROOT / "test_audio.wav")])
    expected = hf_generate(hf_model(awkward_ckpt), inputs, NEW_TOKENS, NEW_TOKENS, ckpt.config.eos_token_ids)[0]
    assert len(set(expected)) >= 3, f"degenerate reference {expected}"
    assert model.generate(inputs, NEW_TOKENS, NEW_TOKENS)[0] == expected


def _reference_attention(q, k, v, scale):
    return torch.softmax(q.double() @ k.double().transpose(-1, -2) * scale, -1) @ v.double()


@pytest.mark.parametrize("keys", [1500, 1501, 3000])
def test_course_attention_at_window_lengths(keys):
    from glm_asr_triton_example.attention import attention_output, attention_scores, softmax_inplace

    gen = torch.Generator().manual_seed(keys)
    q = torch.randn(1, 1, 3, 24, generator=gen).to(DEVICE)
    k, v = (torch.randn(1, 1, keys, 24, generator=gen).to(DEVICE) for _ in range(2))
    scores = attention_scores(q, k, 24 ** -0.5, causal=False, precision="ieee")
    out = attention_output(softmax_inplace(scores), v, precision="ieee")
    torch.testing.assert_close(out.double(), _reference_attention(q, k, v, 24 ** -0.5), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("frames", [1500, 1501, 3000])
def test_fast_encoder_attention_at_window_lengths(frames):
    from glm_asr_triton_example.fast_attention import flash_attention

    gen = torch.Generator().manual_seed(frames)
    q, k, v = (torch.randn(1, frames, 1, 24, generator=gen).to(DEVICE) for _ in range(3))  # (B, T, H, D)
    out = flash_attention(q, k, v, 24 ** -0.5, causal=False, precision="ieee")
    expected = _reference_attention(*(t.transpose(1, 2) for t in (q, k, v)), 24 ** -0.5).transpose(1, 2)
    torch.testing.assert_close(out.double(), expected, rtol=1e-4, atol=1e-5)
