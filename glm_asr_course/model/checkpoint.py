"""Find a checkpoint, read its config and safetensors weights into one canonical name space.

Canonical names (what every track's weight_loader reads):
  encoder.conv{1,2}.{weight,bias}, encoder.layers.{i}.{input_layernorm,post_attention_layernorm}.{weight,bias},
  encoder.layers.{i}.self_attn.{q,k,v,o}_proj.{weight,bias} (k_proj has no bias), encoder.layers.{i}.mlp.fc{1,2}.*,
  encoder.norm.*, projector.linear_{1,2}.{weight,bias}, decoder.embed_tokens.weight,
  decoder.layers.{i}.{input_layernorm,post_attention_layernorm}.weight,
  decoder.layers.{i}.self_attn.{q,k,v,o}_proj.weight, decoder.layers.{i}.mlp.{gate,up,down}_proj.weight,
  decoder.norm.weight, lm_head.weight.
Weights are returned as CPU torch tensors (numpy has no bfloat16); tracks move them where they need.
"""

import json
import os
import re
from pathlib import Path

import torch

from glm_asr_course.model.config import ModelConfig
from glm_asr_course.errors import UserError

DEFAULT_MODEL = "zai-org/GLM-ASR-Nano-2512"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Stored layouts seen in the wild, each mapped onto the canonical prefix. The hub checkpoint uses the
# first family (language_model.model.*, language_model.lm_head); transformers 5 writes
# language_model.model.model.* when it saves; its in-memory modules use model.language_model.*.
_PREFIXES = [
    (r"^(?:model\.)?audio_tower\.", "encoder."),
    (r"^(?:model\.)?multi_modal_projector\.", "projector."),
    (r"^language_model\.model\.model\.", "decoder."),
    (r"^language_model\.model\.", "decoder."),
    (r"^model\.language_model\.", "decoder."),
    (r"^(?:language_model\.)?lm_head\.", "lm_head."),
]


# The layout the model's publishers replaced on 2025-12-27 (audio_encoder.whisper.*, audio_encoder.adapting.*,
# audio_encoder.audio_bos_eos_token, model.*, lm_head.*). transformers reads only today's layout and maps
# no old name, so no loader here guesses the renaming: such a checkpoint is refused, saying what to download.
OLD_FORMAT_PREFIX = "audio_encoder."


def old_format_error(model_dir) -> UserError:
    return UserError(f"{model_dir} is GLM-ASR-Nano-2512 in the weight format its publishers replaced on 2025-12-27 "
                     f"(audio_encoder.* tensors), which is not read here; download the current one with "
                     f"`hf download {DEFAULT_MODEL}` and leave --model out (or pass its directory)")


def stored_names(model_dir: Path) -> list[str]:
    """The tensor names of a checkpoint's safetensors files, from their headers (no tensor is read)."""
    from safetensors import safe_open

    names = []
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            names += list(f.keys())
    return names


def canonical_name(stored: str) -> str | None:
    for pattern, prefix in _PREFIXES:
        if re.match(pattern, stored):
            return re.sub(pattern, prefix, stored, count=1)
    return None


def transformers_name(canonical: str) -> str:
    """The name of a canonical tensor inside transformers' GlmAsrForConditionalGeneration.state_dict()."""
    for src, dst in (("encoder.", "model.audio_tower."), ("projector.", "model.multi_modal_projector."),
                     ("decoder.", "model.language_model."), ("lm_head.", "lm_head.")):
        if canonical.startswith(src):
            return dst + canonical[len(src):]
    raise KeyError(canonical)


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    e, d = cfg.encoder, cfg.decoder
    shapes = {
        "encoder.conv1.weight": (e.hidden_size, e.num_mel_bins, 3),
        "encoder.conv1.bias": (e.hidden_size,),
        "encoder.conv2.weight": (e.hidden_size, e.hidden_size, 3),
        "encoder.conv2.bias": (e.hidden_size,),
        "encoder.norm.weight": (e.hidden_size,),
        "encoder.norm.bias": (e.hidden_size,),
        "projector.linear_1.weight": (cfg.projector_hidden_size, e.intermediate_size),
        "projector.linear_1.bias": (cfg.projector_hidden_size,),
        "projector.linear_2.weight": (d.hidden_size, cfg.projector_hidden_size),
        "projector.linear_2.bias": (d.hidden_size,),
        "decoder.embed_tokens.weight": (d.vocab_size, d.hidden_size),
        "decoder.norm.weight": (d.hidden_size,),
        "lm_head.weight": (d.vocab_size, d.hidden_size),
    }
    e_attn = e.num_heads * e.head_dim
    for i in range(e.num_layers):
        p = f"encoder.layers.{i}."
        for norm in ("input_layernorm", "post_attention_layernorm"):
            shapes[p + norm + ".weight"] = (e.hidden_size,)
            shapes[p + norm + ".bias"] = (e.hidden_size,)
        for proj in ("q", "k", "v"):
            shapes[p + f"self_attn.{proj}_proj.weight"] = (e_attn, e.hidden_size)
        for proj in ("q", "v"):
            shapes[p + f"self_attn.{proj}_proj.bias"] = (e_attn,)
        shapes[p + "self_attn.o_proj.weight"] = (e.hidden_size, e_attn)
        shapes[p + "self_attn.o_proj.bias"] = (e.hidden_size,)
        shapes[p + "mlp.fc1.weight"] = (e.intermediate_size, e.hidden_size)
        shapes[p + "mlp.fc1.bias"] = (e.intermediate_size,)
        shapes[p + "mlp.fc2.weight"] = (e.hidden_size, e.intermediate_size)
        shapes[p + "mlp.fc2.bias"] = (e.hidden_size,)
    q_dim, kv_dim = d.num_heads * d.head_dim, d.num_kv_heads * d.head_dim
    for i in range(d.num_layers):
        p = f"decoder.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (d.hidden_size,)
        shapes[p + "post_attention_layernorm.weight"] = (d.hidden_size,)
        shapes[p + "self_attn.q_proj.weight"] = (q_dim, d.hidden_size)
        shapes[p + "self_attn.k_proj.weight"] = (kv_dim, d.hidden_size)
        shapes[p + "self_attn.v_proj.weight"] = (kv_dim, d.hidden_size)
        shapes[p + "self_attn.o_proj.weight"] = (d.hidden_size, q_dim)
        shapes[p + "mlp.gate_proj.weight"] = (d.intermediate_size, d.hidden_size)
        shapes[p + "mlp.up_proj.weight"] = (d.intermediate_size, d.hidden_size)
        shapes[p + "mlp.down_proj.weight"] = (d.hidden_size, d.intermediate_size)
    return shapes


class HubUnavailable(UserError):
    """The hub could not provide the checkpoint. The message speaks of the command-line options and,
    given ``route``, of what runs on this machine instead (glm_asr_course.command_line.route_without_hub); a
    program with other controls (the demo) words its own from ``model`` and ``reason``."""

    def __init__(self, model: str, reason: str, route: str | None = None):
        self.model, self.reason = model, reason
        super().__init__(f"cannot get {model} from the Hugging Face hub ({reason}); " + (
            route or "download it elsewhere and pass --model DIR, run on full-size random weights with "
                     "--random-weights, or on a tiny random checkpoint with --model tiny (nothing downloaded)"))


def resolve_model_dir(model: str, *, need_weights: bool = True) -> Path:
    """A local directory as given, or a hub id downloaded (or found in the cache) by huggingface_hub."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"--model {model}: directory has no config.json")
        return path
    if path.exists() or model.startswith((".", "/")) or model.count("/") != 1:
        raise UserError(f"--model {model}: not a directory and not a hub id like 'org/name'")
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.jinja", "*.txt", "*.model"] + (["*.safetensors"] if need_weights else [])
    try:
        return Path(snapshot_download(model, allow_patterns=patterns))
    except Exception as e:  # huggingface_hub raises many types: offline, not found, network, auth
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")
        why = "HF_HUB_OFFLINE is set and it is not in the local cache" if offline else type(e).__name__
        raise HubUnavailable(model, why) from None


def read_raw_config(model_dir: Path) -> dict:
    """config.json of a checkpoint directory, as stored; a UserError for the layout replaced on 2025-12-27."""
    try:
        raw = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"cannot read {Path(model_dir) / 'config.json'}: {e}") from None
    if "audio_config" not in raw and any(n.startswith(OLD_FORMAT_PREFIX) for n in stored_names(model_dir)):
        raise old_format_error(model_dir)
    return raw


def read_config(model_dir: Path) -> ModelConfig:
    return ModelConfig.from_dict(read_raw_config(model_dir))


# The config.json key with which this project marks the checkpoints of random weights it writes
# (glm_asr_course/reference/tiny_checkpoint.py): their text is meaningless, so no transcript can check a run on
# them; the runs check their ids against transformers' instead (glm_asr_course/verdict.py).
RANDOM_WEIGHTS_MARK = "glm_asr_random_weights"


def marked_random(raw_config: dict) -> bool:
    """Whether a checkpoint's config.json says it holds random weights built by this project."""
    return bool(raw_config.get(RANDOM_WEIGHTS_MARK))


def _weight_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (model_dir / s).is_file()]
        if missing:
            raise UserError(f"{model_dir}: shard(s) listed in the index are missing: {', '.join(missing)}")
        return [model_dir / s for s in shards]
    single = model_dir / "model.safetensors"
    if single.is_file():
        return [single]
    if any(model_dir.glob("*.bin")) or any(model_dir.glob("*.pt")):
        raise UserError(f"{model_dir}: only safetensors weights are loaded (found pickle .bin/.pt files)")
    raise UserError(f"{model_dir}: no model.safetensors or model.safetensors.index.json")


def load_weights(model_dir: Path, cfg: ModelConfig, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Read every tensor, rename to canonical names, check names and shapes, convert to ``dtype``."""
    from safetensors import SafetensorError, safe_open

    shapes = expected_shapes(cfg)
    weights: dict[str, torch.Tensor] = {}
    for file in _weight_files(Path(model_dir)):
        try:
            with safe_open(str(file), framework="pt") as f:
                for stored in f.keys():
                    name = canonical_name(stored)
                    if stored.startswith(OLD_FORMAT_PREFIX):
                        raise old_format_error(model_dir)
                    if name is None or name not in shapes:
                        raise UserError(f"{file.name}: unexpected tensor {stored!r}")
                    tensor = f.get_tensor(stored)
                    if tuple(tensor.shape) != shapes[name]:
                        raise UserError(
                            f"{file.name}: tensor {stored!r} has shape {tuple(tensor.shape)}, "
                            f"the config implies {shapes[name]}"
                        )
                    weights[name] = tensor.to(dtype)
        except SafetensorError as e:
            raise UserError(f"{file}: not a readable safetensors file ({e})") from None
    if "lm_head.weight" not in weights and "decoder.embed_tokens.weight" in weights:
        weights["lm_head.weight"] = weights["decoder.embed_tokens.weight"]  # tied
    missing = [k for k in shapes if k not in weights]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise UserError(f"{model_dir}: checkpoint lacks tensor {missing[0]!r} of shape {shapes[missing[0]]}{more}")
    return weights


# Init of the full-size random weights (matrices N(0, gain^2 / fan_in) unless noted), chosen with
# glm_asr_lab/tuning/tune_random_init.py (docs/performance.md has the runs): greedy decoding must produce many
# distinct ids (a model repeating one id passes parity checks it should fail) while staying well
# conditioned (two correct fp32 implementations, sdpa and eager attention, agree closely).
#  "embed"       plain std of the token embedding;
#  "linear"      gain of every matrix not named below;
#  "text_qk" / "audio_qk"  gains of the q and k projections (sharper attention follows the content);
#  "text_out"    gain of the decoder's o_proj and down_proj, the two writes into the residual stream:
#                how much each layer moves the hidden state away from the current token's embedding;
#  "lm_head"     gain of the output projection;
#  "final_norm"  mean (and 10x the noise std) of the last RMSNorm weight, which sets the logit spread.
RANDOM_INIT_SCALES = {"embed": 0.125, "linear": 1.0, "text_qk": 2.5, "audio_qk": 1.5, "text_out": 0.75,
                      "lm_head": 1.0, "final_norm": 2.0}


def random_weights(cfg: ModelConfig, dtype: torch.dtype, *, seed: int = 0, device: str = "cpu",
                   scales: dict | None = None) -> dict[str, torch.Tensor]:
    """Full-size random weights (vLLM's load_format=dummy): seeded, no download, decoding not degenerate.

    Scales from ``scales`` (default RANDOM_INIT_SCALES): matrices N(0, gain^2 / fan_in), norm weights
    near 1 (the final decoder norm near scales["final_norm"]), biases near 0, the embedding N(0,
    scales["embed"]^2). The random stream does not depend on the scales: two tables give the same
    weights up to each tensor's scale.
    """
    scales = RANDOM_INIT_SCALES if scales is None else scales
    gen = torch.Generator(device=device).manual_seed(seed)
    weights = {}
    for name, shape in expected_shapes(cfg).items():
        t = torch.empty(shape, dtype=torch.float32, device=device)
        if name.endswith("embed_tokens.weight"):
            t.normal_(0.0, scales["embed"], generator=gen)
        elif len(shape) > 1:
            fan_in = shape[1] * (shape[2] if len(shape) == 3 else 1)
            gain = scales["linear"]
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                gain = scales["text_qk"] if name.startswith("decoder.") else scales["audio_qk"]
            elif name.startswith("decoder.") and name.endswith(("o_proj.weight", "down_proj.weight")):
                gain = scales["text_out"]
            elif name == "lm_head.weight":
                gain = scales["lm_head"]
            t.normal_(0.0, gain * fan_in ** -0.5, generator=gen)
        elif "norm" in name and name.endswith(".weight"):
            mean = scales["final_norm"] if name == "decoder.norm.weight" else 1.0
            t.normal_(mean, 0.1 * mean, generator=gen)
        else:
            t.normal_(0.0, 0.1, generator=gen)
        weights[name] = t.to(dtype)
    if cfg.tie_word_embeddings:
        weights["lm_head.weight"] = weights["decoder.embed_tokens.weight"]
    return weights


def default_config_dict() -> dict:
    """transformers' own GlmAsrConfig defaults: the real model's sizes, used by --random-weights offline."""
    from transformers import GlmAsrConfig

    return GlmAsrConfig().to_dict()


def local_model_dir(model: str) -> Path | None:
    """The model's directory if it is local or already in the hub cache; never downloads."""
    if Path(model).expanduser().is_dir():
        return Path(model).expanduser()
    if model.count("/") == 1:
        from huggingface_hub import snapshot_download

        try:
            return Path(snapshot_download(model, local_files_only=True))
        except Exception:  # not cached: fine, random weights need nothing
            return None
    return None
