"""Model dimensions read from a checkpoint's config.json (GlmAsrConfig layout).

Every size, special token id and epsilon the tracks use comes from here, so a checkpoint with other
sizes (the tiny test ones, a future bigger model) runs unchanged.
"""

from dataclasses import dataclass

from glm_asr_course.errors import UserError


@dataclass(frozen=True)
class EncoderConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    head_dim: int
    num_mel_bins: int
    rope_theta: float
    rotary_dim: int
    max_positions: int
    # nn.LayerNorm in transformers' GlmAsrEncoderLayer is built with its default eps.
    layer_norm_eps: float = 1e-5


@dataclass(frozen=True)
class DecoderConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rotary_dim: int
    max_positions: int


@dataclass(frozen=True)
class ModelConfig:
    encoder: EncoderConfig
    decoder: DecoderConfig
    projector_hidden_size: int
    audio_token_id: int
    eos_token_ids: tuple[int, ...]
    tie_word_embeddings: bool

    @property
    def merge_factor(self) -> int:
        """Encoder frames concatenated into one audio token (transformers reshapes to intermediate_size)."""
        return self.encoder.intermediate_size // self.encoder.hidden_size

    @classmethod
    def from_dict(cls, cfg: dict) -> "ModelConfig":
        try:
            return _parse(cfg)
        except KeyError as e:
            raise UserError(f"config.json lacks {e.args[0]!r}; is this a GlmAsr checkpoint?") from None


def _rope(section: dict, head_dim: int, default_partial: float) -> tuple[float, int]:
    params = dict(section.get("rope_parameters") or {})
    rope_type = params.get("rope_type", "default")
    if rope_type != "default":
        raise UserError(f"rope_type {rope_type!r} is not supported (only 'default')")
    theta = params.get("rope_theta", section.get("rope_theta", 10000.0))
    partial = params.get("partial_rotary_factor", section.get("partial_rotary_factor", default_partial))
    return float(theta), int(head_dim * partial)


def _transformer_sizes(section: dict, *, default_partial: float) -> dict:
    """The sizes the encoder and the decoder share: widths, layers, heads, head_dim and the rotary part."""
    heads = section["num_attention_heads"]
    head_dim = section.get("head_dim") or section["hidden_size"] // heads
    theta, rotary_dim = _rope(section, head_dim, default_partial)
    return {"hidden_size": section["hidden_size"], "intermediate_size": section["intermediate_size"],
            "num_layers": section["num_hidden_layers"], "num_heads": heads, "head_dim": head_dim,
            "rope_theta": theta, "rotary_dim": rotary_dim}


def _require(section: str, key: str, value, allowed):
    if value not in allowed:
        raise UserError(f"{section}.{key} = {value!r} is not supported (expected one of {sorted(allowed)})")


def _parse(cfg: dict) -> ModelConfig:
    a, t = cfg["audio_config"], cfg["text_config"]
    _require("audio_config", "hidden_act", a.get("hidden_act", "gelu"), {"gelu"})
    _require("", "projector_hidden_act", cfg.get("projector_hidden_act", "gelu"), {"gelu"})
    _require("text_config", "hidden_act", t.get("hidden_act", "silu"), {"silu"})
    _require("text_config", "attention_bias", t.get("attention_bias", False), {False})
    _require("text_config", "mlp_bias", t.get("mlp_bias", False), {False})

    # transformers' GlmAsrEncoderConfig defaults partial_rotary_factor to 0.5; the Llama decoder to 1.0.
    encoder = EncoderConfig(**_transformer_sizes(a, default_partial=0.5),
                            num_mel_bins=a.get("num_mel_bins", 128),
                            max_positions=a.get("max_position_embeddings", 1500))
    decoder = DecoderConfig(**_transformer_sizes(t, default_partial=1.0),
                            vocab_size=t["vocab_size"],
                            num_kv_heads=t.get("num_key_value_heads") or t["num_attention_heads"],
                            rms_norm_eps=float(t["rms_norm_eps"]),
                            max_positions=t.get("max_position_embeddings", 8192))
    eos = t.get("eos_token_id", cfg.get("eos_token_id"))
    if eos is None:
        raise UserError("config.json names no eos_token_id (text_config.eos_token_id)")
    eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (eos,)
    if encoder.intermediate_size % encoder.hidden_size:
        raise UserError("audio_config.intermediate_size must be a multiple of hidden_size (frame merge)")
    return ModelConfig(
        encoder=encoder,
        decoder=decoder,
        projector_hidden_size=2 * decoder.hidden_size,
        audio_token_id=int(cfg["audio_token_id"]),
        eos_token_ids=eos_ids,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", t.get("tie_word_embeddings", False))),
    )
