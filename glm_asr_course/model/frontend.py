"""Audio → model inputs (features, prompt ids) and generated ids → text.

With a checkpoint directory that holds a processor, everything comes from transformers'
``GlmAsrProcessor.apply_transcription_request``, so features, prompt and audio-token count are the
official pipeline's, long audio split into 30 s windows included. Without one (``--random-weights``
offline) a synthetic prompt of the real prompt's shape is built; see ``synthetic_inputs``.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glm_asr_course.model.audio import SAMPLE_RATE
from glm_asr_course.model.config import ModelConfig
from glm_asr_course.errors import UserError

WINDOW_SECONDS = 30
HOP_LENGTH = 160


@dataclass
class ASRInputs:
    """Everything a track needs for one batch, as numpy arrays (no framework types at the boundary).

    input_features       (n_windows, n_mels, n_frames) float32: log-mel windows of every audio, in order
    input_features_mask  (n_windows, n_frames) int64: 1 on frames that hold audio
    input_ids            (batch, prompt_len) int64, left-padded
    attention_mask       (batch, prompt_len) int64: 0 on left padding
    audio_index          (batch, prompt_len) int64: −1 for text tokens; for an audio placeholder, the
                         row of the flattened (n_windows · tokens_per_window) projector output it takes
    """

    input_features: np.ndarray
    input_features_mask: np.ndarray
    input_ids: np.ndarray
    attention_mask: np.ndarray
    audio_index: np.ndarray

    @property
    def batch_size(self) -> int:
        return self.input_ids.shape[0]

    @property
    def pad_lengths(self) -> np.ndarray:
        """Left-padding tokens per row: keys before this index are masked."""
        return (self.attention_mask == 0).sum(axis=1).astype(np.int64)


def audio_tokens_per_window(frames: np.ndarray, merge_factor: int) -> np.ndarray:
    """Audio tokens each window yields: conv (k3,p1,s1), conv (k3,p1,s2), then merge of ``merge_factor`` frames."""
    lengths = np.asarray(frames, dtype=np.int64)
    for stride in (1, 2):
        lengths = (lengths + 2 * 1 - 3) // stride + 1  # padding 1, kernel 3
    return (lengths - merge_factor) // merge_factor + 1


def audio_tokens_of(num_samples: int, cfg: ModelConfig) -> np.ndarray:
    """Audio tokens of each 30 s window of a 16 kHz audio of ``num_samples`` samples."""
    window = WINDOW_SECONDS * SAMPLE_RATE
    starts = range(0, max(num_samples, 1), window)
    frames = [-(-min(window, num_samples - start) // HOP_LENGTH) for start in starts]
    return audio_tokens_per_window(np.array(frames), cfg.merge_factor)


def _audio_index(input_ids, features_mask, cfg: ModelConfig) -> np.ndarray:
    """Map each placeholder, in reading order, to the valid projector rows of the windows, in order."""
    n_windows, n_frames = features_mask.shape
    per_window = (n_frames // 2) // cfg.merge_factor
    valid = np.maximum(audio_tokens_per_window(features_mask.sum(-1), cfg.merge_factor), 0)
    rows = np.concatenate([w * per_window + np.arange(v) for w, v in enumerate(valid)]).astype(np.int64)
    is_audio = input_ids == cfg.audio_token_id
    if is_audio.sum() != rows.size:
        raise UserError(
            f"prompt has {int(is_audio.sum())} audio placeholder tokens but the audio yields {rows.size} embeddings"
        )
    index = np.full(input_ids.shape, -1, dtype=np.int64)
    index[is_audio] = rows
    return index


def check_audio_length(audio: np.ndarray, cfg: ModelConfig, name: str = "audio"):
    if audio_tokens_of(len(audio), cfg)[0] < 1:
        raise UserError(f"{name} is too short ({len(audio) / SAMPLE_RATE * 1000:.0f} ms) to yield one audio token")


def load_processor(model_dir: Path | None):
    """transformers' GlmAsrProcessor from the checkpoint directory, or None when it has no tokenizer."""
    if model_dir is None or not any((Path(model_dir) / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        return None
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(str(model_dir))
    except Exception as e:  # a broken processor folder can fail in many ways inside transformers
        raise UserError(f"cannot load the processor in {model_dir}: {e}") from None


def prepare_inputs(audios: list[np.ndarray], cfg: ModelConfig, processor=None) -> ASRInputs:
    for i, audio in enumerate(audios):
        check_audio_length(audio, cfg, name=f"audio #{i + 1}" if len(audios) > 1 else "audio")
    if processor is None:
        return synthetic_inputs(audios, cfg)
    batch = processor.apply_transcription_request([a for a in audios])
    features_mask = batch["input_features_mask"].numpy().astype(np.int64)
    input_ids = batch["input_ids"].numpy().astype(np.int64)
    return ASRInputs(
        input_features=batch["input_features"].numpy().astype(np.float32),
        input_features_mask=features_mask,
        input_ids=input_ids,
        attention_mask=batch["attention_mask"].numpy().astype(np.int64),
        audio_index=_audio_index(input_ids, features_mask, cfg),
    )


SYNTHETIC_PREFIX_LEN = 3  # <|user|> \n <|begin_of_audio|>
SYNTHETIC_SUFFIX_LEN = 12  # <|end_of_audio|> <|user|> \n "Please transcribe this audio into text" <|assistant|> \n


def synthetic_inputs(audios: list[np.ndarray], cfg: ModelConfig) -> ASRInputs:
    """Features from a Whisper feature extractor of the config's mel size; a prompt of the real shape.

    The prompt is ``SYNTHETIC_PREFIX_LEN`` text ids, one audio placeholder per audio token, then
    ``SYNTHETIC_SUFFIX_LEN`` text ids, left-padded across the batch. Text ids count up from 100,
    skipping the audio and eos ids, so timing runs see a prompt as long as the real one.
    """
    from transformers import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor(feature_size=cfg.encoder.num_mel_bins, sampling_rate=SAMPLE_RATE,
                                        hop_length=HOP_LENGTH, chunk_length=WINDOW_SECONDS)
    window = WINDOW_SECONDS * SAMPLE_RATE
    chunks, windows_per_audio = [], []
    for audio in audios:
        n = max(1, -(-len(audio) // window))
        windows_per_audio.append(n)
        chunks += [audio[i * window:(i + 1) * window] for i in range(n)]
    feats = extractor(chunks, sampling_rate=SAMPLE_RATE, padding="max_length", return_attention_mask=True,
                      return_tensors="np")
    features_mask = feats["attention_mask"].astype(np.int64)
    per_window = np.maximum(audio_tokens_per_window(features_mask.sum(-1), cfg.merge_factor), 0)
    reserved = {cfg.audio_token_id, *cfg.eos_token_ids}
    text_ids = [i for i in range(100, 100 + SYNTHETIC_PREFIX_LEN + SYNTHETIC_SUFFIX_LEN + len(reserved))
                if i not in reserved][: SYNTHETIC_PREFIX_LEN + SYNTHETIC_SUFFIX_LEN]
    text_ids = [i % cfg.decoder.vocab_size for i in text_ids]
    prompts, start = [], 0
    for n in windows_per_audio:
        n_audio = int(per_window[start:start + n].sum())
        start += n
        prompts.append(text_ids[:SYNTHETIC_PREFIX_LEN] + [cfg.audio_token_id] * n_audio + text_ids[SYNTHETIC_PREFIX_LEN:])
    length = max(len(p) for p in prompts)
    input_ids = np.zeros((len(prompts), length), dtype=np.int64)
    attention_mask = np.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):
        input_ids[row, length - len(prompt):] = prompt
        attention_mask[row, length - len(prompt):] = 1
    input_ids[attention_mask == 0] = text_ids[0]
    return ASRInputs(
        input_features=feats["input_features"].astype(np.float32),
        input_features_mask=features_mask,
        input_ids=input_ids,
        attention_mask=attention_mask,
        audio_index=_audio_index(input_ids, features_mask, cfg),
    )


def decode(processor, token_ids: list[int]) -> str:
    if processor is None:
        return ""
    return processor.batch_decode([token_ids], skip_special_tokens=True)[0].strip()
