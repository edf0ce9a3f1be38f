#!/usr/bin/env python3
"""Any audio length on the GPU: every track path against transformers on clips of awkward lengths.

    python -m glm_asr_lab.gpu.clips [--tracks folder:path,...] [--clips NAME,...] [--tokens 12] [--json PATH]
    python -m glm_asr_lab.gpu.clips --write DIR [--clips NAME,...] [--list PATH]    (the clips as files; no GPU)

Clips, all cut from test_audio.wav (LibriSpeech) and written as files so the same loader reads them:
the test clip (3.5 s), 0.3 s (three audio tokens), 30.5 s (one full window and a sliver of a second),
45 s (two windows), 5 minutes (ten windows) and the test clip at 44.1 kHz stereo (resampled and
mixed down on load). Full-size random weights (checkpoint.random_weights), the synthetic prompt.

For each clip: transformers' greedy ids in true fp32 (TF32 off), then for each track path its ids in
IEEE fp32 (equal to transformers' expected) and its bf16 time per transcription (--tokens tokens,
after a warm-up), the real-time factor (time / audio length) and the peak GPU memory of that bf16
run. One JSON line per (clip, track) to --json; a table at the end.

--write DIR writes the chosen clips into DIR and prints one "name<TAB>path" line each (also into --list PATH),
for a tool that takes a file (benchmark_detailed.py --audio: utils/gpu_check.sh long_clips). Clips run and are
listed in the order above, whatever the order of --clips.
"""

import argparse
import json
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import soundfile as sf
import torch


from glm_asr_course.errors import UserError, run_cli  # noqa: E402
from glm_asr_course.timer import time_call, time_repeats  # noqa: E402
from glm_asr_course.model.audio import SAMPLE_RATE, load_audio  # noqa: E402
from glm_asr_course.model.checkpoint import default_config_dict, random_weights  # noqa: E402
from glm_asr_course.model.config import ModelConfig  # noqa: E402
from glm_asr_course.model.frontend import prepare_inputs  # noqa: E402
from glm_asr_course.model.precision import PRECISIONS, torch_matmul_precision  # noqa: E402
from glm_asr_course.reference.hf_model import build, generate  # noqa: E402
from glm_asr_course.tracks import REPO_ROOT, import_track  # noqa: E402


# The clips, in the order they run; write_clips makes each.
CLIP_NAMES = ("test clip 3.5 s", "0.3 s", "30.5 s", "45 s", "5 min", "44.1 kHz stereo")


def clip_names(names: str | None) -> list[str]:
    """The comma-separated clip names (all when None), in CLIP_NAMES' order whatever the argument's; an unknown
    or empty name is a UserError."""
    if names is None:
        return list(CLIP_NAMES)
    asked = [name.strip() for name in names.split(",")]
    if unknown := [repr(name) for name in asked if name not in CLIP_NAMES]:
        raise UserError(f"--clips: unknown {', '.join(unknown)}; choose from {', '.join(CLIP_NAMES)}")
    return [name for name in CLIP_NAMES if name in asked]


def write_clips(out: Path, names: Sequence[str] = CLIP_NAMES) -> dict[str, Path]:
    """The named clips as files in out: speech repeated to length, cut, or resampled to 44.1 kHz stereo."""
    speech = load_audio(REPO_ROOT / "test_audio.wav")

    def of_length(seconds: float) -> np.ndarray:
        n = int(seconds * SAMPLE_RATE)
        return np.tile(speech, -(-n // len(speech)))[:n]

    def at_44k_stereo() -> np.ndarray:
        from scipy.signal import resample_poly

        mono = resample_poly(speech, 441, 160).astype(np.float32)
        return np.stack([mono, 0.8 * mono], axis=1)

    makers = {"test clip 3.5 s": lambda: (speech, SAMPLE_RATE), "0.3 s": lambda: (of_length(0.3), SAMPLE_RATE),
              "30.5 s": lambda: (of_length(30.5), SAMPLE_RATE), "45 s": lambda: (of_length(45.0), SAMPLE_RATE),
              "5 min": lambda: (of_length(300.0), SAMPLE_RATE), "44.1 kHz stereo": lambda: (at_44k_stereo(), 44100)}
    assert tuple(makers) == CLIP_NAMES
    paths = {}
    for name in names:
        paths[name] = out / f"clip{CLIP_NAMES.index(name)}.wav"
        sf.write(paths[name], *makers[name](), subtype="FLOAT")
    return paths


@torch.no_grad()
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracks", default="glm_asr_triton_example:fast,glm_asr_triton_example:course")
    parser.add_argument("--tokens", type=int, default=12)
    parser.add_argument("--json", default=None)
    parser.add_argument("--clips", help="comma-separated clip names to run (default: all)")
    parser.add_argument("--write", metavar="DIR", help="only write the clips into DIR, one name<TAB>path line each")
    parser.add_argument("--list", metavar="PATH", help="with --write: the name<TAB>path lines into PATH too")
    args = parser.parse_args(argv)
    names = clip_names(args.clips)
    if args.write:
        Path(args.write).mkdir(parents=True, exist_ok=True)
        lines = "".join(f"{name}\t{path}\n" for name, path in write_clips(Path(args.write), names).items())
        print(lines, end="")
        if args.list:
            Path(args.list).write_text(lines)
        return 0
    raw = default_config_dict()
    cfg = ModelConfig.from_dict(raw)
    fp32, bf16 = PRECISIONS["fp32"], PRECISIONS["bf16"]
    weights = random_weights(cfg, torch.float32, seed=0, device="cuda")
    weights_bf16 = {k: v.to(torch.bfloat16) for k, v in weights.items()}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        clips = write_clips(Path(tmp), names)
        inputs = {name: prepare_inputs([load_audio(path)], cfg, None) for name, path in clips.items()}
        seconds = {name: len(load_audio(path)) / SAMPLE_RATE for name, path in clips.items()}
        with torch_matmul_precision(fp32):
            hf = build(raw, weights, torch.float32, "cuda")
            expected = {name: generate(hf, clip_inputs, args.tokens, args.tokens, (), torch.float32, "cuda")[0]
                        for name, clip_inputs in inputs.items()}
            del hf
            torch.cuda.empty_cache()
        for track in args.tracks.split(","):
            folder, _, path = track.partition(":")
            module = import_track(folder, path or None, "cuda")
            exact = module.load_model(cfg, weights, "cuda", fp32)
            fast = module.load_model(cfg, weights_bf16, "cuda", bf16)
            for name, clip_inputs in inputs.items():
                fp32_ms, fp32_ids = time_call(lambda: exact.generate(clip_inputs, args.tokens, args.tokens), "cuda")
                ids, fp32_s = fp32_ids[0], fp32_ms / 1000
                torch.cuda.reset_peak_memory_stats()

                def bf16_run():
                    return fast.generate(clip_inputs, args.tokens, args.tokens)

                # One untimed call (compiling, capturing) and three timed ones; the first call's time is the rest.
                all_ms, runs = time_call(lambda: time_repeats(bf16_run, "cuda", warmup=1, repeats=3), "cuda")
                ms = statistics.median(runs)
                first_call_s = (all_ms - sum(runs)) / 1000
                row = {"clip": name, "track": track, "audio_seconds": seconds[name],
                       "windows": int(clip_inputs.input_features.shape[0]),
                       "prompt_len": int(clip_inputs.input_ids.shape[1]), "fp32_ids_equal": ids == expected[name],
                       "bf16_ms": ms, "real_time_factor": ms / 1000 / seconds[name],
                       "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "fp32_run_s": fp32_s,
                       "bf16_first_call_s": first_call_s,
                       "gpu": torch.cuda.get_device_name()}
                rows.append(row)
                print(f"{name:16s} {track:32s} windows {row['windows']:2d} prompt {row['prompt_len']:4d}  "
                      f"fp32 ids == transformers: {row['fp32_ids_equal']}  bf16 {ms:8.1f} ms  "
                      f"RTF {row['real_time_factor']:.4f}  peak {row['peak_gib']:.1f} GiB  (first calls: IEEE fp32 "
                      f"{fp32_s:.1f} s, bf16 with compiling and capture {first_call_s:.1f} s)", flush=True)
            exact = fast = None  # both models freed before the next track loads its own
            torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    failed = [f"{r['clip']} / {r['track']}" for r in rows if not r["fp32_ids_equal"]]
    print("all clips: fp32 ids equal to transformers'" if not failed else f"FAIL: ids differ on {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    run_cli(main)
