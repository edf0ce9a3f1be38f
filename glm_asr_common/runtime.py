"""Open a checkpoint (or random weights) and a track folder: what every entry point does first."""

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from . import checkpoint as ckpt
from .config import ModelConfig
from .errors import UserError
from .frontend import load_processor

REPO_ROOT = Path(__file__).resolve().parent.parent


def track_folders() -> list[str]:
    """Folders at the top level that hold a model implementation (glm_asr_*/model.py)."""
    return sorted(p.parent.name for p in REPO_ROOT.glob("glm_asr_*/model.py"))


def track_name(folder: str) -> str:
    """The track folder's name, or a UserError for a placeholder or an unknown folder."""
    name = Path(folder.rstrip("/")).name
    if name in track_folders():
        return name
    if name.startswith("glm_asr_") and (REPO_ROOT / name).is_dir():
        raise UserError(f"{name} is a placeholder with no implementation yet (see {name}/README.md)")
    raise UserError(f"unknown folder {folder!r}; choose one of: {', '.join(track_folders())}")


def import_track(folder: str):
    """The folder's model module; it must define load_model(cfg, weights, device, dtype)."""
    name = track_name(folder)
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    return importlib.import_module(f"{name}.model")


@dataclass
class Checkpoint:
    config: ModelConfig
    weights: dict[str, torch.Tensor]
    processor: object | None  # transformers GlmAsrProcessor, or None (synthetic prompt, no text)
    description: str


def _local_dir(model: str) -> Path | None:
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


def open_checkpoint(model: str, dtype: torch.dtype, *, random_weights: bool = False, seed: int = 0,
                    device: str = "cpu") -> Checkpoint:
    if not random_weights:
        model_dir = ckpt.resolve_model_dir(model)
        cfg = ckpt.read_config(model_dir)
        weights = ckpt.load_weights(model_dir, cfg, dtype)
        return Checkpoint(cfg, weights, load_processor(model_dir), str(model_dir))
    model_dir = _local_dir(model)
    if model_dir is not None and (model_dir / "config.json").is_file():
        cfg, source = ckpt.read_config(model_dir), f"config of {model_dir}"
    else:
        cfg, source = ModelConfig.from_dict(ckpt.default_config_dict()), "transformers' default GlmAsrConfig"
    weights = ckpt.random_weights(cfg, dtype, seed=seed, device=device)
    return Checkpoint(cfg, weights, load_processor(model_dir), f"random weights (seed {seed}), {source}")
