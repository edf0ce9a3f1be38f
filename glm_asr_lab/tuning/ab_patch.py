#!/usr/bin/env python3
"""A/B of a code change on one GPU: the working tree against a copy with the change reverted (utils/gpu_check.sh ab_patch).

    python -m glm_asr_lab.tuning.ab_patch PATCH [--track FOLDER:PATH] [--clips NAME,...] [--rounds 3] [--runs 5]
                                          [--warmup 1] [--tokens 13] [--jsonl PATH] [--config DIR] [--device cuda]

PATCH is the change as `git diff` writes it (a -p1 unified diff), already applied to the working tree: make it
with `git diff BEFORE AFTER > ab.patch` at the repository root, where it travels to the device with the tree.
A figure taken before a change on one machine and after it on another mixes the change with the machines:
a change that saved 0.9 ms on one H200 (2026-11-27 f, call 7) looked no faster in another H200's fastpath part
(call 6), and the compiled PyTorch path took 37.8 and 43.9 ms on two H200s with nothing changed in it
(2026-11-26 latest, 2026-11-27 e).

The tree is copied without .git, .venv, .cutile and .whl, and `patch -R -p1` reverts PATCH in the copy. Each
round times the track on the clips once in each tree, each in a fresh process that imports its own tree
(ab_hints.py with the table alone, bf16, full-size random weights), after then before, then before then
after, so a drift of the machine's speed falls on both. Per clip: the median of every timed run, the change,
and whether the token ids are equal (a change may round differently: gpu_check.sh regret judges bf16 ids).
Exit 2 when PATCH is missing or does not revert cleanly, or a clip is unknown; 1 when a run fails.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from glm_asr_course.errors import UserError
from glm_asr_course.tracks import REPO_ROOT
from glm_asr_lab.gpu.clips import clip_names
from glm_asr_lab.gpu.fastpath import Results
from glm_asr_lab.tuning.ab_hints import DEFAULT_CLIPS, TRACK, add_timing_options, verdicts

NOT_COPIED = (".git", ".venv", ".cutile", ".whl", "__pycache__", "*.egg-info", ".ruff_cache", ".pytest_cache")


def tree_before(patch: Path, root: Path, into: Path) -> Path:
    """A copy of the repository at ``root`` in ``into``/before, with ``patch`` reverted; UserError when it does not
    revert cleanly (a patch of other code, or not yet applied)."""
    before = into / "before"
    shutil.copytree(root, before, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)
    done = subprocess.run(["patch", "-R", "-p1", "-s", "-f", "-i", str(patch.resolve())], cwd=before,
                          capture_output=True, text=True)
    if done.returncode:
        first = (done.stdout + done.stderr).strip().splitlines() or ["no output"]
        raise UserError(f"{patch}: does not revert cleanly in a copy of {root} ({first[0]})")
    return before


def timed_in(tree: Path, label: str, round_index: int, args, scratch: Path) -> list[dict]:
    """One ab_hints run (the table alone) in a fresh process that imports ``tree``: its rows, labelled. Its
    own lines stay out of stdout, where this run prints the same rows; its tracebacks go to stderr."""
    rows_file = scratch / f"{label}-{round_index}.jsonl"
    command = [sys.executable, "-m", "glm_asr_lab.tuning.ab_hints", "--arms", "table", "--track", args.track,
               "--clips", args.clips, "--rounds", "1", "--runs", str(args.runs), "--warmup", str(args.warmup),
               "--tokens", str(args.tokens), "--device", args.device, "--jsonl", str(rows_file)]
    if args.config:
        command += ["--config", str(Path(args.config).resolve())]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    done = subprocess.run(command, cwd=tree, env=env, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()] if rows_file.exists() else []
    if done.returncode or not rows:
        rows.append({"error": f"ab_hints exited {done.returncode} in the {label} tree"})
    return [row | {"kind": "ab_patch", "arm": label, "round": round_index} for row in rows]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("patch", help="the change, applied to the working tree (git diff BEFORE AFTER)")
    parser.add_argument("--track", default=TRACK, help="FOLDER:PATH timed")
    parser.add_argument("--clips", default="test clip 3.5 s", help=f"comma-separated clip names (ab_hints: {DEFAULT_CLIPS})")
    add_timing_options(parser, rounds=3, runs=5)
    args = parser.parse_args(argv)
    patch = Path(args.patch)
    try:
        clip_names(args.clips)
        if not patch.is_file():
            raise UserError(f"{patch}: no such patch file")
        with tempfile.TemporaryDirectory() as scratch:
            before = tree_before(patch, REPO_ROOT, Path(scratch))
            results = Results(args.jsonl)
            for round_index in range(args.rounds):
                order = [("after", REPO_ROOT), ("before", before)]
                for label, tree in order if round_index % 2 == 0 else order[::-1]:
                    for row in timed_in(tree, label, round_index, args, Path(scratch)):
                        line = (f"FAILED: {row['error']}" if "error" in row else
                                f"{row['clip']:16s} round {round_index} {label:6s} {row['mean_ms']:8.2f} ms "
                                f"(runs {', '.join(f'{ms:.2f}' for ms in row['runs_ms'])})")
                        results.add(row, line)
    except UserError as error:
        print(error, file=sys.stderr)
        return 2
    print(f"\n{'clip':16s} {'tree':8s} {'median ms':>10s} {'change':>8s}  ids equal to before's")
    for v in verdicts(results.rows, base="before"):
        print(f"{v['clip']:16s} {v['arm']:8s} {v['median_ms']:10.2f} {100 * v['change']:+7.1f}%  {v['ids_equal']}")
    return 1 if any("error" in row for row in results.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
