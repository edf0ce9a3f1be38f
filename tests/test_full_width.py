"""The Triton example's course kernels at the real model's widths, in the interpreter, against torch
and transformers on the same random weights: the tile shapes and block limits that the tiny
checkpoints never reach.

- One full-width layer per stack at short sequence, against transformers' model with one layer per
  stack: the encoder (conv stem, a 1280-wide layer with 20 heads, the final norm) over 128 positions;
  the decoder (2048 wide, GQA 16/4, head_dim 128, a 6144-wide MLP) over a 12-token prompt, then one
  decode step (one-row GEMVs, the KV cache) through the final norm and the 59264-id lm_head.
- The row-wise kernels at the full encoder's row count (a 30 s window: 1500 positions, 20 heads),
  against torch: more rows than one block of Triton's largest size (2^20 elements) holds at these
  widths, so each kernel's rows-per-program choice must respect that limit.

The layer count changes how often kernels are launched, not the shapes they are launched with; the
whole full-size model would take hours in the interpreter.
"""

import pytest
import torch

from glm_asr_course.model.audio import load_audio
from glm_asr_course.model.checkpoint import default_config_dict, random_weights
from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.frontend import prepare_inputs
from glm_asr_course.reference.hf_model import HFTrack
from glm_asr_course.model.precision import PRECISIONS
from glm_asr_course.tracks import REPO_ROOT, import_track
from parity import rel_err

FOLDER = "glm_asr_triton_example"
MEL_FRAMES = 256  # → 128 encoder positions (the conv stem halves them)
PROMPT = 12
POSITIONS, HEADS = 1500, 20  # the encoder over one 30 s window
TOLERANCE = 1e-4  # IEEE fp32 on both sides; the orders of summation differ


@pytest.fixture(scope="module")
def one_layer():
    """(config, the course model, transformers' model, mel features): real widths, one layer per stack."""
    raw = default_config_dict()
    raw["audio_config"]["num_hidden_layers"] = 1
    raw["text_config"]["num_hidden_layers"] = 1
    cfg = ModelConfig.from_dict(raw)
    assert (cfg.encoder.hidden_size, cfg.decoder.hidden_size, cfg.decoder.vocab_size) == (1280, 2048, 59264)
    weights = random_weights(cfg, torch.float32, seed=0)
    hf = HFTrack(raw, weights, cfg, "cpu", PRECISIONS["fp32"]).hf
    model = import_track(FOLDER, "course", "cpu").load_model(cfg, weights, "cpu", PRECISIONS["fp32"])
    features = prepare_inputs([load_audio(REPO_ROOT / "test_audio.wav")], cfg).input_features[:, :, :MEL_FRAMES]
    return cfg, model, hf, torch.from_numpy(features.copy())


def test_full_width_encoder_layer(one_layer):
    _, model, hf, features = one_layer
    with torch.no_grad():
        expected = hf.model.audio_tower(features).last_hidden_state
    assert expected.shape == (1, MEL_FRAMES // 2, 1280)
    assert rel_err(model.encode_audio(features), expected) < TOLERANCE


def test_full_width_decoder_layer_prompt_and_one_step(one_layer):
    cfg, model, hf, _ = one_layer
    embeddings = torch.randn(PROMPT + 1, cfg.decoder.hidden_size, generator=torch.Generator().manual_seed(1))
    decoder = hf.model.language_model
    before_norm = []  # transformers' hidden state entering the final norm: the decoder layers' output
    hook = decoder.norm.register_forward_pre_hook(lambda module, args: before_norm.append(args[0][0]))
    try:
        with torch.no_grad():
            expected_last = hf.lm_head(decoder(inputs_embeds=embeddings[None]).last_hidden_state[0, -1:])
    finally:
        hook.remove()

    state = model._state_for(1, PROMPT + 1)
    state.kv_start.zero_()
    state.set_counters(0, PROMPT, False)  # the prompt fills cache slots 0 .. PROMPT - 1
    with torch.inference_mode():
        prompt = model.decoder_layers(embeddings[:PROMPT].clone(), state, PROMPT, decode=False)
        assert rel_err(prompt, before_norm[0][:PROMPT]) < TOLERANCE
        state.set_counters(PROMPT, PROMPT + 1, False)  # one new token at slot PROMPT, reading the cache
        step = model.decoder_layers(embeddings[PROMPT:].clone(), state, 1, decode=True)
        assert rel_err(model.logits(step), expected_last) < TOLERANCE


def test_row_kernels_at_the_full_encoders_row_count():
    import_track(FOLDER, "course", "cpu")  # selects the interpreter before the kernels' modules load
    from glm_asr_triton_example.attention import softmax_inplace
    from glm_asr_triton_example.layers import layernorm, rmsnorm

    gen = torch.Generator().manual_seed(2)
    x = torch.randn(POSITIONS, 1280, generator=gen)
    weight, bias = torch.rand(1280, generator=gen) + 0.5, torch.randn(1280, generator=gen)
    expected = torch.nn.functional.layer_norm(x, (1280,), weight, bias, 1e-5)
    assert rel_err(layernorm(x, weight, bias, 1e-5), expected) < TOLERANCE
    x, weight = torch.randn(POSITIONS, 2048, generator=gen), torch.rand(2048, generator=gen) + 0.5
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight
    assert rel_err(rmsnorm(x, weight, 1e-5), expected) < TOLERANCE
    scores = torch.randn(1, HEADS, POSITIONS, POSITIONS, generator=gen)
    expected = torch.softmax(scores, dim=-1)
    assert rel_err(softmax_inplace(scores), expected) < TOLERANCE
