"""A tiny random GLM-ASR checkpoint, for runs that need no download: ``--model tiny``, the tests and
the demo's "random weights (tiny, CPU-friendly)" choice.

The checkpoint is written by ``transformers`` itself (``save_pretrained``), so it has exactly the
on-disk layout (config.json, safetensors key names, processor files) that a real
``zai-org/GLM-ASR-Nano-2512`` download has, only tiny (two 64-wide layers per stack, a byte-level BPE
vocabulary of about 400 tokens trained here) and random. The weights are re-initialised with a
seeded generator at a scale that makes greedy decoding non-degenerate (varied tokens, clear top-1
margins); the text it decodes is meaningless, and config.json says so (the key
``glm_asr_course.model.checkpoint.RANDOM_WEIGHTS_MARK``): runs on it check their ids against
transformers', not a transcript. (Clips to feed it: glm_asr_lab/derived_clips.py.)

    from glm_asr_course.reference.tiny_checkpoint import build_tiny_checkpoint, cached_tiny_checkpoint
    ckpt = build_tiny_checkpoint(tmp / "ckpt", sharded=True, storage_dtype="bfloat16")
    ckpt = cached_tiny_checkpoint()       # built once per version of this file, then reused

or from the shell::

    python -m glm_asr_course.reference.tiny_checkpoint OUT_DIR [--sharded] [--dtype bfloat16] [--tied] [--seed 0]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import pathlib
import shutil
import sys
import tempfile

import numpy as np

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TEST_AUDIO = REPO_ROOT / "test_audio.wav"

# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
    "<|pad|>",
]
EOS_TOKENS = ["<|endoftext|>", "<|user|>", "<|observation|>"]
AUDIO_TOKEN = "<|pad|>"
PAD_TOKEN = "<|endoftext|>"  # NOT <|pad|>: that one is the audio placeholder.
TRANSCRIBE_PROMPT = "Please transcribe this audio into text"

TRAINING_SENTENCES = [
    "CONCORD RETURNED TO ITS PLACE AMIDST THE TENTS",
    "concord returned to its place amidst the tents",
    "Concord returned to its place amidst the tents.",
    TRANSCRIBE_PROMPT,
    "please transcribe this audio into text",
    "The quick brown fox jumps over the lazy dog.",
    "He hoped there would be stew for dinner, turnips and carrots and bruised potatoes.",
    "Stuff it into you, his belly counselled him.",
    "After early nightfall the yellow lamps would light up, here and there, the squalid quarter.",
    "Hello, world! Speech recognition turns audio into text, one token at a time.",
    "It was the best of times, it was the worst of times.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 2025.",
]

# One user turn: audio items render as an audio span, a text item that follows an
# audio item re-opens a user turn (that is the GLM-ASR prompt layout), e.g. for
# [audio, text] + add_generation_prompt:
#   <|user|>\n<|begin_of_audio|><|pad|><|end_of_audio|><|user|>\nPlease transcribe this audio into text<|assistant|>\n
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|' + message['role'] + '|>\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- set ns = namespace(prev_audio=false) -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'audio' -%}"
    "{{- '<|begin_of_audio|><|pad|><|end_of_audio|>' -}}"
    "{%- set ns.prev_audio = true -%}"
    "{%- elif item['type'] == 'text' -%}"
    "{%- if ns.prev_audio -%}{{- '<|' + message['role'] + '|>\\n' -}}{%- endif -%}"
    "{{- item['text'] -}}"
    "{%- set ns.prev_audio = false -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)

EXPECTED_PROMPT = (
    "<|user|>\n<|begin_of_audio|><|pad|><|end_of_audio|><|user|>\n"
    "Please transcribe this audio into text<|assistant|>\n"
)


def build_tokenizer():
    """A byte-level BPE tokenizer trained in code, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import TokenizersBackend

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(TRAINING_SENTENCES, trainer=trainer)
    # Special tokens go at the end of the vocabulary, like in the real checkpoint.
    tok.add_special_tokens(SPECIAL_TOKENS)
    return TokenizersBackend(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        pad_token=PAD_TOKEN,
        padding_side="left",
    )


def build_processor(tokenizer):
    from transformers import GlmAsrProcessor, WhisperFeatureExtractor

    fe = WhisperFeatureExtractor(
        feature_size=128,
        sampling_rate=16000,
        hop_length=160,
        chunk_length=30,
        n_fft=400,
        return_attention_mask=True,
        padding_value=0.0,
    )
    return GlmAsrProcessor(
        feature_extractor=fe,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        audio_token=AUDIO_TOKEN,
        default_transcription_prompt=TRANSCRIBE_PROMPT,
    )


# --------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------

_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def build_config(tokenizer, *, tie_word_embeddings: bool, audio: dict | None = None, text: dict | None = None):
    """The tiny GlmAsrConfig; ``audio`` / ``text`` override entries of its encoder / decoder config
    (awkward shapes: a head_dim that is not a power of two, odd hidden and intermediate sizes)."""
    from transformers import GlmAsrConfig

    n_tok = len(tokenizer)
    vocab_size = ((n_tok + 7) // 8) * 8
    eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in EOS_TOKENS]
    audio_id = tokenizer.convert_tokens_to_ids(AUDIO_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    audio_config = dict(
        model_type="glmasr_encoder",
        hidden_size=64,
        intermediate_size=256,  # = 4 * hidden: the projector consumes 4 merged frames
        num_hidden_layers=2,
        num_attention_heads=4,
        num_mel_bins=128,
    )
    text_config = dict(
        model_type="llama",
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_theta": 5000.0, "rope_type": "default"},
        max_position_embeddings=8192,
        eos_token_id=eos_ids,
        pad_token_id=pad_id,
        bos_token_id=None,
        tie_word_embeddings=tie_word_embeddings,
    )
    audio_config.update(audio or {})
    text_config.update(text or {})
    return GlmAsrConfig(
        audio_config=audio_config,
        text_config=text_config,
        audio_token_id=audio_id,
        tie_word_embeddings=tie_word_embeddings,
    )


# Init scales (weights are N(0, gain / sqrt(fan_in)) unless noted).  Chosen by a small sweep over
# seeds 0-3 so that greedy decoding of 30 tokens gives 15-28 distinct ids for short/other/long45
# clips in both the tied and the untied model, depends on the audio, and has top-2 logit gaps
# that are mostly >1e-2 (min over a run ~5e-3).  Notes:
#  - "embed" is a plain std.  A small embedding keeps the token's own embedding from dominating
#    the residual stream; with std ~1 the tied model just repeats one token forever.
#  - "text_qk"/"audio_qk" sharpen attention so outputs depend on content (audio), not averages.
#  - "final_norm" is the mean (and 10x the noise std) of the last RMSNorm weight: it sets the
#    logit spread for the tied and untied models alike.
INIT_SCALES = {"embed": 0.125, "linear": 1.0, "text_qk": 3.0, "audio_qk": 2.0, "lm_head": 1.0, "final_norm": 4.0}


def _reinit_(model, seed: int) -> None:
    """Seeded re-initialisation at a scale where greedy decoding is not degenerate."""
    import torch
    from torch import nn

    gen = torch.Generator().manual_seed(seed)

    def normal_(t, std, mean=0.0):
        with torch.no_grad():
            t.copy_(torch.randn(t.shape, generator=gen, dtype=torch.float32) * std + mean)

    emb = model.get_input_embeddings()
    modules = sorted(model.named_modules(), key=lambda kv: kv[0])
    # the embedding first, so that a tied lm_head is always initialised as an embedding
    modules.sort(key=lambda kv: kv[1] is not emb)
    done = set()
    for name, mod in modules:
        params = dict(mod.named_parameters(recurse=False))
        if not params:
            continue
        cls = type(mod).__name__
        for pname, p in sorted(params.items()):
            if id(p) in done:  # tied lm_head: already initialised through the embedding
                continue
            done.add(id(p))
            if isinstance(mod, nn.Embedding):
                normal_(p, INIT_SCALES["embed"])
            elif isinstance(mod, (nn.Linear, nn.Conv1d)) and pname == "weight":
                fan_in = p.shape[1] * (p.shape[2] if p.dim() == 3 else 1)
                gain = INIT_SCALES["linear"]
                leaf = name.rsplit(".", 1)[-1]
                if name.startswith("model.language_model") and leaf in ("q_proj", "k_proj"):
                    gain = INIT_SCALES["text_qk"]
                elif leaf in ("q_proj", "k_proj"):
                    gain = INIT_SCALES["audio_qk"]
                elif name == "lm_head":
                    gain = INIT_SCALES["lm_head"]
                normal_(p, gain / math.sqrt(fan_in))
            elif (isinstance(mod, nn.LayerNorm) or "RMSNorm" in cls) and pname == "weight":
                g = INIT_SCALES["final_norm"] if name == "model.language_model.norm" else 1.0
                normal_(p, 0.1 * g, mean=g)
            elif pname == "bias":
                normal_(p, 0.1)
            else:  # pragma: no cover - a parameter kind we did not expect
                raise RuntimeError(f"don't know how to init {name}.{pname} ({cls})")


def _state_dict_for_compare(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def build_tiny_checkpoint(
    out_dir,
    *,
    sharded: bool = False,
    storage_dtype: str = "float32",
    tie_word_embeddings: bool = False,
    seed: int = 0,
    audio: dict | None = None,
    text: dict | None = None,
) -> pathlib.Path:
    """Write a tiny random GlmAsrForConditionalGeneration + GlmAsrProcessor to ``out_dir``.

    ``storage_dtype``: "float32" | "bfloat16" | "float16" (weights are cast before saving).
    ``sharded``: save with a max_shard_size of ~1/5 of the model (6 shards + index json).
    Same ``seed`` => same weights (up to the storage rounding) for every variant, except
    that a tied model has no separate lm_head.  Verifies the round trip (AutoProcessor,
    chat template, from_pretrained state dict equality) and raises RuntimeError if broken.
    ``audio`` / ``text``: overrides of the encoder / decoder config (see ``build_config``).
    Returns ``pathlib.Path(out_dir)``.
    """
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return _build(pathlib.Path(out_dir), sharded, storage_dtype, tie_word_embeddings, seed, audio, text)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()


def _build(out, sharded, storage_dtype, tie_word_embeddings, seed, audio, text) -> pathlib.Path:
    import torch
    from transformers import AutoProcessor, GlmAsrForConditionalGeneration, GlmAsrProcessor

    from glm_asr_course.model.checkpoint import RANDOM_WEIGHTS_MARK

    if storage_dtype not in _DTYPES:
        raise ValueError(f"storage_dtype must be one of {sorted(_DTYPES)}, got {storage_dtype!r}")
    dtype = getattr(torch, storage_dtype)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer()
    processor = build_processor(tokenizer)
    config = build_config(tokenizer, tie_word_embeddings=tie_word_embeddings, audio=audio, text=text)

    torch.manual_seed(seed)  # the constructor's own init; everything is overwritten below
    model = GlmAsrForConditionalGeneration(config).eval()
    _reinit_(model, seed)
    lm_w = model.lm_head.weight
    emb_w = model.get_input_embeddings().weight
    if tie_word_embeddings != (lm_w.data_ptr() == emb_w.data_ptr()):
        raise RuntimeError(f"lm_head tying is {lm_w.data_ptr() == emb_w.data_ptr()}, wanted {tie_word_embeddings}")
    model = model.to(dtype)
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    model.generation_config.eos_token_id = list(config.text_config.eos_token_id)
    model.generation_config.bos_token_id = None
    setattr(model.config, RANDOM_WEIGHTS_MARK, f"tiny random weights (seed {seed}) written by "
                                               "glm_asr_course/reference/tiny_checkpoint.py: the text they decode is meaningless")

    save_kwargs = {"safe_serialization": True}
    if sharded:
        total = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        save_kwargs["max_shard_size"] = max(1, total // 5)
    model.save_pretrained(out, **save_kwargs)
    processor.save_pretrained(out)

    # ---- verify the round trip ---------------------------------------------------------
    expected = _state_dict_for_compare(model)
    proc2 = AutoProcessor.from_pretrained(out)
    if not isinstance(proc2, GlmAsrProcessor):
        raise RuntimeError(f"AutoProcessor loaded {type(proc2).__name__}, expected GlmAsrProcessor")
    if proc2.audio_token_id != config.audio_token_id:
        raise RuntimeError("reloaded processor has a different audio token id")
    rendered = proc2.apply_chat_template(
        [[{"role": "user", "content": [{"type": "audio", "audio": np.zeros(16000, np.float32)},
                                       {"type": "text", "text": TRANSCRIBE_PROMPT}]}]],
        add_generation_prompt=True,
        tokenize=False,
    )
    rendered = rendered[0] if isinstance(rendered, list) else rendered
    if rendered != EXPECTED_PROMPT:
        raise RuntimeError(f"chat template renders {rendered!r}, expected {EXPECTED_PROMPT!r}")

    model2 = GlmAsrForConditionalGeneration.from_pretrained(out, dtype=dtype)
    got = model2.state_dict()
    if set(got) != set(expected):
        raise RuntimeError(f"reloaded keys differ: {sorted(set(got) ^ set(expected))}")
    for k, v in expected.items():
        g = got[k]
        if g.dtype != v.dtype or g.shape != v.shape or not torch.equal(g, v):
            raise RuntimeError(f"reloaded weight {k} differs from what was saved")
    tied2 = model2.lm_head.weight.data_ptr() == model2.get_input_embeddings().weight.data_ptr()
    if tied2 != tie_word_embeddings:
        raise RuntimeError(f"reloaded model tying is {tied2}, wanted {tie_word_embeddings}")
    return out


# --------------------------------------------------------------------------------------
# The cache
# --------------------------------------------------------------------------------------


def cache_root() -> pathlib.Path:
    """Where built checkpoints are kept: $GLM_ASR_CACHE, else $XDG_CACHE_HOME/glm_asr, else ~/.cache/glm_asr."""
    if os.environ.get("GLM_ASR_CACHE"):
        return pathlib.Path(os.environ["GLM_ASR_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "glm_asr"


# The name that stands for the cached tiny checkpoint where a checkpoint is asked for (--model tiny, the
# demo's field): the route that needs no GPU and no download.
TINY_MODEL = "tiny"


def model_or_tiny(model: str, log=None) -> str:
    """``model`` as given, or for TINY_MODEL the cached tiny checkpoint's directory (built on first use)."""
    return str(cached_tiny_checkpoint(log=log)) if model == TINY_MODEL else model


def cached_tiny_checkpoint(seed: int = 0, log=None) -> pathlib.Path:
    """The tiny checkpoint (one safetensors file, float32, untied) under ``cache_root()``, built on first use
    (``log``, when given, is told so: building takes about 10 s).

    The folder name carries a hash of this file and of the transformers version, so a change to
    the builder never serves a stale checkpoint. Building happens in a private folder renamed into
    place, so concurrent callers (two demo sessions, a test run) never see half a checkpoint.
    """
    import transformers

    fingerprint = hashlib.sha256(pathlib.Path(__file__).read_bytes() + transformers.__version__.encode())
    target = cache_root() / f"tiny-random-seed{seed}-{fingerprint.hexdigest()[:12]}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if log is not None:
        log(f"Building the tiny random checkpoint in {target} (once)")
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        build_tiny_checkpoint(staging, seed=seed)
        os.rename(staging, target)
    except OSError:
        if not target.is_dir():  # not the benign race (another caller renamed its copy first)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--sharded", action="store_true")
    ap.add_argument("--dtype", default="float32", choices=sorted(_DTYPES))
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = build_tiny_checkpoint(
        args.out_dir, sharded=args.sharded, storage_dtype=args.dtype, tie_word_embeddings=args.tied, seed=args.seed
    )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
