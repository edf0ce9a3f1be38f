#!/usr/bin/env python3
"""The Triton fast path's one-row GEMV tiles, chosen inside the decode step (utils/gpu_check.sh sweep_step).

    python -m glm_asr_lab.tuning.sweep_step [--launches qkv,o,gate_up,down] [--rounds 2] [--replays 100]
                                            [--jsonl PATH] [--device cuda]

sweep_linear.py times each launch alone, back to back on copies of its weight. In the step the launches overlap:
with programmatic dependent launch a launch's programs load their first weights while the launch before finishes,
and how many of them fit beside it depends on the registers its tile takes (on an H100 the rule's 8 x 4 KiB tile
takes 255 a thread, and two programs fill an SM's register file). So the tile fastest alone need not be fastest
in the step.

This replays the step itself: the fast path on full-size random weights (bf16, seed 0), the test clip's prompt and
13 tokens, then the decode step's CUDA graph captured again with one launch's tile changed in this GPU's row of
fast_linear.GEMV_TILES_BY_GPU and replayed back to back. Each launch in turn, the others at the table's tile;
each round times the table's tile first and last, so a drift of the machine falls on the spread. Then the best
tile of every launch together, against the table, in A B B A order. Prints µs a step per candidate and the row
of GEMV_TILES_BY_GPU the winners make. A tile changes how a launch sums, so bf16 ids may differ: gpu_check.sh
regret judges a new row before it lands.
"""

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

import torch
from triton.runtime.errors import OutOfResources

from glm_asr_course.errors import UserError
from glm_asr_lab.measure.timeline import replay_us
from glm_asr_lab.tuning.ab_hints import row_added
from glm_asr_lab.tuning.sweep_linear import decode_problems

LAUNCHES = ("qkv", "o", "gate_up", "down")  # in the order of sweep_linear.decode_problems
# Tiles tried for every launch: (BLOCK_N rows, BLOCK_K in bytes, num_warps, num_stages), GEMV_TILES_BY_GPU's form.
CANDIDATE_TILES = tuple((rows, k_bytes, warps, 2) for rows, k_bytes, warps in
                        itertools.product((4, 8, 16), (1024, 2048, 4096), (4, 8)))


def chosen_launches(names: str, device: str) -> list[str]:
    """The launches --launches names, in order; UserError for an unknown one or a device without CUDA graphs."""
    launches = [name for name in names.split(",") if name]
    unknown = [name for name in launches if name not in LAUNCHES]
    if unknown or not launches:
        raise UserError(f"--launches: unknown {', '.join(unknown) or 'empty list'} (known: {', '.join(LAUNCHES)})")
    if device != "cuda" or not torch.cuda.is_available():
        raise UserError("sweep_step times the decode step's CUDA graph: it needs a GPU (--device cuda)")
    return launches


def launch_shapes(cfg) -> dict[str, tuple[int, int]]:
    """(N, K) of each one-row GEMV of a decode step, by launch name: sweep_linear.decode_problems' shapes."""
    return {name: (problem["N"], problem["K"]) for name, problem in zip(LAUNCHES, decode_problems(cfg), strict=True)}


def best_tiles(rows: list[dict]) -> dict[str, dict]:
    """Per launch, from the rows of the single-launch sweep: {"tile", "us", "table_us", "spread_us"}. table_us is
    the median of the table's own repeats and spread_us their range; a tile wins when its median over the rounds
    lies below table_us by more than spread_us, else "tile" is None (the table's)."""
    out = {}
    for launch in dict.fromkeys(r["launch"] for r in rows):
        mine = [r for r in rows if r["launch"] == launch]
        table = [r["us"] for r in mine if r["tile"] is None]
        table_us, spread_us = statistics.median(table), max(table) - min(table)
        by_tile = {}
        for r in mine:
            if r["tile"] is not None:
                by_tile.setdefault(tuple(r["tile"]), []).append(r["us"])
        tile, us = min(((t, statistics.median(v)) for t, v in by_tile.items()), key=lambda item: item[1],
                       default=(None, table_us))
        wins = us < table_us - spread_us
        out[launch] = {"tile": tile if wins else None, "us": us if wins else table_us, "table_us": table_us,
                       "spread_us": spread_us}
    return out


def table_row_text(gpu: str, shapes: dict, dtype_name: str, winners: dict) -> str:
    """The GEMV_TILES_BY_GPU row the winners make, as Python to paste ('' when the table's tiles win)."""
    entries = [f"({shapes[launch][0]}, {shapes[launch][1]}, torch.{dtype_name}): {tuple(w['tile'])}"
               for launch, w in winners.items() if w["tile"] is not None]
    return f'"{gpu}": {{{", ".join(entries)}}},' if entries else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", default=",".join(LAUNCHES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--replays", type=int, default=100, help="timed replays per candidate, in groups of 20")
    parser.add_argument("--jsonl", type=Path)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    try:
        launches = chosen_launches(args.launches, args.device)
    except UserError as error:
        print(error, file=sys.stderr)
        return 2

    from glm_asr_course.model.audio import load_audio
    from glm_asr_course.model.checkpoint import default_config_dict, random_weights
    from glm_asr_course.model.config import ModelConfig
    from glm_asr_course.model.frontend import prepare_inputs
    from glm_asr_course.model.precision import PRECISIONS
    from glm_asr_course.runtimes import gpu_name
    from glm_asr_course.tracks import REPO_ROOT, import_track, use_device
    from glm_asr_triton_example import fast_linear

    use_device(args.device)
    cfg = ModelConfig.from_dict(default_config_dict())
    bf16 = PRECISIONS["bf16"]
    weights = {k: v.to(bf16.dtype) for k, v in random_weights(cfg, torch.float32, seed=0, device="cuda").items()}
    model = import_track("glm_asr_triton_example", "fast", "cuda").load_model(cfg, weights, "cuda", bf16)
    inputs = prepare_inputs([load_audio(str(REPO_ROOT / "test_audio.wav"))], cfg, None)
    gpu, shapes = gpu_name(torch.device("cuda")), launch_shapes(cfg)
    table = fast_linear.GEMV_TILES_BY_GPU
    print(f"{gpu}: the decode step replayed back to back, µs a step (median of {args.replays // 20} groups of 20)")
    out = args.jsonl.open("w") if args.jsonl else None

    def step_us(entries: dict) -> float:
        """The decode step captured with ``entries`` in the table, then replayed: µs a step."""
        with row_added(table, gpu, entries), torch.inference_mode():
            model.state = None  # a fresh state: generate() captures the step with these tiles
            model.generate(inputs, 13, 13)
            return replay_us(model.state.graph, args.replays)

    def record(row: dict):
        print(f"  {row['launch']:8s} {str(row['tile'] or 'table'):22s} round {row['round']}  {row['us']:8.1f}",
              flush=True)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()  # a sweep cut short by its time limit keeps its rows

    rows = []
    for round_index in range(args.rounds):
        for launch in launches:
            key = (*shapes[launch], bf16.dtype)
            tiles = CANDIDATE_TILES if round_index % 2 == 0 else CANDIDATE_TILES[::-1]
            for tile in (None, *tiles, None):
                try:
                    us = step_us({} if tile is None else {key: tile})
                except OutOfResources as error:  # a tile too big for an SM: no time, and the sweep goes on
                    print(f"  {launch:8s} {str(tile):22s} round {round_index}  not launched ({error})", flush=True)
                    continue
                rows.append(dict(launch=launch, tile=tile, round=round_index, us=us))
                record(rows[-1])
    winners = best_tiles(rows)
    entries = {(*shapes[launch], bf16.dtype): tuple(w["tile"]) for launch, w in winners.items() if w["tile"]}
    print("\nlaunch    table µs  (spread)  best µs  best tile (a tile must beat the table by more than its spread)")
    for launch, w in winners.items():
        print(f"{launch:8s} {w['table_us']:9.1f} {w['spread_us']:8.1f} {w['us']:8.1f}  {w['tile'] or 'the table'}")
    if entries:
        together = {"table": [], "winners": []}
        for arm in ("table", "winners", "winners", "table"):
            together[arm].append(step_us({} if arm == "table" else entries))
            record(dict(launch="all", tile=None if arm == "table" else "winners", round=len(together[arm]) - 1,
                        us=together[arm][-1]))
        table_us, winners_us = (statistics.median(together[arm]) for arm in ("table", "winners"))
        print(f"\nall winners together: {winners_us:.1f} µs a step against the table's {table_us:.1f} "
              f"({(winners_us / table_us - 1) * 100:+.1f} %)")
        print("GEMV_TILES_BY_GPU row: " + table_row_text(gpu, shapes, "bfloat16", winners))
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
