#!/usr/bin/env python3
"""A/B of the cuTile fast path's compiler hints and wide tiles on whole transcriptions (utils/gpu_check.sh ab_hints).

    python -m glm_asr_lab.tuning.ab_hints [--arms NAME,...] [--clips NAME,...] [--rounds 2] [--warmup 1] [--runs 3]
                                          [--tokens 13] [--track FOLDER:PATH] [--jsonl PATH] [--config DIR]
                                          [--device cuda]

sweep_cutile_fast.py times one launch under each hint; a hint that wins there can still lose in the
transcription (2026-11-26: fc1 at occupancy 2 was faster alone and made the H200's prompt graph slower).
This runs the transcription itself. Each arm adds entries to this GPU's row of
fast_linear.KERNEL_HINTS_BY_GPU (CANDIDATES) or of fast_linear.WIDE_TILES_BY_GPU (WIDE_TILE_CANDIDATES)
for its runs ("table" adds none; "a+b" adds a's and b's). Every arm loads a fresh model on the same
weights, so its graphs are captured with its kernels. Rounds run the arms forwards, then backwards
(A B B A), so a drift of the machine's speed falls on every arm alike.

Per (clip, arm): the median of every timed run over the rounds, its change against "table", and
whether its token ids equal the table's. A hint changes how a kernel is compiled, never what it
computes: a hint arm's ids must equal the table's. A wide tile may round its sums differently, so a
wide-tile arm's bf16 ids may differ; gpu_check.sh regret judges it. Full-size random weights
(checkpoint.random_weights, bf16), the clips of glm_asr_lab/gpu/clips.py. Exit 1 when a hint arm's ids
differ or a run fails, 2 for an unknown arm or clip.
"""

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from glm_asr_course.command_line import release
from glm_asr_course.errors import UserError
from glm_asr_course.model.audio import load_audio
from glm_asr_course.model.checkpoint import default_config_dict, random_weights
from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.frontend import prepare_inputs
from glm_asr_course.model.precision import PRECISIONS
from glm_asr_course.runtimes import gpu_name
from glm_asr_course.tracks import REPO_ROOT, use_device
from glm_asr_lab.gpu.clips import clip_names, write_clips
from glm_asr_lab.gpu.fastpath import Results, time_track

TRACK = "glm_asr_cutile_example:fast"
# The sweep's winners not yet in KERNEL_HINTS_BY_GPU, by arm name: entries for this GPU's row, e.g.
#     "prefill-flash-occ2": {("flash", (64, 64, 128)): ((1, {"occupancy": 2}),)}
# A candidate that wins here and passes gpu_check.sh parity regret moves into the table, with its figures, and
# leaves this list; one that does not win leaves it too, its figures in docs/performance.md. Parity runs the test
# clip: a hint for longer prompts or more windows is held to the table's ids here only. 2026-11-27 (c), one
# H100: the encoder's flash attention at occupancy 2 and the 5-minute prompt's gate|up at 8 worker warps won and
# moved. Within the noise (about 3 % a clip) and dropped: the 128 x 128 GEMMs at occupancy 2 from 3,000 rows or
# at 8 worker warps from 3,000 to 4,499 rows, the prefill's flash attention at occupancy 2, the gate|up's 8
# worker warps below 3,000 rows. Lost: the 128 x 128 GEMMs at 8 worker warps over ten windows (5-minute clip
# +4.1 %). With none listed, the part times the table alone: the run-to-run spread a candidate must beat.
CANDIDATES: dict[str, dict] = {}
# Weight shapes that would take WIDE_TILES_BY_GPU's 128 x 256 tiles from fewer rows, by arm name: entries for this
# GPU's row, e.g. {"fc1-wide-one-window": {(5120, 1280, torch.bfloat16): 1500}}. That arm, the encoder's fc1 over
# one window (alone on an H200: 64.0 us at the table's 64 x 128 tile, 42.8 at 128 x 256; predicted -0.7 ms on
# the test clip), measured -1.0 % on the test clip, within its runs' spread, and +0.2 % / -0.1 % on the 45 s and
# 5-minute clips (one H200, 2026-11-27 f, call 1): dropped.
WIDE_TILE_CANDIDATES: dict[str, dict] = {}


def arm_names() -> list[str]:
    """The arms' names: 'table', then every candidate's, read at call time (tests add candidates)."""
    return ["table", *CANDIDATES, *WIDE_TILE_CANDIDATES]


DEFAULT_ARMS = ",".join(arm_names())
DEFAULT_CLIPS = "test clip 3.5 s,45 s,5 min"


def arm_entries(arm: str) -> tuple[dict, dict]:
    """The hint entries and the wide-tile entries arm "a+b+..." adds ("table": none)."""
    hints, wide_tiles = {}, {}
    for name in arm.split("+"):
        hints |= CANDIDATES.get(name, {})
        wide_tiles |= WIDE_TILE_CANDIDATES.get(name, {})
    return hints, wide_tiles


@contextlib.contextmanager
def row_added(table: dict, gpu: str, entries: dict):
    """table[gpu] with ``entries`` added (replacing the same keys) inside; restored after."""
    had_row, row = gpu in table, table.get(gpu, {})
    table[gpu] = {**row, **entries}
    try:
        yield
    finally:
        if had_row:
            table[gpu] = row
        else:
            del table[gpu]


@contextlib.contextmanager
def tables_added(gpu: str, hints: dict, wide_tiles: dict):
    """fast_linear's KERNEL_HINTS_BY_GPU and WIDE_TILES_BY_GPU rows for ``gpu`` with an arm's entries added. An
    arm that adds none (the table) leaves cuTile unimported, so a track of another language needs no cuTile."""
    if not hints and not wide_tiles:
        yield
        return
    from glm_asr_cutile_example import fast_linear

    with row_added(fast_linear.KERNEL_HINTS_BY_GPU, gpu, hints), \
            row_added(fast_linear.WIDE_TILES_BY_GPU, gpu, wide_tiles):
        yield


def verdicts(rows: list[dict], base: str = "table") -> list[dict]:
    """Per (clip, arm): the median over its rounds' runs, its change against arm ``base``, ids equal to base's.
    Rows without runs (failures) are left out."""
    out = []
    timed = [r for r in rows if "runs_ms" in r]
    for clip in dict.fromkeys(r["clip"] for r in timed):
        runs = {}
        for r in timed:
            if r["clip"] == clip:
                runs.setdefault(r["arm"], []).append(r)
        if base not in runs:
            continue
        base_ms = statistics.median(ms for r in runs[base] for ms in r["runs_ms"])
        base_ids = runs[base][0]["ids"]
        for arm, arm_rows in runs.items():
            ms = statistics.median(t for r in arm_rows for t in r["runs_ms"])
            out.append({"clip": clip, "arm": arm, "median_ms": ms, "change": ms / base_ms - 1,
                        "ids_equal": all(r["ids"] == base_ids for r in arm_rows)})
    return out


def unequal_ids(table: list[dict]) -> tuple[list[str], list[str]]:
    """The verdicts whose ids differ from the table's: "clip / arm" of the wide-tile arms (regret judges them),
    and of the others (a failure: a hint must not change the ids)."""
    unequal = [v for v in table if not v["ids_equal"]]
    retiled = [f"{v['clip']} / {v['arm']}" for v in unequal if arm_entries(v["arm"])[1]]
    return retiled, [f"{v['clip']} / {v['arm']}" for v in unequal if not arm_entries(v["arm"])[1]]


def add_timing_options(parser: argparse.ArgumentParser, *, rounds: int, runs: int) -> None:
    """The options ab_hints and ab_patch share: rounds, runs a round and tokens a transcription, the JSON-lines
    file, the model's sizes and the device."""
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--tokens", type=int, default=13)
    parser.add_argument("--jsonl", help="append one JSON line per result")
    parser.add_argument("--config", metavar="DIR", help="take sizes from DIR/config.json (smoke tests)")
    parser.add_argument("--device", default="cuda")


@torch.no_grad()
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default=DEFAULT_ARMS,
                        help="comma-separated; 'table' and the candidates' names "
                             f"({', '.join(arm_names()[1:]) or 'none now'}), joined by '+'")
    parser.add_argument("--clips", default=DEFAULT_CLIPS, help="comma-separated names of glm_asr_lab/gpu/clips.py's clips")
    parser.add_argument("--track", default=TRACK,
                        help="FOLDER:PATH timed; the candidates are cuTile's, so another track takes the table alone "
                             "(ab_patch.py)")
    add_timing_options(parser, rounds=2, runs=3)
    args = parser.parse_args(argv)
    arms = args.arms.split(",")
    if unknown := {name for arm in arms for name in arm.split("+")} - set(arm_names()):
        print(f"--arms: unknown {', '.join(sorted(unknown))}; choose from {', '.join(arm_names())}", file=sys.stderr)
        return 2
    if "table" not in arms:
        arms.insert(0, "table")
    if args.track != TRACK and arms != ["table"]:
        print(f"--track {args.track}: the candidates are {TRACK}'s; pass --arms table", file=sys.stderr)
        return 2

    try:
        names = clip_names(args.clips)
    except UserError as error:
        print(error, file=sys.stderr)
        return 2

    use_device(args.device)  # on a CPU: the cuTile emulator, chosen before it loads
    with tempfile.TemporaryDirectory() as folder:
        clips = write_clips(Path(folder), names)
        raw = json.loads((Path(args.config) / "config.json").read_text()) if args.config else default_config_dict()
        cfg = ModelConfig.from_dict(raw)
        bf16 = PRECISIONS["bf16"]
        weights = {k: v.to(bf16.dtype)
                   for k, v in random_weights(cfg, torch.float32, seed=0, device=args.device).items()}
        gpu = gpu_name(args.device)
        results = Results(args.jsonl)
        for clip in names:
            inputs = prepare_inputs([load_audio(clips[clip])], cfg, None)
            for round_index in range(args.rounds):
                for arm in arms if round_index % 2 == 0 else arms[::-1]:
                    row = {"kind": "ab_hints", "clip": clip, "arm": arm, "round": round_index, "gpu": gpu,
                           "track": args.track, "repo": str(REPO_ROOT)}
                    try:
                        with tables_added(gpu, *arm_entries(arm)):
                            row |= time_track(args.track, bf16, cfg, lambda dtype: weights, inputs, args.device,
                                              args.tokens, args.warmup, args.runs)
                        results.add(row, f"{clip:16s} round {round_index} {arm:28s} {row['mean_ms']:8.2f} ms "
                                    f"(runs {', '.join(f'{ms:.2f}' for ms in row['runs_ms'])})")
                    except Exception as error:
                        results.failure(row, f"{clip} / {arm}", error)
                    release(args.device)
    table = verdicts(results.rows)
    print(f"\n{'clip':16s} {'arm':28s} {'median ms':>10s} {'change':>8s}  ids equal to the table's")
    for v in table:
        print(f"{v['clip']:16s} {v['arm']:28s} {v['median_ms']:10.2f} {100 * v['change']:+7.1f}%  {v['ids_equal']}")
    retiled, different = unequal_ids(table)
    if retiled:
        print(f"ids differ from the table's with wide tiles (judge them by gpu_check.sh regret): {', '.join(retiled)}")
    if different:
        print(f"FAIL: ids differ from the table's: {', '.join(different)}")
    return 1 if different or results.failed else 0


if __name__ == "__main__":
    sys.exit(main())
