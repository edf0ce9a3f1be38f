#!/usr/bin/env python3
"""The fast paths against their floor and against transformers, on the test clip (utils/gpu_check.sh fastpath).

    python -m glm_asr_lab.gpu.fastpath [--peaks] [--timings FOLDER:PATH@PRECISION,...] [--anchors eager,static,compiled]
                                 [--tokens 13] [--warmup 2] [--runs 10] [--ieee-runs 3]
                                 [--compile-mode reduce-overhead] [--jsonl PATH] [--config DIR] [--device cuda]

Seeded random weights of the real model's sizes (glm_asr_course.model.checkpoint.random_weights, made in fp32 and
rounded for bf16, as glm_asr_lab/gpu/parity.py makes them; --config DIR: DIR/config.json's sizes, e.g. a tiny
checkpoint's on a CPU), the test clip, --tokens tokens forced (13: the prefill's and 12 decode steps').

  --peaks    the device's copy bandwidth and matmul FLOP/s measured afresh (roofline.device_peaks, cached per
             device, so benchmark_detailed.py run after this uses the same), and the floor of the transcription
             in each precision (roofline.transcription_floor); without it, the cached peaks
  --timings  each FOLDER:PATH@PRECISION in turn, on the same weights: the first call (compilation, graph capture)
             timed alone, then --warmup untimed and --runs timed transcriptions (--ieee-runs in IEEE fp32, which
             takes up to seconds a transcription): mean ± std (glm_asr_course.timer: CUDA events on a GPU),
             the fraction of the floor reached, the ids. glm_asr_scratch:compiled is the best plain PyTorch
             (static cache, CUDA graphs, torch.compile of the layers): the fast paths' yardstick
  --anchors  transformers' GlmAsrForConditionalGeneration on the same weights in bf16, each setting timed the same
             way (measure.transformers_anchor.time_generate): eager (sdpa, dynamic cache), static (static cache), compiled
             (static cache and torch.compile of the decode step in --compile-mode; its first call, the
             compilation, is printed on its own)

One JSON line per result, appended to --jsonl as it is measured, so a part stopped by a time limit keeps what
it finished; a folder:path that fails is reported and the next one runs. glm_asr_lab/gpu/summary.py makes the table.
Exit 1 when any timing or anchor failed.
"""

import argparse
import json
import sys
import traceback
from pathlib import Path

import torch


from glm_asr_lab.measure import roofline  # noqa: E402
from glm_asr_course.timer import spread, time_call, time_repeats  # noqa: E402
from glm_asr_course.model.audio import load_audio  # noqa: E402
from glm_asr_course.model.checkpoint import default_config_dict, random_weights  # noqa: E402
from glm_asr_course.model.config import ModelConfig  # noqa: E402
from glm_asr_course.model.frontend import prepare_inputs  # noqa: E402
from glm_asr_course.model.precision import PRECISIONS  # noqa: E402
from glm_asr_lab.measure.transformers_anchor import time_generate  # noqa: E402
from glm_asr_course.reference.hf_model import build  # noqa: E402
from glm_asr_course.command_line import release  # noqa: E402
from glm_asr_course.tracks import REPO_ROOT, import_track, use_device  # noqa: E402

# The timings of one gpu_check.sh call, most wanted first: a part that runs out of time loses the last.
DEFAULT_TIMINGS = ("glm_asr_triton_example:fast@bf16,glm_asr_triton_example:fast@tf32,"
                   "glm_asr_triton_example:fast@fp32,glm_asr_triton_example:course@fp32,"
                   "glm_asr_triton_example:course@bf16,glm_asr_triton_example:course@tf32")
# transformers' settings: (static KV cache, torch.compile of the decode step).
ANCHORS = {"eager": (False, False), "static": (True, False), "compiled": (True, True)}


def parse_timings(text: str) -> list[tuple[str, str]]:
    """"folder:path@precision,..." -> [(folder:path, precision)]."""
    timings = []
    for item in filter(None, text.split(",")):
        track, _, precision = item.partition("@")
        if precision not in PRECISIONS:
            raise SystemExit(f"--timings {item}: name a precision after '@' ({', '.join(PRECISIONS)})")
        timings.append((track, precision))
    return timings


class Results:
    """Result rows: each printed, kept in rows, and appended to the JSON-lines file as soon as it exists."""

    def __init__(self, path: str | None):
        self.path, self.failed, self.rows = path, [], []

    def add(self, row: dict, line: str):
        print(line, flush=True)
        self.rows.append(row)
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(row) + "\n")

    def failure(self, row: dict, what: str, error: Exception):
        """The last frames of the traceback (a compiler's fills pages), then one line that says what failed."""
        traceback.print_exc(limit=-3)
        self.failed.append(what)
        reason = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"
        self.add(row | {"error": traceback.format_exc(limit=-3)}, f"FAILED: {what}: {reason}")


def time_track(track: str, precision, cfg, weights_in, inputs, device: str, tokens: int, warmup: int,
               runs: int) -> dict:
    """One folder:path in one precision, ``tokens`` tokens a transcription: its first call, then
    ``warmup`` untimed and ``runs`` timed ones."""
    folder, _, path = track.partition(":")
    model = import_track(folder, path or None, device).load_model(cfg, weights_in(precision.dtype), device, precision)

    def transcribe():
        return model.generate(inputs, tokens, tokens)[0]

    first_ms, ids = time_call(transcribe, device)
    return {"first_call_ms": first_ms, "ids": ids} | spread(time_repeats(transcribe, device, warmup=warmup,
                                                                         repeats=runs))


@torch.no_grad()
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peaks", action="store_true", help="measure the device peaks afresh; print the floors")
    parser.add_argument("--timings", default="", help=f"FOLDER:PATH@PRECISION,... (gpu_check.sh: {DEFAULT_TIMINGS})")
    parser.add_argument("--anchors", default="", help=f"transformers' settings, of: {', '.join(ANCHORS)}")
    parser.add_argument("--tokens", type=int, default=13)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--ieee-runs", type=int, default=3, help="--runs of an IEEE fp32 timing")
    parser.add_argument("--compile-mode", default="reduce-overhead",
                        help="torch.compile mode of the compiled anchor (transformers' own default)")
    parser.add_argument("--compile-backend", default="inductor", help="of the compiled anchor (CPU tests: eager)")
    parser.add_argument("--jsonl", help="append one JSON line per result")
    parser.add_argument("--config", metavar="DIR", help="take sizes from DIR/config.json (smoke tests)")
    parser.add_argument("--audio", default=str(REPO_ROOT / "test_audio.wav"))
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    timings = parse_timings(args.timings)
    anchors = [name for name in args.anchors.split(",") if name]
    if unknown := set(anchors) - set(ANCHORS):
        raise SystemExit(f"--anchors: unknown {', '.join(sorted(unknown))}; choose from {', '.join(ANCHORS)}")

    use_device(args.device)  # on a CPU: Triton's interpreter and the cuTile emulator, chosen before either loads
    raw = json.loads((Path(args.config) / "config.json").read_text()) if args.config else default_config_dict()
    cfg = ModelConfig.from_dict(raw)
    device, tokens = args.device, args.tokens
    inputs = prepare_inputs([load_audio(args.audio)], cfg, None)
    results = Results(args.jsonl)
    peaks = roofline.device_peaks(device, refresh=args.peaks)
    floors = {name: roofline.transcription_floor(cfg, inputs, tokens, name, peaks) for name in PRECISIONS}
    if args.peaks:
        results.add({"kind": "peaks", "tokens": tokens, "prompt_len": int(inputs.input_ids.shape[1]),
                     "peaks": peaks.to_json(), "floors": floors}, f"Peaks: {peaks.describe()}")
        for name, floor in floors.items():
            print(f"  floor, {name}: {floor['floor_ms']:.2f} ms ({floor['flops'] / 1e12:.3f} TFLOP, "
                  f"{floor['bytes'] / 1e9:.2f} GB; {tokens} tokens, prompt {inputs.input_ids.shape[1]})")

    weights32 = random_weights(cfg, torch.float32, seed=0, device=device)
    weights = {torch.float32: weights32}

    def weights_in(dtype):
        if dtype not in weights:
            weights[dtype] = {k: v.to(dtype) for k, v in weights32.items()}
        return weights[dtype]

    for track, precision_name in timings:
        row = {"kind": "timing", "track": track, "precision": precision_name, "tokens": tokens}
        try:
            runs = args.ieee_runs if precision_name == "fp32" else args.runs
            row |= time_track(track, PRECISIONS[precision_name], cfg, weights_in, inputs, device, tokens, args.warmup,
                              runs)
            row |= {"floor_ms": floors[precision_name]["floor_ms"],
                    "floor_fraction": floors[precision_name]["floor_ms"] / row["mean_ms"]}
            results.add(row, f"{track} {precision_name}: {row['mean_ms']:.1f} ± {row['std_ms']:.1f} ms "
                        f"({len(row['runs_ms'])} runs; floor {row['floor_ms']:.1f} ms: "
                        f"{100 * row['floor_fraction']:.0f} %; first call {row['first_call_ms'] / 1000:.1f} s; "
                        f"{len(set(row['ids']))} distinct ids of {len(row['ids'])})")
        except Exception as e:
            results.failure(row, f"{track} {precision_name}", e)
        release(device)

    if anchors:
        bf16 = PRECISIONS["bf16"]
        hf = build(raw, weights_in(bf16.dtype), bf16.dtype, device)
        for name in anchors:
            static_cache, compiled = ANCHORS[name]
            row = {"kind": "anchor", "anchor": name, "precision": "bf16", "tokens": tokens}
            try:
                row |= time_generate(hf, inputs, tokens, (), bf16, device, warmup=args.warmup, runs=args.runs,
                                     static_cache=static_cache, compile_mode=args.compile_mode if compiled else None,
                                     compile_backend=args.compile_backend)
                results.add(row, f"transformers ({row['setting']}), bf16: {row['mean_ms']:.1f} ± {row['std_ms']:.1f} "
                            f"ms; first call {row['first_call_ms'] / 1000:.1f} s")
            except Exception as e:
                results.failure(row, f"transformers {name}", e)
    if results.failed:
        print(f"FAILED: {', '.join(results.failed)}")
    return 1 if results.failed else 0


if __name__ == "__main__":
    sys.exit(main())
