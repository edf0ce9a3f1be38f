#!/usr/bin/env python3
"""Transcribe one audio file with a track folder, time it, and check the transcription.

    python benchmark_student.py glm_asr_triton_example [--precision bf16] [--path course] [--runs 3] [--json out.json]
    python benchmark_student.py glm_asr_triton_template --compare [--report DIR]     (the grader's report)
    python benchmark_student.py glm_asr_triton_template --self-check [KERNEL|FILE ...]  (every kernel file's self-check)

Timing covers one whole transcription (encoder, projector, prefill, every decode step), GPU-synchronised,
after --warmup untimed runs; model load and feature extraction are reported on their own lines. On a
CPU, where the kernels run in the Triton interpreter or the cuTile emulator, the defaults are 5 new
tokens, no warm-up and 1 run (the header says so) and each run counts its tokens as they come.
A real checkpoint is checked by its transcript. Random weights (--random-weights, or a checkpoint this
project built, such as python -m glm_asr_course.reference.tiny_checkpoint DIR) have none: the status reads NOT
CHECKED (random weights) and the check is whether the ids equal transformers' in IEEE fp32 on the same
checkpoint, inputs and token limits (glm_asr_course/verdict.py); only an --precision fp32 run (the CPU
default) is held to it, bf16 and tf32 round and are shown the line for information.
--compare also runs every course kernel's self-check in the folder and in the solution (the example),
times the solution's course and fast paths and transformers on the same inputs, and writes a report
(Markdown, JSON, roofline plot; glm_asr_lab/grading/compare_report.py) to --report (default reports/FOLDER).
Exit codes: 0 PASS, not checked, or random weights whose ids equal transformers' fp32; 1 transcription
mismatch, or an fp32 run on random weights whose ids differ; 2 bad input, or in a template a TODO
kernel that was launched (--allow-reference KERNEL|all runs the example's kernel in its place; with
--compare the report is written first, its TODO rows counted).
"""

from pathlib import Path

from glm_asr_course.kernels import todo_kernels
from glm_asr_course.command_line import (ArgumentParser, RunOptions, add_common_args, load_track_model, prepare_session, time_runs,
                                         write_json)
from glm_asr_course.errors import UserError, run_cli
from glm_asr_course.timer import spread
from glm_asr_course.model.frontend import decode
from glm_asr_course.tracks import track_folders
from glm_asr_course.reference.scoring import accuracy
from glm_asr_course.verdict import judge


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
    parser.add_argument("--self-check", nargs="*", metavar="KERNEL|FILE",
                        help="instead of a transcription, run the self-check of every kernel file of the folder "
                             "(or of the files holding these kernels, or these files) in turn; exit 1 unless all pass")
    args = parser.parse_args(argv)
    if args.folder is None:
        print("Available folders:\n  " + "\n  ".join(track_folders()))
        return 2
    if args.self_check is not None:
        from glm_asr_course.kernels.self_check import check_folder

        return check_folder(args.folder, args.self_check)
    if (args.report or args.solution) and not args.compare:
        raise UserError("--report and --solution go with --compare")
    report_dir = args.report or str(Path("reports") / Path(args.folder.rstrip("/")).name)
    if args.compare:  # the grader's report: the lab's code, imported for it alone
        from glm_asr_lab.grading import compare_report

        compare_report.solution_folder(Path(args.folder.rstrip("/")).name, args.solution)
        if args.report and not Path(report_dir).resolve().parent.is_dir():
            raise UserError(f"--report {report_dir}: directory {Path(report_dir).resolve().parent} does not exist")
    session = prepare_session(RunOptions.from_args(args), args.folder)
    try:
        load_track_model(session)
        runs, tokens = time_runs(session.model, session.inputs, session.options, session.device)
    except todo_kernels.KernelTodo as todo:
        if args.compare:  # the report still has every self-check row, the TODO ones counted
            write_report(compare_report.compare(session, args.solution, compare_report.unfinished_run(todo)), report_dir)
        raise

    times = spread(runs)
    mean, std = times["mean_ms"], times["std_ms"]
    text = decode(session.checkpoint.processor, tokens)
    verdict = judge(session, tokens, text)
    substituted = session.references.substituted()

    print("=" * 60)
    print("RESULTS")
    print("=" * 60)
    print(f"Ran: {session.folder.rstrip('/')}, {session.path} path, precision {session.precision.name}, "
          f"{session.device}")
    print(f"Time: {mean:.1f}ms" + (f" (+/- {std:.1f}ms over {len(runs)} runs)" if len(runs) > 1 else " (1 run)"))
    print(f"Tokens: {len(tokens)}")
    print(f"Speed: {mean / max(len(tokens), 1):.2f}ms/token")
    print(f"Transcription: {text}")
    if verdict.expected is not None:
        print(f"Expected: {verdict.expected}")
        print(f"Accuracy: {accuracy(verdict.wer) * 100:.1f}%")
    if substituted:
        print(f"Reference kernels: {len(substituted)} of the example's kernels ran in place of unwritten ones "
              f"({', '.join(substituted)})")
    print(f"Status: {verdict.status}")
    if verdict.ids_check is not None:
        print(verdict.ids_check.line())
    if args.profile:
        print_component_summary(session)

    ids_check = verdict.ids_check
    result = {
        "folder": args.folder.rstrip("/"), "path": session.path, "model": session.checkpoint.description,
        "precision": session.precision.name, "precision_description": session.precision_description,
        "dtype": session.precision.dtype_name, "device": session.device,
        "audio_seconds": round(session.audio_seconds, 3), "runs_ms": runs, "mean_ms": mean, "std_ms": std,
        "tokens": len(tokens), "ms_per_token": mean / max(len(tokens), 1),
        "token_ids": tokens, "transcription": text, "expected": verdict.expected, "wer": verdict.wer,
        "accuracy": None if verdict.wer is None else accuracy(verdict.wer), "status": verdict.status,
        "verdict": verdict.headline, "substituted_kernels": substituted,
        "random_weights": session.checkpoint.random_weights,
        "ids_equal_transformers_fp32": None if ids_check is None else ids_check.equal,
        "first_difference_at_token": None if ids_check is None else ids_check.first_difference,
        "transformers_fp32_token_ids": None if ids_check is None else ids_check.reference,
        "ids_check_decides_exit_code": None if ids_check is None else ids_check.decides,
    }
    if args.compare:
        write_report(compare_report.compare(session, args.solution, result), report_dir)
    if args.json:
        write_json(args.json, result)
    return verdict.code


def print_component_summary(session):
    """--profile: per-component lines, medians of --runs transcriptions with region timers."""
    from glm_asr_lab.measure.components import aggregate, timed_run

    device, options = session.device, session.options
    runs = [timed_run(session.model, session.inputs, options.max_new_tokens, options.min_new_tokens, device)[0]
            for _ in range(max(1, options.runs))]
    med = {k: v["median"] for k, v in aggregate(runs).items() if isinstance(v, dict)}
    graph = getattr(session.model, "use_cuda_graph", False) and device == "cuda"
    print("=" * 60)
    print(f"PROFILE (median of {len(runs)} runs; region timers, {'CUDA events' if device == 'cuda' else 'CPU clock'})")
    print("=" * 60)
    total = med["total"] or 1.0
    rows = [
        ("Encoder", med["encoder"], f"conv {med['encoder.conv']:.1f}, {len(runs[0]['layers.encoder'])} layers "
         f"{med['encoder.layers']:.1f}, norm {med['encoder.norm']:.1f}"),
        ("Projector", med["projector"], ""),
        ("Prefill", med["prefill"], f"embed {med['prefill.embed']:.1f}, {len(runs[0]['layers.prefill'])} layers "
         f"{med['prefill.layers']:.1f}, head {med['prefill.head']:.1f}"),
        ("Decode", med["decode"], f"{int(med['decode.steps'])} steps, {med['decode.step_median']:.2f} ms/step median"
         + (" (CUDA graph: per-layer split hidden)" if graph else
            f"; layers {med['decode.layers']:.1f}, head {med['decode.head']:.1f}")),
        ("Outside regions", med["outside"], "host loop, syncs, input copies"),
    ]
    for name, ms, detail in rows:
        print(f"{name + ':':<17}{ms:9.1f}ms {100 * ms / total:5.1f}%" + (f"  ({detail})" if detail else ""))
    print(f"{'Total:':<17}{med['total']:9.1f}ms  (components + outside; see benchmark_detailed.py for kernels)")


def write_report(report: dict, report_dir: str):
    from glm_asr_lab.grading import compare_report

    compare_report.print_summary(report)
    path = compare_report.write_report(report, report_dir)
    print(f"Report: {path} (with report.json{', roofline.png' if (path.parent / 'roofline.png').is_file() else ''})")


if __name__ == "__main__":
    run_cli(main)
