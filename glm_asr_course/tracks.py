"""Open a checkpoint (or random weights) and a track folder: what every entry point does first."""

import ast
import importlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from glm_asr_course.model import checkpoint as ckpt
from glm_asr_course.model.config import ModelConfig
from glm_asr_course.errors import UserError
from glm_asr_course.model.frontend import load_processor

REPO_ROOT = Path(__file__).resolve().parents[1]
# Folders besides the repository's top level that hold track folders: the class grader's scratch copy
# of one student's folder (glm_asr_lab/grading/grading_worker.py) is one, added in the process that
# grades it.
EXTRA_TRACK_ROOTS: list[Path] = []


def add_track_root(directory: str | Path):
    """Make the track folders (glm_asr_*/model.py) inside ``directory`` known here (import_folder imports them)."""
    directory = Path(directory).resolve()
    if directory not in EXTRA_TRACK_ROOTS:
        EXTRA_TRACK_ROOTS.append(directory)


def track_directory(name: str) -> Path:
    """Where the track folder ``name`` lies: the repository's top level, else an added root."""
    for root in (REPO_ROOT, *EXTRA_TRACK_ROOTS):
        if (root / name / "model.py").is_file():
            return root / name
    return REPO_ROOT / name


def track_folders() -> list[str]:
    """Folders that hold a model implementation (glm_asr_*/model.py): at the top level, or in an added root."""
    return sorted({p.parent.name for root in (REPO_ROOT, *EXTRA_TRACK_ROOTS) for p in root.glob("glm_asr_*/model.py")})


def track_name(folder: str) -> str:
    """The track folder's name, or a UserError for a placeholder or an unknown folder."""
    name = Path(folder.rstrip("/")).name
    if name in track_folders():
        return name
    if name.startswith("glm_asr_") and (REPO_ROOT / name).is_dir():
        raise UserError(f"{name} is a placeholder with no implementation yet (see {name}/README.md)")
    raise UserError(f"unknown folder {folder!r}; choose one of: {', '.join(track_folders())}")


# What a track folder's kernels are written in (its __init__.py says: KERNEL_LANGUAGE = "triton"), and what
# runs them on a CPU; "torch": plain PyTorch, no kernels of its own.
CPU_RUNNERS = {"triton": "the Triton interpreter", "cutile": "the cuTile emulator", "torch": None}


def declared_language(init_source: str | bytes) -> str | None:
    """The KERNEL_LANGUAGE that a track folder's __init__.py assigns, or None. Read from the text, not
    imported: nothing may import triton before use_device has chosen its CPU interpreter, and the grader
    asks of a submission's files before they are written anywhere."""
    try:
        body = ast.parse(init_source).body
    except (SyntaxError, ValueError):
        return None
    for node in body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "KERNEL_LANGUAGE" for t in targets):
            value = getattr(node.value, "value", None)
            return value if value in CPU_RUNNERS else None
    return None


def kernel_language(folder: str | Path) -> str:
    """"triton", "cutile" or "torch": what a track folder's kernels are written in, as its __init__.py
    declares. ``folder``: a track folder's name, or its directory (a copy outside the known roots)."""
    directory = folder if isinstance(folder, Path) else track_directory(track_name(folder))
    init = directory / "__init__.py"
    language = declared_language(init.read_bytes()) if init.is_file() else None
    if language is None:
        raise UserError(f"{directory.name}/__init__.py does not declare its kernel language: it needs a line "
                        f"KERNEL_LANGUAGE = {' or '.join(repr(k) for k in CPU_RUNNERS)} (the example's has one)")
    return language


# A track's paths through the model, each a module of the folder, the default first where present:
# "fast" fused production kernels, "course" the course kernels (model.py: every track has it),
# "cupy" plain CuPy array operations (the cuTile example's baseline), "compiled" plain PyTorch with a
# static cache, CUDA graphs and torch.compile (glm_asr_scratch: the yardstick of the fast paths).
PATH_MODULES = {"fast": "fast_model", "course": "model", "cupy": "cupy_model", "compiled": "compiled_model"}


def track_paths(folder: str) -> list[str]:
    """The paths the folder implements, its default first."""
    name = track_name(folder)
    return [path for path, module in PATH_MODULES.items() if (track_directory(name) / f"{module}.py").is_file()]


def resolve_path(folder: str, path: str | None) -> str:
    """``path``, or the folder's default when None; a UserError naming the choices if it has no such path."""
    paths = track_paths(folder)
    if path is None:
        return paths[0]
    if path not in paths:
        raise UserError(f"{track_name(folder)} has no {path} path; its paths: {', '.join(paths)}")
    return path


def use_device(device: str):
    """Choose how kernels run before any track imports its kernel language: on a CPU, Triton's
    interpreter and the cuTile emulator (both read their switch when first imported)."""
    if device != "cpu":
        return
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise UserError("this process already runs Triton kernels on the GPU; use another process for --device cpu")
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ.setdefault("GLM_ASR_CUTILE", "emulate")
    from glm_asr_course.runtimes import triton_interpreter

    triton_interpreter.apply_fixes()


def import_track(folder: str, path: str | None = None, device: str | None = None):
    """The module of one path of the folder (default: its first); it defines
    load_model(cfg, weights, device, precision). ``device`` "cpu" selects the CPU runtimes first."""
    name = track_name(folder)
    if device is not None:
        use_device(device)
    import_folder(name)
    return importlib.import_module(f"{name}.{PATH_MODULES[resolve_path(name, path)]}")


def import_folder(name: str):
    """The track folder ``name`` as a package, imported from where track_directory finds it: the
    repository's top level (importable anyway once the project is installed) or an added root, such as
    the grader's scratch copy of a student's folder. Its modules then import by their dotted names."""
    if name in sys.modules:
        return sys.modules[name]
    directory = track_directory(name)
    spec = importlib.util.spec_from_file_location(name, directory / "__init__.py",
                                                  submodule_search_locations=[str(directory)])
    if spec is None:
        raise UserError(f"{directory} is not a track folder (it has no __init__.py)")
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    try:
        spec.loader.exec_module(package)
    except BaseException:
        del sys.modules[name]
        raise
    return package


def path_summary(module) -> str:
    """What a path is, for headers and reports: its module docstring's opening words, up to the first
    colon or full stop ("GLM-ASR on the course kernels")."""
    doc = " ".join((module.__doc__ or "").split("\n\n")[0].split())
    return re.split(r"[:.](?:\s|$)", doc, maxsplit=1)[0] if doc else module.__name__


@dataclass
class Checkpoint:
    config: ModelConfig
    weights: dict[str, torch.Tensor]
    processor: object | None  # transformers GlmAsrProcessor, or None (synthetic prompt, no text)
    description: str
    # Seeded random weights (--random-weights) or a checkpoint this project built (tiny_checkpoint.py
    # marks it): meaningless text, no transcript to check against.
    random_weights: bool


def open_checkpoint(model: str, dtype: torch.dtype, *, random_weights: bool = False, seed: int = 0,
                    device: str = "cpu") -> Checkpoint:
    if not random_weights:
        model_dir = ckpt.resolve_model_dir(model)
        raw = ckpt.read_raw_config(model_dir)
        cfg = ModelConfig.from_dict(raw)
        weights = ckpt.load_weights(model_dir, cfg, dtype)
        return Checkpoint(cfg, weights, load_processor(model_dir), str(model_dir), ckpt.marked_random(raw))
    model_dir = ckpt.local_model_dir(model)
    if model_dir is not None and (model_dir / "config.json").is_file():
        cfg, source = ckpt.read_config(model_dir), f"config of {model_dir}"
    else:
        cfg, source = ModelConfig.from_dict(ckpt.default_config_dict()), "transformers' default GlmAsrConfig"
    weights = ckpt.random_weights(cfg, dtype, seed=seed, device=device)
    return Checkpoint(cfg, weights, load_processor(model_dir), f"random weights (seed {seed}), {source}", True)
