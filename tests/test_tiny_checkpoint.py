"""Sanity checks that the tiny-checkpoint fixtures are what conftest says they are."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors import safe_open

from glm_asr_course.reference.tiny_checkpoint import AUDIO_TOKEN, EOS_TOKENS, EXPECTED_PROMPT, TRANSCRIBE_PROMPT
from glm_asr_lab.derived_clips import load_clip_16k


def _raw_tensors(ckpt):
    """{key: (dtype string, shape, file name)} over all safetensors files of a checkpoint."""
    out = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for k in st.keys():
                sl = st.get_slice(k)
                out[k] = (sl.get_dtype(), tuple(sl.get_shape()), f.name)
    return out


def _load_tensor(ckpt, key):
    for f in sorted(ckpt.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            if key in st.keys():
                return st.get_tensor(key)
    raise KeyError(key)


@pytest.fixture(scope="module")
def processor(tiny_ckpt):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_ckpt)


def test_processor_class_and_special_ids(processor, tiny_ckpt):
    from transformers import GlmAsrProcessor

    assert isinstance(processor, GlmAsrProcessor)
    cfg = json.loads((tiny_ckpt / "config.json").read_text())
    tok = processor.tokenizer
    assert processor.audio_token == AUDIO_TOKEN
    assert cfg["audio_token_id"] == processor.audio_token_id == tok.convert_tokens_to_ids(AUDIO_TOKEN)
    assert cfg["text_config"]["eos_token_id"] == [tok.convert_tokens_to_ids(t) for t in EOS_TOKENS]
    assert tok.pad_token_id != processor.audio_token_id
    assert cfg["text_config"]["vocab_size"] % 8 == 0 and cfg["text_config"]["vocab_size"] >= len(tok)
    assert cfg["text_config"]["rms_norm_eps"] == 1e-6
    assert cfg["text_config"]["rope_parameters"]["rope_theta"] == 5000.0


@pytest.mark.parametrize("via", ["transcription_request", "chat_template"])
def test_prompt_renders_exact_template(processor, clips, via):
    audio = load_clip_16k(clips["short"])
    if via == "transcription_request":
        inputs = processor.apply_transcription_request(audio)
    else:
        conv = [{"role": "user", "content": [{"type": "audio", "audio": audio},
                                             {"type": "text", "text": TRANSCRIBE_PROMPT}]}]
        inputs = processor.apply_chat_template(conv, tokenize=True, add_generation_prompt=True, return_dict=True)
    text = processor.tokenizer.decode(inputs["input_ids"][0], skip_special_tokens=False)
    collapsed = re.sub(r"(?:<\|pad\|>)+", "<|pad|>", text)
    assert collapsed == EXPECTED_PROMPT
    # and without tokenization, the template itself
    conv = [{"role": "user", "content": [{"type": "audio", "audio": audio},
                                         {"type": "text", "text": TRANSCRIBE_PROMPT}]}]
    assert processor.apply_chat_template(conv, tokenize=False, add_generation_prompt=True) == EXPECTED_PROMPT


def test_audio_token_count_matches(processor, clips):
    auds = [load_clip_16k(clips[k]) for k in ("short", "other", "long45")]
    inputs = processor.apply_transcription_request(auds)
    n_pad = (inputs["input_ids"] == processor.audio_token_id).sum(-1)
    # windows per sample: 1, 1, 2 -> group the per-window mask lengths back per sample
    win_len = inputs["input_features_mask"].sum(-1)
    assert inputs["input_features"].shape == (4, 128, 3000)
    per_sample = torch.stack([win_len[0], win_len[1], win_len[2] + win_len[3]])
    expected = processor._get_audio_token_length(per_sample)
    assert n_pad.tolist() == expected.tolist()
    # independent formula: mel frames -> conv stride 2 -> merge 4
    frames = per_sample
    after_conv = (frames - 1) // 2 + 1
    assert n_pad.tolist() == ((after_conv - 4) // 4 + 1).tolist()
    assert n_pad[0] > 30  # 3.5 s of speech


def test_long45_gives_two_windows(processor, clips):
    audio = load_clip_16k(clips["long45"])
    assert len(audio) == 45 * 16000
    inputs = processor.apply_transcription_request(audio)
    assert inputs["input_features"].shape[0] == 2
    mask = inputs["input_features_mask"]
    assert mask[0].sum() == 3000 and 0 < mask[1].sum() < 3000


def test_clip_files(clips):
    info = {k: sf.info(str(p)) for k, p in clips.items()}
    assert (info["short"].samplerate, info["short"].channels, info["short"].subtype) == (22050, 2, "PCM_16")
    assert 3.4 < info["short"].duration < 3.6
    assert (info["long45"].samplerate, info["long45"].channels) == (16000, 1)
    assert info["long45"].frames == 45 * 16000
    assert (info["other"].samplerate, info["other"].channels) == (16000, 1)
    assert 4.5 < info["other"].duration < 5.5
    short = load_clip_16k(clips["short"])
    assert abs(len(short) - 56080) <= 2
    assert np.isfinite(short).all() and 0.05 < np.abs(short).max() <= 1.0


def test_sharded_layout(tiny_ckpt_sharded_bf16):
    index = json.loads((tiny_ckpt_sharded_bf16 / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3
    assert sorted(p.name for p in tiny_ckpt_sharded_bf16.glob("*.safetensors")) == shards
    assert not (tiny_ckpt_sharded_bf16 / "model.safetensors").exists()


def test_bf16_storage(tiny_ckpt_sharded_bf16, tiny_ckpt):
    raw = _raw_tensors(tiny_ckpt_sharded_bf16)
    assert {d for d, _, _ in raw.values()} == {"BF16"}
    assert json.loads((tiny_ckpt_sharded_bf16 / "config.json").read_text())["dtype"] == "bfloat16"
    raw32 = _raw_tensors(tiny_ckpt)
    assert {d for d, _, _ in raw32.values()} == {"F32"}
    # same seed -> the bf16 checkpoint is the fp32 one rounded
    assert set(raw) == set(raw32)
    k = next(iter(raw))
    assert torch.equal(_load_tensor(tiny_ckpt, k).to(torch.bfloat16), _load_tensor(tiny_ckpt_sharded_bf16, k))


def test_key_layout_and_tying(tiny_ckpt, tiny_ckpt_tied):
    raw = _raw_tensors(tiny_ckpt)
    prefixes = {k.split(".layers.")[0] if ".layers." in k else k.rsplit(".", 2)[0] for k in raw}
    print("raw safetensors prefixes:", sorted(prefixes))
    lm = [k for k in raw if "lm_head" in k]
    emb = [k for k in raw if "embed_tokens" in k]
    assert len(lm) == 1 and len(emb) == 1, (lm, emb)
    assert raw[lm[0]][1] == raw[emb[0]][1]
    assert not torch.equal(_load_tensor(tiny_ckpt, lm[0]), _load_tensor(tiny_ckpt, emb[0]))
    assert all(k.startswith(("audio_tower.", "multi_modal_projector.", "language_model.")) for k in raw)

    raw_t = _raw_tensors(tiny_ckpt_tied)
    assert not [k for k in raw_t if "lm_head" in k]
    assert len([k for k in raw_t if "embed_tokens" in k]) == 1
    assert json.loads((tiny_ckpt_tied / "config.json").read_text())["tie_word_embeddings"] is True


@pytest.mark.parametrize("which", ["tiny_ckpt", "tiny_ckpt_tied"])
def test_hf_greedy_is_not_degenerate(request, processor, clips, which):
    from transformers import GlmAsrForConditionalGeneration

    ckpt = request.getfixturevalue(which)
    model = GlmAsrForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32).eval()
    inputs = processor.apply_transcription_request(load_clip_16k(clips["short"]))
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=30, min_new_tokens=30, do_sample=False,
                             output_scores=True, return_dict_in_generate=True)
    new = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    assert len(new) == 30
    assert len(set(new)) >= 5, new
    gaps = torch.stack([s[0].topk(2).values for s in out.scores])
    gaps = gaps[:, 0] - gaps[:, 1]
    assert (gaps > 1e-3).float().mean() >= 0.9, gaps
