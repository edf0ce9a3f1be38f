#!/usr/bin/env python3
"""Transcribe one audio file with a track folder, time it, and check the transcription.

    python benchmark_student.py glm_asr_triton_example [--precision bf16] [--path course] [--runs 3] [--json out.json]
    python benchmark_student.py glm_asr_triton_template --compare [--report DIR]     (the grader's report)

Timing covers one whole transcription (encoder, projector, prefill, every decode step), GPU-synchronised,
after --warmup untimed runs; model load and feature extraction are reported on their own lines.
--compare also runs every course kernel's self-check in the folder and in the solution (the example),
times the solution's course and fast paths and transformers on the same inputs, and writes a report
(Markdown, JSON, roofline plot; glm_asr_common/grading.py) to --report (default reports/FOLDER).
Exit codes: 0 PASS or not checked, 1 transcription mismatch, 2 bad input (or, in a template, a TODO
kernel that was launched: --allow-reference KERNEL|all runs the example's kernel in its place).
"""

import statistics
import time
from pathlib import Path

import torch

from glm_asr_common import grading, teaching
from glm_asr_common.cli import ArgumentParser, add_common_args, expected_text, open_session, write_json
from glm_asr_common.errors import UserError, run_cli
from glm_asr_common.frontend import decode
from glm_asr_common.runtime import track_folders
from glm_asr_common.scoring import accuracy, word_error_rate


def time_transcription(session, args) -> tuple[float, list[int]]:
    sync = torch.cuda.synchronize if session.device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    tokens = session.model.generate(session.inputs, args.max_new_tokens, args.min_new_tokens)[0]
    sync()
    return (time.perf_counter() - start) * 1000, tokens


def main(argv) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0], prog="benchmark_student.py")
    parser.add_argument("folder", nargs="?", help="track folder, e.g. glm_asr_triton_example")
    add_common_args(parser, runs_default=3)
    parser.add_argument("--profile", action="store_true", help="print a per-component time summary")
    parser.add_argument("--compare", action="store_true",
                        help="grade against the solution: per-kernel self-checks side by side, the solution's "
                             "course and fast paths and transformers timed in the same run, a report written")
    parser.add_argument("--report", metavar="DIR", help="--compare's report folder (default: reports/FOLDER)")
    parser.add_argument("--solution", metavar="FOLDER",
                        help="--compare against this folder (default: the example of the folder's kernel language)")
    args = parser.parse_args(argv)
    if args.folder is None:
        print("Available folders:\n  " + "\n  ".join(track_folders()))
        return 2
    if (args.report or args.solution) and not args.compare:
        raise UserError("--report and --solution go with --compare")
    report_dir = args.report or str(Path("reports") / Path(args.folder.rstrip("/")).name)
    if args.compare:
        grading.solution_folder(Path(args.folder.rstrip("/")).name, args.solution)
        if args.report and not Path(report_dir).resolve().parent.is_dir():
            raise UserError(f"--report {report_dir}: directory {Path(report_dir).resolve().parent} does not exist")
    session = open_session(args, args.folder)
    expected = None if args.random_weights else expected_text(args)

    for i in range(args.warmup):
        ms, _ = time_transcription(session, args)
        print(f"  Warmup {i + 1}: {ms:.1f}ms")
    runs, tokens = [], []
    for i in range(args.runs):
        ms, tokens = time_transcription(session, args)
        runs.append(ms)
        print(f"  Run {i + 1}: {ms:.1f}ms ({len(tokens)} tokens)")

    mean = statistics.fmean(runs)
    std = statistics.stdev(runs) if len(runs) > 1 else 0.0
    text = decode(session.checkpoint.processor, tokens)
    wer = None if expected is None else word_error_rate(text, expected)
    if args.random_weights:
        status, code = "NOT CHECKED (random weights)", 0
    elif expected is None:
        status, code = "NOT CHECKED (no expected transcription given)", 0
    elif wer == 0.0:
        status, code = "PASS", 0
    else:
        status, code = "FAIL - Transcription does not match expected", 1
    # --allow-reference: the example's kernels stood in for unwritten ones; never a plain PASS then.
    substituted = teaching.substituted()
    if substituted:
        names = ", ".join(substituted)
        status = f"PASS WITH REFERENCE KERNELS ({names})" if status == "PASS" else f"{status} (reference kernels: {names})"

    print("=" * 60)
    print("RESULTS")
    print("=" * 60)
    print(f"Ran: {session.folder.rstrip('/')}, {session.path} path, precision {session.precision.name}, "
          f"{session.device}")
    print(f"Time: {mean:.1f}ms (+/- {std:.1f}ms)")
    print(f"Tokens: {len(tokens)}")
    print(f"Speed: {mean / max(len(tokens), 1):.2f}ms/token")
    print(f"Transcription: {text}")
    if expected is not None:
        print(f"Expected: {expected}")
        print(f"Accuracy: {accuracy(wer) * 100:.1f}%")
    if substituted:
        print(f"Reference kernels: {len(substituted)} of the example's kernels ran in place of unwritten ones "
              f"({names})")
    print(f"Status: {status}")
    if args.profile:
        from glm_asr_common.profiling import print_component_summary

        print_component_summary(session, args)

    if args.compare:
        report = grading.compare(session, args, {"runs_ms": runs, "token_ids": tokens, "status": status,
                                                 "transcription": text})
        grading.print_summary(report)
        print(f"Report: {grading.write_report(report, report_dir)} (with report.json"
              f"{', roofline.png' if (Path(report_dir) / 'roofline.png').is_file() else ''})")

    if args.json:
        write_json(args.json, {
            "folder": args.folder.rstrip("/"), "path": session.path, "model": session.checkpoint.description,
            "precision": session.precision.name, "precision_description": session.precision.description,
            "dtype": session.precision.dtype_name, "device": session.device,
            "audio_seconds": round(session.audio_seconds, 3), "runs_ms": runs, "mean_ms": mean, "std_ms": std,
            "tokens": len(tokens), "ms_per_token": mean / max(len(tokens), 1),
            "token_ids": tokens, "transcription": text, "expected": expected, "wer": wer,
            "accuracy": None if wer is None else accuracy(wer), "status": status,
            "substituted_kernels": substituted,
        })
    return code


if __name__ == "__main__":
    run_cli(main)
