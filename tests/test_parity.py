"""Every track (each path of each folder, tests/tracks.py) against transformers' GlmAsrForConditionalGeneration
on tiny checkpoints it wrote itself.

The acceptance gate: fp32 encoder output, projected audio and prefill logits within 1e-4 relative
error, and greedy token ids identical to ``generate(do_sample=False)`` for at least 30 new tokens on
the test clip, a 45 s clip (two windows) and a batch of two different clips.
"""

import pytest
import torch

from glm_asr_course.model.audio import load_audio
from parity import hf_generate, hf_kwargs, hf_model, inputs_for, rel_err, track_model, valid_audio_rows
from tracks import DEFAULT_TRACKS, TRACKS

NEW_TOKENS = 32


@pytest.fixture(scope="module")
def audio(clips):
    return {name: load_audio(path) for name, path in clips.items()}


@pytest.mark.parametrize("track", TRACKS)
@torch.no_grad()
def test_encoder_projector_and_prefill_logits_match_transformers(track, tiny_ckpt, audio):
    model, ckpt = track_model(track, tiny_ckpt)
    hf = hf_model(tiny_ckpt)
    inputs = inputs_for(ckpt, [audio["short"], audio["other"]])
    features = torch.from_numpy(inputs.input_features)

    encoded = model.encode_audio(features)
    hf_encoded = hf.model.audio_tower(features).last_hidden_state
    assert rel_err(encoded, hf_encoded) <= 1e-4

    projected = model.project_audio(encoded)
    windows = features.shape[0]
    hf_projected = hf.model.multi_modal_projector(
        hf_encoded.reshape(windows, -1, hf.config.audio_config.intermediate_size))
    assert rel_err(valid_audio_rows(inputs, projected), valid_audio_rows(inputs, hf_projected)) <= 1e-4

    logits = model.prefill_logits(inputs)
    hf_logits = hf(**hf_kwargs(inputs)).logits
    real = torch.from_numpy(inputs.attention_mask).bool()
    assert rel_err(logits[real], hf_logits[real]) <= 1e-4


CASES = {
    "test_audio": ["short"],
    "45s_two_windows": ["long45"],
    "batch_of_two": ["short", "other"],
}
# Every path decodes two windows and a left-padded batch; the single clip, a subset of the batch,
# only the default paths.
GREEDY_CASES = [(track, case) for track in TRACKS for case in CASES
                if case != "test_audio" or track in DEFAULT_TRACKS]


@pytest.mark.parametrize("track, case", GREEDY_CASES)
def test_greedy_ids_match_transformers(track, case, tiny_ckpt, audio):
    model, ckpt = track_model(track, tiny_ckpt)
    inputs = inputs_for(ckpt, [audio[name] for name in CASES[case]])
    if case == "45s_two_windows":
        assert inputs.input_features.shape[0] == 2
    expected = hf_generate(hf_model(tiny_ckpt), inputs, NEW_TOKENS, NEW_TOKENS, ckpt.config.eos_token_ids)
    ours = model.generate(inputs, NEW_TOKENS, NEW_TOKENS)
    assert all(len(row) == NEW_TOKENS for row in expected)
    assert len({t for row in expected for t in row}) > 3, "degenerate reference: weights too small"
    assert ours == expected


@pytest.mark.parametrize("track", DEFAULT_TRACKS)
@pytest.mark.parametrize("launch_ahead", [False, True])
def test_natural_stop_at_eos_matches_transformers(track, launch_ahead, tiny_ckpt, audio):
    """Without min_new_tokens a row stops at its first eos (kept) and the batch when all rows stop; with each
    step queued before the token of the one before is read (a GPU's default) too."""
    model, ckpt = track_model(track, tiny_ckpt)
    model.launch_ahead = launch_ahead
    inputs = inputs_for(ckpt, [audio["short"], audio["other"]])
    expected = hf_generate(hf_model(tiny_ckpt), inputs, 48, 0, ckpt.config.eos_token_ids)
    assert model.generate(inputs, 48) == expected


@pytest.mark.parametrize("track", DEFAULT_TRACKS)
@pytest.mark.parametrize("variant", ["tiny_ckpt_sharded_bf16", "tiny_ckpt_sharded_fp16", "tiny_ckpt_tied"])
def test_storage_variants_match_transformers(track, variant, request, audio):
    """Sharded bf16 / fp16 storage upcast to fp32, and a tied lm_head, load and decode like transformers."""
    ckpt_dir = request.getfixturevalue(variant)
    model, ckpt = track_model(track, ckpt_dir)
    inputs = inputs_for(ckpt, [audio["short"]])
    expected = hf_generate(hf_model(ckpt_dir), inputs, NEW_TOKENS, NEW_TOKENS, ckpt.config.eos_token_ids)
    assert model.generate(inputs, NEW_TOKENS, NEW_TOKENS) == expected


@pytest.mark.parametrize("track", TRACKS)
@torch.no_grad()
def test_bfloat16_prefill_logits_close_to_transformers(track, tiny_ckpt, audio):
    """bf16 rounds differently per kernel (and per CPU: torch's own bf16 sums change with the
    instruction set), so judge against transformers' own bf16 error: the track's bf16 logits sit no
    farther from transformers' bf16 ones than those sit from fp32 (two bf16 runs differ by no more
    than bf16 itself errs), and no farther from fp32 than transformers' bf16 does."""
    model, ckpt = track_model(track, tiny_ckpt, "bf16")
    inputs = inputs_for(ckpt, [audio["short"]])
    logits = model.prefill_logits(inputs)
    assert logits.dtype == torch.bfloat16
    hf_bf16 = hf_model(tiny_ckpt, torch.bfloat16)(**hf_kwargs(inputs, torch.bfloat16)).logits
    hf_fp32 = hf_model(tiny_ckpt, torch.float32)(**hf_kwargs(inputs)).logits
    bf16_error = rel_err(hf_bf16, hf_fp32)
    assert 0 < bf16_error < 0.1, "degenerate comparison"
    assert rel_err(logits, hf_bf16) <= bf16_error
    assert rel_err(logits, hf_fp32) <= 1.5 * bf16_error + 1e-2
