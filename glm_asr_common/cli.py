"""Command-line plumbing shared by benchmark_student.py, benchmark_detailed.py and demo.py."""

import argparse
import importlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from . import teaching
from .audio import SAMPLE_RATE, load_audio
from .checkpoint import DEFAULT_MODEL
from .errors import UserError
from .frontend import ASRInputs, prepare_inputs
from .precision import PRECISIONS, Precision, from_options
from .runtime import (PATH_MODULES, REPO_ROOT, Checkpoint, import_track, open_checkpoint, path_summary, resolve_path,
                      track_name, use_device)

DEFAULT_AUDIO = REPO_ROOT / "test_audio.wav"
DEFAULT_EXPECTED = REPO_ROOT / "test_audio.txt"


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors become one-line UserErrors (exit 2, no usage dump)."""

    def error(self, message):
        raise UserError(f"{message} (see --help)")


def int_at_least(minimum: int):
    """An argparse type: an integer no smaller than ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} must be at least {minimum}")
        return value
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def add_common_args(parser: argparse.ArgumentParser, runs_default: int):
    parser.add_argument("--audio", default=str(DEFAULT_AUDIO), help="audio file (wav/flac/ogg, any rate/channels)")
    parser.add_argument("--expected", help="expected transcription (default: test_audio.txt for the default audio)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="hub id or local checkpoint directory")
    parser.add_argument("--random-weights", action="store_true",
                        help="full-size seeded random weights, no download (timing only)")
    parser.add_argument("--precision", choices=list(PRECISIONS), default=None,
                        help="bf16; tf32 (fp32 with TF32 tensor-core matmuls, the default); fp32 (IEEE fp32 "
                             "throughout, comparable with transformers' fp32)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                        help="older spelling: float32 = --precision tf32, bfloat16 = --precision bf16")
    parser.add_argument("--path", choices=list(PATH_MODULES), default=None,
                        help="which implementation of the folder runs: fast (fused kernels), course (the "
                             "course kernels only), cupy (plain CuPy); default: the folder's first")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="default: cuda when available, else cpu")
    parser.add_argument("--warmup", type=non_negative_int, default=1)
    parser.add_argument("--runs", type=positive_int, default=runs_default)
    parser.add_argument("--max-new-tokens", type=positive_int, default=100)
    parser.add_argument("--min-new-tokens", type=non_negative_int, default=0,
                        help="ban eos until this many tokens exist (exact-length timing runs)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument("--allow-reference", metavar="KERNEL[,KERNEL...]|all",
                        help="template folders: run the example's kernel in place of these unwritten ones "
                             "(the results then say so; status never plain PASS)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")


def resolve_device(requested: str | None) -> str:
    if requested == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA GPU is visible to PyTorch")
    return requested or ("cuda" if torch.cuda.is_available() else "cpu")


def expected_text(args) -> str | None:
    if args.expected is not None:
        return args.expected
    if Path(args.audio).resolve() != DEFAULT_AUDIO.resolve() or not DEFAULT_EXPECTED.is_file():
        return None
    lines = [line.strip() for line in DEFAULT_EXPECTED.read_text().splitlines()]
    if "Expected transcription:" in lines:
        lines = lines[lines.index("Expected transcription:") + 1:]
    return next((line for line in lines if line), None)


def check_json_path(path: str | None):
    if path and not Path(path).resolve().parent.is_dir():
        raise UserError(f"--json {path}: directory {Path(path).parent} does not exist")


def write_json(path: str, data: dict):
    """Write atomically: a reader never sees half a file, a failure leaves no file."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write --json {path}: {e.strerror}") from None


def folder_student_kernels(folder: str) -> tuple[str, ...]:
    """The folder's STUDENT_KERNELS (from its __init__.py, which imports no kernels), or ()."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    return tuple(getattr(importlib.import_module(folder), "STUDENT_KERNELS", ()))


# Above this many weights a transcription in Triton's interpreter or the cuTile emulator takes hours:
# one full-width encoder layer over a 30 s window alone takes over a minute there, and the full-size
# model has 32 of them and 28 decoder layers. The tiny checkpoints have well under a million.
INTERPRETED_MAX_PARAMETERS = 50_000_000


def cpu_kernel_runner(folder: str, path: str) -> str | None:
    """What runs a track's kernels on a CPU: "the Triton interpreter", "the cuTile emulator", or None
    where the track is plain PyTorch or NumPy (the scratch track, the CuPy path)."""
    if path == "cupy":
        return None
    if "triton" in folder:
        return "the Triton interpreter"
    if "cutile" in folder:
        return "the cuTile emulator"
    return None


def parameter_count(cfg) -> int:
    from .checkpoint import expected_shapes

    return sum(torch.Size(shape).numel() for shape in expected_shapes(cfg).values())


def _refuse_interpreted_full_size(args, folder: str, path: str):
    """A one-line refusal, before any weight is read or made, of a CPU run that would take hours."""
    from .config import ModelConfig
    from .hf_reference import raw_config

    runner = cpu_kernel_runner(folder, path)
    if runner is None:
        return
    parameters = parameter_count(ModelConfig.from_dict(raw_config(args)))
    if parameters > INTERPRETED_MAX_PARAMETERS:
        raise UserError(
            f"on the CPU {folder} runs its kernels in {runner}, where this {parameters / 1e9:.1f} B-parameter "
            f"model takes hours a transcription; run glm_asr_scratch (PyTorch) instead, or try {folder} on a tiny "
            f"random checkpoint (meaningless text, real kernels): python -m glm_asr_common.tiny_checkpoint "
            f"/tmp/tiny && ./benchmark.sh {folder} --device cpu --model /tmp/tiny")


@dataclass
class Session:
    """A loaded track model, its checkpoint and one prepared input batch."""

    folder: str
    path: str
    path_summary: str
    device: str
    precision: Precision
    checkpoint: Checkpoint
    inputs: ASRInputs
    audio_seconds: float
    model: object
    load_seconds: float
    features_ms: float

    @property
    def dtype(self) -> torch.dtype:
        return self.precision.dtype


def open_session(args, folder: str, log=print) -> Session:
    """Validate arguments, load audio, checkpoint, features and the folder's model, in that order."""
    track_name(folder)
    path = resolve_path(folder, args.path)
    precision = from_options(args.precision, args.dtype)
    if args.min_new_tokens > args.max_new_tokens:
        raise UserError(f"--min-new-tokens {args.min_new_tokens} exceeds --max-new-tokens {args.max_new_tokens}")
    check_json_path(args.json)
    # Before the model loads: loading already launches kernels (the RoPE tables).
    name = folder.rstrip("/").split("/")[-1]
    teaching.allow_references(getattr(args, "allow_reference", None), folder_student_kernels(name), name)
    device = resolve_device(args.device)
    use_device(device)  # before anything imports Triton (transformers' processor can)
    if device == "cpu":
        _refuse_interpreted_full_size(args, name, path)

    audio = load_audio(args.audio)
    log(f"Loaded audio from {args.audio}")
    log(f"Audio duration: {len(audio) / SAMPLE_RATE:.2f}s")

    start = time.perf_counter()
    checkpoint = open_checkpoint(args.model, precision.dtype, random_weights=args.random_weights,
                                 device=device if args.random_weights else "cpu")
    track = import_track(folder, path, device)
    model = track.load_model(checkpoint.config, checkpoint.weights, device, precision)
    if device == "cuda":
        torch.cuda.synchronize()
    load_seconds = time.perf_counter() - start
    log(f"Model: {checkpoint.description} ({device}); load {load_seconds:.1f}s")
    log(f"Path: {path} ({path_summary(track)})")
    log(f"Precision: {precision}")

    start = time.perf_counter()
    inputs = prepare_inputs([audio], checkpoint.config, checkpoint.processor)
    features_ms = (time.perf_counter() - start) * 1000
    log(f"Feature extraction: {features_ms:.1f}ms ({inputs.input_features.shape[0]} window(s), "
        f"prompt {inputs.input_ids.shape[1]} tokens)")
    return Session(folder, path, path_summary(track), device, precision, checkpoint, inputs,
                   len(audio) / SAMPLE_RATE, model, load_seconds, features_ms)
