#!/usr/bin/env python3
"""Bad input on the GPU: the same one-line errors (exit 2, no traceback) as the CPU suite checks.

    python -m glm_asr_lab.gpu.bad_inputs [--tracks folder:path,...] [--device cuda]

Each case runs ./benchmark.sh in its own process on a tiny checkpoint (built here, as the tests
build theirs) with --device cuda, for every track path given: a missing, an empty and a non-audio
file, a clip too short for one audio token, a pickle-only checkpoint, a tensor of the wrong shape,
bad option values and a report folder that does not exist; then, in the template of each kernel
language among the tracks, a kernel left TODO and an unknown kernel for --allow-reference. A case
passes when the exit code is 2 and stderr is exactly one line starting "error: " that holds the
expected words. One row per case, a count at the end. The cases run --jobs at a time (each process
mostly starts Python and torch and stops at its error).
"""

import argparse
import concurrent.futures
import shutil
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

from glm_asr_course.reference.tiny_checkpoint import build_tiny_checkpoint
from glm_asr_course.tracks import REPO_ROOT as REPO, kernel_language


def write_wav(path: Path, samples: np.ndarray) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((samples * 3000).astype(np.int16).tobytes())
    return path


def cases(tmp: Path, ckpt: Path) -> list[tuple[str, list[str], str]]:
    """(name, arguments after the folder, words the error line must hold)."""
    from safetensors.torch import load_file, save_file

    notes = tmp / "notes.wav"
    notes.write_text("this is not audio")
    pickled = tmp / "pickled"
    pickled.mkdir()
    shutil.copy(ckpt / "config.json", pickled)
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04not loaded")
    misshaped = tmp / "misshaped"
    shutil.copytree(ckpt, misshaped)
    tensors = load_file(str(misshaped / "model.safetensors"))
    key = next(k for k in tensors if "q_proj.weight" in k)
    tensors[key] = tensors[key][:-1]
    save_file(tensors, str(misshaped / "model.safetensors"))
    model = ["--model", str(ckpt)]
    return [
        ("missing audio", [*model, "--audio", str(tmp / "nowhere.wav")], "audio file not found"),
        ("empty audio", [*model, "--audio", str(write_wav(tmp / "empty.wav", np.zeros(0)))], "empty"),
        ("non-audio file", [*model, "--audio", str(notes)], "cannot read"),
        ("too short", [*model, "--audio", str(write_wav(tmp / "blip.wav", np.ones(160)))], "too short"),
        ("pickle checkpoint", ["--model", str(pickled)], "safetensors"),
        ("mis-shaped tensor", ["--model", str(misshaped)], "shape"),
        ("--max-new-tokens 0", [*model, "--max-new-tokens", "0"], "--max-new-tokens"),
        ("min > max tokens", [*model, "--min-new-tokens", "9", "--max-new-tokens", "3"], "exceeds"),
        ("--json in a missing folder", [*model, "--json", str(tmp / "no" / "out.json")], "does not exist"),
        # --solution: a folder with no solution of its own (the PyTorch track) is graded against the example.
        ("--report in a missing folder", [*model, "--compare", "--solution", "glm_asr_triton_example",
                                          "--report", str(tmp / "no" / "sub" / "r")], "does not exist"),
    ]


def run_case(folder: str, path: str | None, argv: list[str], device: str) -> tuple[int, str, str]:
    cmd = [str(REPO / "benchmark.sh"), folder, *(["--path", path] if path else []), "--device", device,
           "--max-new-tokens", "2", "--runs", "1", "--warmup", "0", *argv]
    # Later options win in argparse: a case's own --max-new-tokens replaces the default above.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    return proc.returncode, proc.stdout, proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracks", default="glm_asr_triton_example:fast,glm_asr_triton_example:course")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--jobs", type=int, default=8, help="cases run at once (default 8)")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ckpt = build_tiny_checkpoint(tmp / "tiny")
        bad_inputs = cases(tmp, ckpt)  # written once, then tried on every track
        runs = [(track, *case) for track in args.tracks.split(",") for case in bad_inputs]
        # The template of each kernel language among the tracks (the Triton one where none is named).
        named = {kernel_language(track.split(":")[0]) for track in args.tracks.split(",")}
        languages = [lang for lang in ("triton", "cutile") if lang in named] or ["triton"]
        for template in (f"glm_asr_{lang}_template" for lang in languages):
            runs.append((template, "template kernel left TODO", ["--model", str(ckpt)], "is a TODO"))
            runs.append((template, "unknown --allow-reference kernel",
                         ["--model", str(ckpt), "--allow-reference", "rmsnorm_kernel,flash_kernel"], "flash_kernel"))

        def run(track_case):
            folder, _, path = track_case[0].partition(":")
            return run_case(folder, path or None, track_case[2], args.device)

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for (track, name, _, words), (code, out, err) in zip(runs, pool.map(run, runs)):
                lines = err.strip().splitlines()
                ok = (code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0]
                      and "Traceback" not in out + err)
                results.append(ok)
                shown = lines[-1] if lines else "(no stderr)"
                print(f"{'ok  ' if ok else 'FAIL'} {track:34s} {name:30s} exit {code}  {shown[:150]}", flush=True)
    print(f"{sum(results)} of {len(results)} bad-input cases give one clear line and exit 2 on {args.device}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
