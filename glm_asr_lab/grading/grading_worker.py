"""One submission, or one baseline, graded in a process of its own: what the class grader starts.

    python -m glm_asr_lab.grading.grading_worker REQUEST_JSON        (started by class_grading.py)

This process runs the student's code, so it is the untrusted side: the grader (class_grading.py)
starts it from a scratch copy of the student's folder with a wall-clock limit, keeps what it prints
in a capped log, judges what it returns against the baselines and writes every file. Before any
student code is imported, standard output is moved onto standard error, so that whatever the
student's code prints goes to that log; the one JSON result goes to the original standard output at
the end. A worker that dies returns nothing, which the grader reads as a CRASH.

The request (one JSON argument) names the track folder, its track, and where it lies (``root``: the
scratch copy; None for the course's example, the baselines), the path to run ("course", "fast", or
"transformers" for transformers' model), the benchmark options every submission shares (the clip,
checkpoint, precision, device and token limits, parsed as benchmark.sh parses them), the case
subset, and the file descriptor of the pipe on which it announces its timed windows (integrity.py).

What it does, in this order, so that correctness is known before anything is timed:

1. cases (course path): every case of the course kernels' case table (kernel_cases.py) for the
   course kernels (course_model.COURSE_KERNELS), not the copy's own STUDENT_KERNELS (which a
   student could shorten); a kernel that raises is a FAIL row, an unwritten one a TODO row.
2. check run: one transcription; its ids and text, for the grader to compare with the baselines'.
3. timing (time_transcriptions), only when every case passed and the check run finished: each run's
   time and ids. The check run and each timed run are announced to the grader as they start and end,
   and what times them is watched for replacement (integrity.py), from before the submission's code
   is imported to the end: the grader believes a time only where its own clock agrees.
4. for the course baseline (``roofline``): the device's measured peaks and the roofline floor of a
   transcription of every length up to --max-new-tokens, for every submission's share of the floor.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import statistics
import sys

from glm_asr_lab.grading import integrity

# A file the worker writes may not exceed this (a student's runaway output file stops with an error
# instead of filling the disk); the caches and compiled kernels it writes are far smaller.
MAX_FILE_BYTES = 1 << 30

# GPU timing: each run after the L2 cache was flushed, between CUDA events; runs repeat until the
# standard error of their mean is under TARGET_RELATIVE_ERROR of it (at least MIN_RUNS runs), or the
# runs took TIME_CAP_S in all, or MAX_RUNS ran.
MIN_RUNS, MAX_RUNS, TARGET_RELATIVE_ERROR, TIME_CAP_S = 3, 50, 0.01, 30.0


def time_transcriptions(generate, inputs, announce) -> tuple[list[float], list[list[int]], str]:
    """The timed runs of ``generate`` (one whole transcription of a fresh copy of ``inputs``, its ids
    returned): their ms, their ids, and how they were timed. GPU only: on a CPU the check run is the one run.

    One warm-up beyond the check run (which compiled the kernels), then runs between CUDA events, each
    after an L2 flush so that no run starts with the previous one's weights cached, until the mean is
    known to TARGET_RELATIVE_ERROR or the cap (timed_runs). Each run is announced (integrity.py) and
    gets its own copy of the inputs, made beforehand, so that a result kept by the inputs' identity
    from an earlier run does not fit."""
    import copy

    copies = [copy.deepcopy(inputs) for _ in range(MAX_RUNS + 1)]
    generate(copies.pop())
    ids = []
    runs = timed_runs(lambda: ids.append(generate(copies.pop())), announce)
    return runs, ids, (f"CUDA events, L2 flushed before each run, 1 warm-up, {len(runs)} runs (until the standard "
                       f"error is under {TARGET_RELATIVE_ERROR:.0%} of the mean, or {TIME_CAP_S:g} s of runs)")


def timed_runs(run, announce) -> list[float]:
    """ms of calls of ``run`` (GPU), each after an L2 flush, repeated until the standard error of their
    mean is under TARGET_RELATIVE_ERROR of it (after at least MIN_RUNS), or TIME_CAP_S, or MAX_RUNS.
    Each call is announced before its start mark and after the whole device (every stream) finished it."""
    import time

    import torch

    from glm_asr_course import timer

    flush = torch.empty(timer.L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    torch.cuda.synchronize()
    runs, started = [], time.perf_counter()
    while len(runs) < MAX_RUNS:
        flush.zero_()  # queued ahead of the start mark: the GPU is still flushing when the run's launches arrive
        announce("start run")
        start = timer.mark("cuda")
        run()
        end = timer.mark("cuda")
        torch.cuda.synchronize()
        announce("end run")
        runs.append(timer.ms_between(start, end))
        if len(runs) < MIN_RUNS:
            continue
        standard_error = statistics.stdev(runs) / len(runs) ** 0.5
        if standard_error <= TARGET_RELATIVE_ERROR * statistics.fmean(runs) or time.perf_counter() - started > TIME_CAP_S:
            break
    return runs


def run_cases(folder: str, track_name: str, subset: list[str] | None) -> list[dict]:
    from glm_asr_course.kernels import self_check
    from glm_asr_course.model.course_model import COURSE_KERNELS
    from glm_asr_lab.grading.compare_report import kernel_rows

    track = self_check.load_track(folder)  # imports a scratch copy by spec (tracks.import_folder)
    track.student_kernels = COURSE_KERNELS
    return kernel_rows(track, subset)


def check_and_time(session, path: str, time_it: bool, announce, tripwire) -> dict:
    """The check run and, when ``time_it``, the timed runs (on a CPU the check run is the one timed run);
    what stopped them, if anything did. Both are announced (integrity.py); the tripwire looks after the
    model is loaded, after the check run and after the timed runs."""
    from glm_asr_course.kernels import todo_kernels
    from glm_asr_course.kernels.self_check import one_line
    from glm_asr_course.model.frontend import decode
    from glm_asr_course.command_line import load_track_model, timed_generate

    try:
        if path == "transformers":
            from glm_asr_course.reference.hf_model import HFTrack, raw_config

            ckpt = session.checkpoint
            session.model = HFTrack(raw_config(session.options.model, session.options.random_weights), ckpt.weights,
                                    ckpt.config, session.device, session.precision)
        else:
            load_track_model(session)
        tripwire.check_model(session.model, path, "after the model was loaded")
        announce("start check")
        check_ms, ids = timed_generate(session.model, session.inputs, session.options, session.device)
        announce("end check")
        tripwire.check("after the check run")
        print(f"Check run: {check_ms:.1f} ms, {len(ids)} tokens", flush=True)
        run = {"status": "RUN", "token_ids": ids, "transcription": decode(session.checkpoint.processor, ids),
               "check_ms": check_ms, "runs_ms": [], "run_ids": [], "timing": "not timed: a case did not pass"}
        if time_it and session.device != "cuda":
            run.update(runs_ms=[check_ms], run_ids=[ids],
                       timing="CPU: the check run, host clock; interpreter or emulator times say nothing of a GPU")
        elif time_it:
            run["runs_ms"], run["run_ids"], run["timing"] = time_transcriptions(
                lambda inputs: session.model.generate(inputs, session.options.max_new_tokens,
                                                      session.options.min_new_tokens)[0],
                session.inputs, announce)
            tripwire.check("after the timed runs")
            tripwire.check_model(session.model, path, "after the timed runs")
        if run["runs_ms"]:
            print(f"Timed: {statistics.fmean(run['runs_ms']):.1f} ms ({run['timing']})", flush=True)
        return run
    except todo_kernels.KernelTodo as todo:
        return {"status": "TODO", "unwritten_kernel": todo.kernel, "note": str(todo)}
    except Exception as error:  # a kernel that fails to compile or run in the model: the run stops here
        return {"status": "ERROR", "note": one_line(error)}


def grade(request: dict) -> dict:
    from glm_asr_course.command_line import ArgumentParser, RunOptions, add_common_args, prepare_session, resolve_device
    from glm_asr_lab.grading.compare_report import run_header
    from glm_asr_course.tracks import add_track_root, use_device

    folder, path = request["folder"], request["path"]
    parser = ArgumentParser(prog="grading_worker")
    add_common_args(parser, runs_default=1)
    # Timing follows time_transcriptions' rules, not --warmup / --runs; transformers' inputs come
    # from the course path's session.
    options = RunOptions.from_args(parser.parse_args([*request["benchmark_argv"], "--warmup", "0", "--runs", "1",
                                                      "--path", "fast" if path == "fast" else "course"]))
    use_device(resolve_device(options.device))  # before the track's kernel language is imported
    if request["root"]:
        add_track_root(request["root"])
    tripwire = integrity.Tripwire(sys.modules[__name__])  # before any code of the submission is imported
    announce = integrity.Announcer(request["announce_fd"])
    result = {"rows": None, "floors": None, "peaks": None}
    if path == "course":
        result["rows"] = run_cases(folder, request["track"], request["cases"])
        tripwire.check("after its import and its cases")
    session = prepare_session(options, folder)
    passed = all(row["status"] == "PASS" for row in result["rows"] or [])
    result["e2e"] = check_and_time(session, path, passed, announce, tripwire)
    result["replaced"] = tripwire.replaced()
    result["header"] = run_header(session)
    result["random_weights"] = session.checkpoint.random_weights
    if path == "transformers":
        session.model = None  # one transformers model in memory at a time: the fp32 one comes next
        result["transformers_fp32"] = transformers_fp32_ids(session, result["e2e"])
    if request["roofline"]:
        from glm_asr_lab.measure import roofline
        from glm_asr_lab.grading.compare_report import peaks_summary, roofline_floor

        peaks = roofline.device_peaks(session.device)
        result["peaks"] = peaks_summary(peaks, session.precision.name)
        result["floors"] = {str(n): roofline_floor(session, n, peaks) for n in range(session.options.max_new_tokens + 1)}
    return result


def transformers_fp32_ids(session, run: dict) -> dict:
    """transformers' IEEE fp32 ids on the same inputs (the check run's when it ran in fp32), or why none."""
    from glm_asr_course.verdict import check_against_transformers

    if session.precision.name == "fp32" and run["status"] == "RUN":
        return {"ids": run["token_ids"], "not_compared": ""}
    check = check_against_transformers(session, [])
    return {"ids": check.reference, "not_compared": check.not_compared}


def main(argv=None) -> int:
    request = json.loads((sys.argv[1:] if argv is None else argv)[0])
    results = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)  # from here on, anything printed goes to the log the grader keeps
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    limit = MAX_FILE_BYTES if hard == resource.RLIM_INFINITY else min(MAX_FILE_BYTES, hard)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit raises OSError instead of killing
    result = grade(request)
    results.write(json.dumps(result))
    results.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
