"""Command-line plumbing shared by benchmark_student.py, benchmark_detailed.py and demo.py.

The argparse Namespace stays in the tools' main functions: they read add_common_args' options into one
RunOptions (RunOptions.from_args), and everything below takes that or the values it needs."""

import argparse
import gc
import json
import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import torch

from glm_asr_course.kernels import todo_kernels
from glm_asr_course.model import regions
from glm_asr_course.model.audio import SAMPLE_RATE, load_audio
from glm_asr_course.model.checkpoint import DEFAULT_MODEL, HubUnavailable
from glm_asr_course.errors import UserError
from glm_asr_course.timer import time_call
from glm_asr_course.model.frontend import ASRInputs, prepare_inputs
from glm_asr_course.model.precision import PRECISIONS, Precision, from_options
from glm_asr_course.reference.tiny_checkpoint import TINY_MODEL, model_or_tiny
from glm_asr_course.tracks import (CPU_RUNNERS, PATH_MODULES, REPO_ROOT, Checkpoint, import_folder, import_track, kernel_language,
                                    open_checkpoint, path_summary, resolve_path, track_name, use_device)

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
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="hub id, local checkpoint directory, or tiny: a tiny random checkpoint, built once "
                             "and cached (~/.cache/glm_asr or $GLM_ASR_CACHE), that runs on a CPU in seconds")
    parser.add_argument("--random-weights", action="store_true",
                        help="full-size seeded random weights, no download (meaningless text: the run is checked "
                             "by its ids against transformers' fp32 instead)")
    parser.add_argument("--precision", choices=list(PRECISIONS), default=None,
                        help="bf16; tf32 (fp32 with TF32 tensor-core matmuls, the default on a GPU); fp32 (IEEE "
                             "fp32 throughout, comparable with transformers' fp32; the default on a CPU, which "
                             "has no tensor cores). On random weights only an fp32 run must equal transformers' "
                             "fp32 ids (else exit 1); bf16 and tf32 round, which may flip a near-tie, so for them "
                             "the ids line is for information")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                        help="older spelling: float32 = --precision tf32, bfloat16 = --precision bf16")
    parser.add_argument("--path", choices=list(PATH_MODULES), default=None,
                        help="which implementation of the folder runs: fast (fused kernels), course (the "
                             "course kernels only), cupy (plain CuPy); default: the folder's first")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="default: cuda when available, else cpu")
    gpu, cpu = dict(GPU_RUN_DEFAULTS, runs=runs_default), CPU_RUN_DEFAULTS
    for option, kind, what in (("warmup", non_negative_int, "untimed runs first"), ("runs", positive_int, "timed runs"),
                               ("max_new_tokens", positive_int, "tokens generated at most")):
        parser.add_argument(f"--{option.replace('_', '-')}", type=kind, default=None,
                            help=f"{what} (default {gpu[option]}; {cpu[option]} on a CPU)")
    parser.set_defaults(gpu_runs=runs_default)
    parser.add_argument("--min-new-tokens", type=non_negative_int, default=0,
                        help="ban eos until this many tokens exist (exact-length timing runs)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument("--allow-reference", metavar="KERNEL[,KERNEL...]|all",
                        help="template folders: run the example's kernel in place of these unwritten ones "
                             "(the results then say so; status never plain PASS)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")


@dataclass(frozen=True)
class RunOptions:
    """add_common_args' options of one run. warmup, runs and max_new_tokens are None where not given,
    until settle_run_options fills them in for the device."""

    audio: str
    expected: str | None
    model: str
    random_weights: bool
    precision: str | None
    dtype: str | None
    path: str | None
    device: str | None
    warmup: int | None
    runs: int | None
    max_new_tokens: int | None
    min_new_tokens: int
    gpu_runs: int  # the tool's default --runs on a GPU
    json: str | None
    allow_reference: str | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "RunOptions":
        return cls(**{option.name: getattr(args, option.name) for option in fields(cls)})


# --warmup, --runs and --max-new-tokens when not given. On a CPU the kernels run in the Triton interpreter or
# the cuTile emulator, where the GPU's defaults (a warm-up and 3 runs of up to 100 tokens) take minutes even
# on the tiny checkpoint; a few tokens run every kernel and check the ids just as well.
GPU_RUN_DEFAULTS = {"warmup": 1, "max_new_tokens": 100}  # runs: each tool's own (add_common_args)
CPU_RUN_DEFAULTS = {"warmup": 0, "runs": 1, "max_new_tokens": 5}


def settle_run_options(options: RunOptions, device: str) -> tuple[RunOptions, str | None]:
    """``options`` with --warmup, --runs and --max-new-tokens left out filled with the device's defaults,
    and on a CPU the header line that says which defaults were taken (None where none was, as on a
    second call)."""
    defaults = CPU_RUN_DEFAULTS if device == "cpu" else dict(GPU_RUN_DEFAULTS, runs=options.gpu_runs)
    taken = [option for option in ("max_new_tokens", "warmup", "runs") if getattr(options, option) is None]
    options = replace(options, **{option: defaults[option] for option in taken})
    if options.max_new_tokens < options.min_new_tokens and "max_new_tokens" in taken:
        options = replace(options, max_new_tokens=options.min_new_tokens)
    if device != "cpu" or not taken:
        return options, None
    said = {"max_new_tokens": f"{options.max_new_tokens} new tokens",
            "warmup": "no warm-up" if options.warmup == 0 else f"{options.warmup} warm-up",
            "runs": f"{options.runs} run" + ("s" if options.runs > 1 else "")}
    return options, (f"CPU defaults: {', '.join(said[o] for o in taken)}; pass "
                     f"{'/'.join('--' + o.replace('_', '-') for o in taken)} to change")


def resolve_device(requested: str | None) -> str:
    if requested == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA GPU is visible to PyTorch")
    return requested or ("cuda" if torch.cuda.is_available() else "cpu")


def expected_text(audio: str, expected: str | None) -> str | None:
    """--expected, else the test clip's transcription when ``audio`` is the test clip."""
    if expected is not None:
        return expected
    if Path(audio).resolve() != DEFAULT_AUDIO.resolve() or not DEFAULT_EXPECTED.is_file():
        return None
    lines = [line.strip() for line in DEFAULT_EXPECTED.read_text().splitlines()]
    if "Expected transcription:" in lines:
        lines = lines[lines.index("Expected transcription:") + 1:]
    return next((line for line in lines if line), None)


def check_output_path(path: str | None, option: str = "--json"):
    if path and not Path(path).resolve().parent.is_dir():
        raise UserError(f"{option} {path}: directory {Path(path).parent} does not exist")


def write_output(path: str, text: str, option: str = "--json"):
    """Write atomically: a reader never sees half a file, a failure leaves no file."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write {option} {path}: {e.strerror}") from None


def write_json(path: str, data: dict):
    write_output(path, json.dumps(data, indent=2) + "\n")


def folder_student_kernels(folder: str) -> tuple[str, ...]:
    """The folder's STUDENT_KERNELS (from its __init__.py, which imports no kernels), or ()."""
    return tuple(getattr(import_folder(folder), "STUDENT_KERNELS", ()))


# Above this many weights a transcription in Triton's interpreter or the cuTile emulator takes hours:
# one full-width encoder layer over a 30 s window alone takes over a minute there, and the full-size
# model has 32 of them and 28 decoder layers. The tiny checkpoints have well under a million.
INTERPRETED_MAX_PARAMETERS = 50_000_000


def cpu_kernel_runner(folder: str, path: str) -> str | None:
    """What runs a track's kernels on a CPU: "the Triton interpreter", "the cuTile emulator", or None
    where the track is plain PyTorch or NumPy (the scratch track, the CuPy path)."""
    return None if path == "cupy" else CPU_RUNNERS[kernel_language(folder)]


def parameter_count(cfg) -> int:
    from glm_asr_course.model.checkpoint import expected_shapes

    return sum(torch.Size(shape).numel() for shape in expected_shapes(cfg).values())


def tiny_route(folder: str) -> str:
    """The command that runs ``folder``'s kernels on any machine, offline: a tiny random checkpoint."""
    return f"./benchmark.sh {folder} --model {TINY_MODEL}"


def route_without_hub(folder: str, device: str) -> str:
    """What runs ``folder`` on this machine when the model hub cannot: on a CPU only a tiny checkpoint is
    quick (the full-size kernels take hours there), on a GPU full-size random weights."""
    if device == "cpu":
        return (f"on a CPU the quick route is a tiny random checkpoint (meaningless text, ids checked against "
                f"transformers'): {tiny_route(folder)}")
    return ("run on full-size random weights with --random-weights (nothing downloaded; ids checked against "
            "transformers' fp32), or pass a checkpoint downloaded elsewhere with --model DIR")


@contextmanager
def naming_the_route(folder: str, device: str):
    """A HubUnavailable raised inside says what runs here instead (route_without_hub)."""
    try:
        yield
    except HubUnavailable as e:
        raise HubUnavailable(e.model, e.reason, route_without_hub(folder, device)) from None


def refuse_interpreted_full_size(model: str, random_weights: bool, folder: str, path: str):
    """A one-line refusal, before any weight is read or made, of a CPU run that would take hours."""
    from glm_asr_course.model.config import ModelConfig
    from glm_asr_course.reference.hf_model import raw_config

    runner = cpu_kernel_runner(folder, path)
    if runner is None:
        return
    parameters = parameter_count(ModelConfig.from_dict(raw_config(model, random_weights)))
    if parameters > INTERPRETED_MAX_PARAMETERS:
        raise UserError(
            f"on the CPU {folder} runs its kernels in {runner}, where this {parameters / 1e9:.1f} B-parameter "
            f"model takes hours a transcription; run them on a tiny random checkpoint instead (meaningless text, "
            f"ids checked against transformers'): {tiny_route(folder)} (or run glm_asr_scratch, PyTorch, at full "
            f"size: minutes)")


def precision_description(precision: Precision, device: str, folder: str, path: str) -> str:
    """What ``precision`` is where the run happens. A CPU has no tensor cores: there tf32 is whatever the
    CPU runtime makes of it (the cuTile emulator, and Triton's interpreter with the course's fix in
    runtimes/triton_interpreter.py, round matmul operands as tensor cores would; PyTorch and NumPy
    multiply in IEEE fp32)."""
    if device != "cpu" or precision.dot != "tf32" or precision.dtype != torch.float32:
        return precision.description
    runner = cpu_kernel_runner(folder, path)
    if runner is not None:
        how = f"{runner} rounds matmul operands to TF32 as they would"
    else:
        how = f"{'NumPy' if path == 'cupy' else 'PyTorch'} multiplies in IEEE fp32, so the results are fp32's"
    return f"fp32 weights and activations; a CPU has no tensor cores: {how}"


def open_run_checkpoint(options: RunOptions, dtype: torch.dtype, device: str) -> Checkpoint:
    """--model's checkpoint (or --random-weights, made on ``device``) with its weights in ``dtype``."""
    return open_checkpoint(options.model, dtype, random_weights=options.random_weights,
                           device=device if options.random_weights else "cpu")


@dataclass
class Session:
    """One prepared input batch, its checkpoint and (once load_track_model ran) the folder's model."""

    folder: str
    path: str
    device: str
    precision: Precision
    precision_description: str  # what the precision is on this device (precision_description())
    checkpoint: Checkpoint
    inputs: ASRInputs
    audio_seconds: float
    features_ms: float
    load_seconds: float  # reading the checkpoint, then building the model
    options: RunOptions  # settled for the device (settle_run_options)
    cpu_defaults: str | None = None  # the header line of the run options a CPU run defaulted to
    references: todo_kernels.References = field(default_factory=todo_kernels.References)  # --allow-reference's
    model: object = None
    path_summary: str = ""

    @property
    def dtype(self) -> torch.dtype:
        return self.precision.dtype


def prepare_session(options: RunOptions, folder: str, log=print) -> Session:
    """Validate arguments, then load the audio, the checkpoint and the features, in that order; no
    model yet (load_track_model), so a caller can still use them when a kernel of the model is a TODO."""
    track_name(folder)
    path = resolve_path(folder, options.path)
    device = resolve_device(options.device)
    options, cpu_defaults = settle_run_options(options, device)
    if options.min_new_tokens > options.max_new_tokens:
        raise UserError(f"--min-new-tokens {options.min_new_tokens} exceeds --max-new-tokens {options.max_new_tokens}")
    check_output_path(options.json)
    # Before the model loads: loading already launches kernels (the RoPE tables).
    name = folder.rstrip("/").split("/")[-1]
    references = todo_kernels.references_for(options.allow_reference, folder_student_kernels(name), name)
    todo_kernels.use(references)
    precision = from_options(options.precision, options.dtype, device)
    use_device(device)  # before anything imports Triton (transformers' processor can)
    options = replace(options, model=model_or_tiny(options.model, log=log))  # imports transformers: after use_device
    if device == "cpu":
        with naming_the_route(name, device):
            refuse_interpreted_full_size(options.model, options.random_weights, name, path)

    if cpu_defaults:
        log(cpu_defaults)
    audio = load_audio(options.audio)
    log(f"Loaded audio from {options.audio}")
    log(f"Audio duration: {len(audio) / SAMPLE_RATE:.2f}s")

    with naming_the_route(name, device):
        read_ms, checkpoint = time_call(lambda: open_run_checkpoint(options, precision.dtype, device), "cpu")
    features_ms, inputs = time_call(lambda: prepare_inputs([audio], checkpoint.config, checkpoint.processor), "cpu")
    log(f"Feature extraction: {features_ms:.1f}ms ({inputs.input_features.shape[0]} window(s), "
        f"prompt {inputs.input_ids.shape[1]} tokens)")
    return Session(folder, path, device, precision, precision_description(precision, device, name, path), checkpoint,
                   inputs, len(audio) / SAMPLE_RATE, features_ms, read_ms / 1000, options, cpu_defaults, references)


def load_track_model(session: Session, log=print):
    """Build the folder's model on the session's checkpoint (raises KernelTodo where a template's kernel
    that runs at load time is unwritten)."""
    def load():  # importing the track counts: it may import its kernel language first
        track = import_track(session.folder, session.path, session.device)
        ckpt = session.checkpoint
        return track, track.load_model(ckpt.config, ckpt.weights, session.device, session.precision)

    load_ms, (track, session.model) = time_call(load, session.device)
    session.load_seconds += load_ms / 1000
    session.path_summary = path_summary(track)
    log(f"Model: {session.checkpoint.description} ({session.device}); load {session.load_seconds:.1f}s")
    log(f"Path: {session.path} ({session.path_summary})")
    log(f"Precision: {session.precision.name} ({session.precision_description})")


def open_session(options: RunOptions, folder: str, log=print) -> Session:
    """prepare_session, then load_track_model."""
    session = prepare_session(options, folder, log)
    load_track_model(session, log)
    return session


def release(device: str):
    """What a model that is gone held: its Python objects, and on a GPU the allocator's cached blocks."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def timed_generate(model, inputs: ASRInputs, options: RunOptions, device: str, on_token=None) -> tuple[float, list[int]]:
    """One transcription: its time in ms (glm_asr_course.timer) and the ids of its first row."""
    streaming = {} if on_token is None else {"on_token": on_token}
    ms, rows = time_call(lambda: model.generate(inputs, options.max_new_tokens, options.min_new_tokens, **streaming), device)
    return ms, rows[0]


class _CpuProgress:
    """What a CPU run has done so far, printed as it happens: the prompt phase's layers (regions
    encoder.layer and decoder.layer, seen through regions.set_timer), then the tokens as they come:
    "encoder layer 1 2, prefill layer 1 2, token 1 2 3". A course path spends seconds a layer in the
    interpreter before its first token. On a CPU only, so GPU timings never carry it."""

    LABELS = {"encoder.layer": "encoder layer", "decoder.layer": "prefill layer"}

    def __init__(self):
        self.shown, self.number, self.tokens = None, 0, 0

    def enter(self, name: str):
        return name

    def exit(self, name: str):
        if self.tokens == 0 and name in self.LABELS:
            self._count(self.LABELS[name])

    def __call__(self, _new_ids):  # on_token
        self._count("token")
        self.tokens += 1

    def _count(self, label: str):
        self.number = self.number + 1 if label == self.shown else 1
        lead = "" if self.shown is None else " " if label == self.shown else ", "
        print(f"{lead}{label} 1" if self.number == 1 else f" {self.number}", end="", flush=True)
        self.shown = label

    @contextmanager
    def shown_while(self):
        regions.set_timer(self)
        try:
            yield
        finally:
            regions.set_timer(None)


def time_runs(model, inputs: ASRInputs, options: RunOptions, device: str,
              streams_tokens: bool = True) -> tuple[list[float], list[int]]:
    """--warmup untimed, then --runs timed transcriptions, a line each ("  Run 2: 27.1ms (13 tokens)").
    On a CPU, where one takes seconds to minutes, the line counts the tokens as they come (a model's
    generate must then take on_token: ``streams_tokens``). Returns the timed runs' ms and the last ids."""
    runs, tokens = [], []
    for label, count in (("Warmup", options.warmup), ("Run", options.runs)):
        for i in range(count):
            print(f"  {label} {i + 1}: ", end="", flush=True)
            counter = _CpuProgress() if device == "cpu" and streams_tokens else None
            with counter.shown_while() if counter else nullcontext():
                ms, tokens = timed_generate(model, inputs, options, device, counter)
            print(f"{' -> ' if counter else ''}{ms:.1f}ms ({len(tokens)} tokens)")
            if label == "Run":
                runs.append(ms)
    return runs, tokens
