#!/usr/bin/env python3
"""Where the time of one transcription goes: components, layers, kernels, roofline verdicts.

    python benchmark_detailed.py glm_asr_triton_example [--precision bf16] [--runs 10]
        [--compare glm_asr_scratch] [--baseline hf] [--json out.json] [--csv ops.csv] [--plot DIR]
    python benchmark_detailed.py glm_asr_cutile_example --compare glm_asr_cutile_example:course
        --compare glm_asr_cutile_example:cupy        (fused kernels, course kernels, plain CuPy)
    python benchmark_detailed.py FOLDER --attention-only | --linear-only [--seq-len N]
    python benchmark_detailed.py FOLDER --nsys

Measurements, in this order, all after --warmup untimed transcriptions (compilation never counted);
the modules of glm_asr_lab.measure take them, this file parses the options and prints:
  1. end to end: --runs transcriptions, synchronised (timer: CUDA events on a GPU): median, quartiles, min/max;
  2. components: --runs transcriptions with region timers (components.RegionTimer: a timer mark at every
     region entry/exit): encoder, projector, prefill, decode steps, per layer;
  3. operators: one transcription under torch.profiler, read from its Chrome trace (trace); every kernel
     attributed to its innermost region (on a CPU: every torch op's self time), grouped per phase and
     kernel name (operators), with FLOPs and bytes of the logical operations (roofline) and a roofline
     verdict against measured peaks;
  4. a track that replays CUDA graphs (model.use_cuda_graph: the decode step, maybe the whole prompt
     phase): 1 and 2 as it runs, its graph launches counted in one profiled run, then the parts, the
     per-layer split (no region runs inside a replay) and 3 with use_cuda_graph=False (breakdown).
--attention-only / --linear-only: micro; --plot: plots.
Exit codes: 0 done, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from glm_asr_course.errors import UserError, run_cli
from glm_asr_lab.measure import roofline
from glm_asr_lab.measure.breakdown import build_report, comparison, decode_step_bytes, measure
from glm_asr_lab.measure.micro import run_micro
from glm_asr_lab.measure.plots import fmt_ms, pyplot, write_plots
from glm_asr_course.timer import time_call
from glm_asr_course.model.precision import from_options
from glm_asr_course.reference.hf_model import HFTrack, raw_config
from glm_asr_course.command_line import (ArgumentParser, RunOptions, Session, add_common_args, check_output_path,
                                               open_session, positive_int, release, resolve_device,
                                               settle_run_options, write_json, write_output)
from glm_asr_course.tracks import REPO_ROOT, resolve_path, track_folders, track_paths

FOOTER = (
    "How to read this: AI = useful FLOPs per byte of minimum memory traffic (glm_asr_lab/measure/roofline.py);\n"
    "below the ridge point (peak FLOP/s / peak bandwidth = {ridge:.0f} FLOP/B) the best a kernel can be is\n"
    "memory-bound, above it compute-bound; latency-bound = under 10% of both peaks with short launches.\n"
    "%roof = achieved / attainable at that AI. '~' = the class's useful work split over its kernels by time;\n"
    "'no kernel' = the class's work is done inside other kernels (fused) or by other classes' ops (decomposed).")


def fmt_num(x: float | None, scale: float = 1.0, digits: int = 1) -> str:
    if x is None:
        return "-"
    v = x / scale
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) < 0.01:
        return f"{v:.1e}"
    return f"{v:.{digits}f}" if abs(v) >= 1 else f"{v:.3f}"


def table(headers: list[str], rows: list[list], left: int = 1) -> str:
    """Fixed-width columns: the first ``left`` (names) and any "verdict" column left-aligned, numbers right."""
    cells = [[str(c) for c in row] for row in [headers] + rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) if i < left or headers[i] == "verdict" else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in cells]
    return "\n".join(lines[:1] + ["  ".join("-" * w for w in widths)] + lines[1:])


def banner(title: str):
    print("\n" + "=" * 100 + f"\n{title}\n" + "=" * 100)


def iqr(q1: float, q3: float) -> str:
    return f"{fmt_ms(q1)}-{fmt_ms(q3)}"


def open_hf_session(like: Session) -> Session:
    """A Session for transformers with the same checkpoint, inputs, device and options as ``like``."""
    ckpt, options = like.checkpoint, like.options  # the very same canonical weights the folder was measured with
    load_ms, model = time_call(lambda: HFTrack(raw_config(options.model, options.random_weights), ckpt.weights,
                                               ckpt.config, like.device, like.precision), like.device)
    print(f"Baseline: transformers GlmAsrForConditionalGeneration (sdpa), same weights; load {load_ms / 1000:.1f}s")
    return Session("transformers (hf)", "hf", like.device, like.precision, like.precision_description, ckpt,
                   like.inputs, like.audio_seconds, like.features_ms, load_ms / 1000, options, model=model,
                   path_summary="transformers' GlmAsrForConditionalGeneration")


def split_track(spec: str) -> tuple[str, str | None]:
    """"folder" or "folder:path" -> (folder name, path or None)."""
    folder, _, path = spec.partition(":")
    return folder.rstrip("/").split("/")[-1], path or None


def print_report(rep: dict, peaks, top: int = 30):
    cpu = rep["device"] == "cpu"
    kcol = "CPU ms (prof.)" if cpu else "kernel ms"
    e, t, d = rep["end_to_end"], rep["component_totals"], rep["decode_step"]
    banner(f"DETAILED BENCHMARK: {rep['label']}")
    print(f"Model: {rep['model']} (precision {rep['precision']}, {rep['device']})")
    print(f"Input: {rep['audio_seconds']:.2f}s audio, {rep['windows']} window(s) of {rep['mel_frames']} mel frames, "
          f"prompt {rep['prompt_len']} tokens; {rep['tokens']} tokens generated ({rep['decode_steps']} decode steps)")
    if rep["transcription"]:
        print(f"Transcription: {rep['transcription']}")
    print(f"Peaks: {peaks.describe()}")
    print(f"Ridge point ({rep['precision']}): {peaks.ridge(rep['precision']):.0f} FLOP/byte")
    print(f"Runs: {rep['warmup']} warm-up, then {rep['runs']} plain and {rep['runs']} region-timed runs "
          f"(alternating) + 1 profiled ({rep['profiled_run']})")

    print("\n== End to end ==")
    print(f"  {fmt_ms(e['median_ms'])} ms median  [IQR {iqr(e['q1_ms'], e['q3_ms'])}, min {fmt_ms(e['min_ms'])}, "
          f"max {fmt_ms(e['max_ms'])}] over {len(e['runs_ms'])} runs; {fmt_ms(e['ms_per_token'])} ms/token")

    print(f"\n== Components (median of {rep['runs']} runs with region timers; {kcol} from the profiled run) ==")
    rows = [["  " * r["level"] + r["name"] + (" †" if r["graph_off"] else " ‡" if r["in_graph"] else ""),
             fmt_ms(r["wall_ms"]), iqr(r["q1_ms"], r["q3_ms"]), f"{r['pct']:.1f}%", fmt_ms(r["kernel_ms"])]
            for r in rep["components"]]
    share = f"{100 * t['sum_ms'] / t['end_to_end_ms']:.1f}%" if t["end_to_end_ms"] else ""
    rows += [["decode step (median; not added)", fmt_ms(d["median_ms"]), iqr(d["q1_ms"], d["q3_ms"]), "",
              fmt_ms(d["kernel_median_ms"])],
             ["sum of the top-level rows", fmt_ms(t["sum_ms"]), "", share, fmt_ms(t["kernel_sum_ms"])],
             ["end to end of these runs / profiled run", fmt_ms(t["end_to_end_ms"]),
              iqr(t["end_to_end_q1_ms"], t["end_to_end_q3_ms"]), "100.0%", fmt_ms(t["profiled_wall_ms"])],
             ["unexplained remainder (e2e - sum)", fmt_ms(t["remainder_ms"]), "", f"{t['remainder_pct']:.1f}%",
              fmt_ms(t["kernel_remainder_ms"])]]
    print(table(["component", "wall ms", "IQR", "% e2e", kcol], rows))
    notes = [f"Without region timers (the end-to-end runs above): {fmt_ms(t['plain_end_to_end_ms'])} ms, so the "
             f"timers cost {fmt_ms(t['timer_overhead_ms'])} ms (noise included).",
             "wall ms = time between region entry and exit (CUDA events / CPU clock) in the same runs; its "
             "remainder is only that medians do not add exactly."]
    if cpu:
        notes.append("CPU ms (prof.) = CPU time of the ranges in the profiled run (torch ops + Python inside them); "
                     "its remainder is host time outside every op.")
    else:
        notes.append("kernel ms = GPU kernel time attributed to the innermost region in the profiled run; its "
                     "remainder is GPU idle time (launch gaps, host work, syncs).")
    if not cpu and d["kernel_median_ms"] > 1.05 * d["median_ms"]:
        notes.append("kernel ms above wall ms: with programmatic dependent launch (Hopper and later) a kernel "
                     "starts before the previous one ends and its time includes that wait, so kernels overlap "
                     "and their sum exceeds the wall time; GLM_ASR_PDL=0 gives per-kernel times without overlap.")
    g = rep["cuda_graph"]
    if g:
        what = "parts and per-layer times" if g["prompt_graph"] else "decode parts and per-layer decode times"
        notes.append(f"† {what} come from runs with use_cuda_graph=False (a graph replay runs no region inside "
                     f"it): a step takes {fmt_ms(g['step_ms_with_graph'])} ms with the graph, "
                     f"{fmt_ms(g['step_ms_without_graph'])} ms without; their % e2e is of those runs' end to end. "
                     f"The {kcol} column and the kernel tables "
                     f"come from the profiled run with use_cuda_graph=False too; the run with graphs made "
                     f"{g['graph_launches']} graph launches and {g['kernels_outside_graphs']} other kernel launches.")
    if g and g["prompt_graph"]:
        notes.append(f"‡ ran inside the replayed prompt graph, so its wall time is in the prefill row "
                     f"({fmt_ms(g['prompt_ms_with_graph'])} ms for the whole prompt phase; "
                     f"{fmt_ms(g['prompt_ms_without_graph'])} ms without graphs).")
    print("\n".join("  " + note for note in notes))

    layers = rep["layers"]
    columns = ["encoder", "encoder_kernel_ms", "prefill", "prefill_kernel_ms", "decode", "decode_kernel_ms"]
    n = max(len(layers[c]) for c in columns)
    if n:
        source = (f"from {layers['decode_source']}" if layers["prompt_source"] == layers["decode_source"] else
                  f"encoder/prefill from {layers['prompt_source']}, decode from {layers['decode_source']}")
        print(f"\n== Per layer (wall ms, median over runs; decode = median over steps; {source}) ==")
        rows = [[str(i)] + [fmt_ms(layers[c][i]) if i < len(layers[c]) else "" for c in columns] for i in range(n)]
        rows.append(["mean"] + [fmt_ms(statistics.fmean(layers[c])) if layers[c] else "" for c in columns])
        k = "cpu" if cpu else "kern"
        print(table(["layer", "encoder", f"enc {k}", "prefill", f"pre {k}", "decode step", f"dec {k}"], rows))

    print_decode_launches(rep, peaks, top)

    ops = rep["operators"]
    unit = "CPU op self time" if cpu else "GPU kernels"
    print(f"\n== Operators ({unit} of 1 profiled transcription, {rep['profiled_run']}, grouped by phase and name; "
          f"top {min(top, len(ops))} of {len(ops)}) ==")
    rows = []
    for o in ops[:top]:
        shared = "~" if o["source"] == "model~" else ""
        name = " ".join(o["kernel"].split())
        rows.append([o["phase"], o["class"], name if len(name) <= 44 else name[:43] + "…", o["calls"],
                     fmt_ms(o["total_ms"]), f"{o['pct']:.1f}", fmt_num(o["mean_us"]),
                     shared + fmt_num(o["flops"], 1e9, 2), shared + fmt_num(o["bytes"], 1e6), fmt_num(o["intensity"]),
                     fmt_num(o["tflops"], 1, 2), fmt_num(o["gbps"]), fmt_num(o["pct_peak_flops"]),
                     fmt_num(o["pct_peak_bw"]), o["verdict"]])
    print(table(["phase", "class", "kernel", "calls", "ms", "%", "mean us", "GFLOP", "MB", "AI", "TFLOP/s", "GB/s",
                 "%pkFLOP", "%pkBW", "verdict"], rows, left=3))
    if len(ops) > top:
        print(f"  ... {len(ops) - top} more rows, {fmt_ms(sum(o['total_ms'] for o in ops[top:]))} ms in all "
              "(--csv has every row)")
    print(f"  total {fmt_ms(rep['kernel_time_ms'])} ms of {unit.lower()} in the profiled run")

    print("\n== Operator classes (per phase; the roofline points) ==")
    rows = [[c["phase"], c["class"], c["kernels"], c["calls"], fmt_ms(c["total_ms"]) if c["kernels"] else "-",
             f"{c['pct']:.1f}", fmt_num(c["flops"], 1e9, 2), fmt_num(c["bytes"], 1e6), fmt_num(c["intensity"]),
             fmt_num(c["tflops"], 1, 2), fmt_num(c["gbps"]), fmt_num(c["pct_roof"]), c["verdict"]]
            for c in rep["operator_classes"]]
    print(table(["phase", "class", "kernels", "calls", "ms", "%", "GFLOP", "MB", "AI", "TFLOP/s", "GB/s", "%roof",
                 "verdict"], rows, left=2))
    print("\n" + FOOTER.format(ridge=peaks.ridge(rep["precision"])))


def print_decode_launches(rep: dict, peaks, top: int):
    """The decode step as replayed from its CUDA graph, launch by launch (glm_asr_lab/measure/timeline.py)."""
    timeline = (rep["cuda_graph"] or {}).get("decode_launches")
    if not timeline:
        return
    launches = timeline["launches"]
    step_bytes = decode_step_bytes(rep)
    floor_us = step_bytes / peaks.bandwidth * 1e6
    span = timeline["span_us"]
    print(f"\n== Decode step, launch by launch (profiled run with graphs, median of {timeline['replays']} "
          f"replays; top {min(top, len(launches))} of {len(launches)} launches) ==")
    rows = [[" ".join(r["kernel"].split())[:44], "×".join(map(str, r["grid"])), r["block"][0] if r["block"] else "",
             f"{r['per_step']:g}", fmt_num(r["duration_us"]), fmt_num(r["added_us"]),
             f"{100 * r['added_us'] / span:.1f}" if span else "-"] for r in launches[:top]]
    print(table(["kernel", "grid", "threads", "per step", "duration us", "added us", "% of span"], rows, left=1))
    print(f"  span {fmt_num(span)} us (first start to last end); busy {fmt_num(timeline['busy_us'])} us; idle "
          f"{fmt_num(timeline['idle_us'])} us (no kernel running); kernel durations add up to "
          f"{fmt_num(timeline['kernel_sum_us'])} us. Floor: {fmt_num(floor_us)} us, the step's "
          f"{fmt_num(step_bytes, 1e6)} MB at the copy bandwidth.")
    print("  added us = how far a kernel's end lies past the latest end before it: the step waits that long for "
          "it. With programmatic dependent launch a kernel starts early and waits inside, so durations overlap; "
          "added times do not, and sum to the span.")


def print_comparison(cmp: dict):
    labels = cmp["labels"]
    base = labels[0]
    banner(f"COMPARISON: {' vs '.join(labels)}   (speed-up of {base} = other ms / {base} ms; > 1 means {base} is "
           "faster)")
    if len(set(cmp["tokens"])) > 1:
        print(f"  note: token counts differ ({', '.join(f'{l}: {t}' for l, t in zip(labels, cmp['tokens']))}); "
              "decode totals are not like for like (use --min-new-tokens N --max-new-tokens N)")
    versus = [f"{base} vs {label}" for label in labels[1:]]

    def cells(ms: list) -> list:
        return [fmt_ms(x) if x else "-" for x in ms] + [f"{x / ms[0]:.2f}x" if ms[0] > 0 and x > 0 else "-"
                                                         for x in ms[1:]]

    print(table(["component (wall ms, median)"] + labels + versus,
                [["  " * r["level"] + r["name"]] + cells(r["ms"]) for r in cmp["components"]]))
    print()
    print(table(["phase", "class (kernel ms)"] + labels + versus,
                [[r["phase"], r["class"]] + cells(r["ms"]) for r in cmp["classes"]], left=2))


CSV_COLUMNS = ["folder", "phase", "class", "kernel", "calls", "total_ms", "pct", "mean_us", "flops", "bytes",
               "source", "intensity", "tflops", "gbps", "pct_peak_flops", "pct_peak_bw", "pct_roof", "verdict"]


def write_csv(path: str, reports: list[dict]):
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(CSV_COLUMNS)
    writer.writerows([rep["label"]] + ["" if o.get(c) is None else o[c] for c in CSV_COLUMNS[1:]]
                     for rep in reports for o in rep["operators"])
    write_output(path, text.getvalue(), "--csv")


def print_micro(res: dict, peaks):
    banner(f"MICRO-BENCHMARKS: {', '.join(res['folders'])} vs torch ({res['precision']}, {res['device']}; median of "
           f"{res['runs']} calls{', cold L2' if res['device'] == 'cuda' else ''}; seq-len {res['seq_len']})")
    print(f"Peaks: {peaks.describe()}")
    gpu = res["device"] == "cuda"
    for sec in res["sections"]:
        print(f"\n== {sec['kind']} ==")
        headers = ["op", "shape", "GFLOP", "MB", "floor us", "torch us"]
        for f in res["folders"]:
            headers += [f"{f} us", "speed-up", "%roof", "verdict", "max err"]
        rows = []
        for r in sec["rows"]:
            row = [r["op"], r["shape"], fmt_num(r["flops"], 1e9, 3), fmt_num(r["bytes"], 1e6, 2),
                   fmt_num(r["floor_us"], 1, 1), fmt_num(r["torch_us"], 1, 1)]
            for i in r["impls"]:
                if i["us"] is None:
                    row += [i["note"][:30], "-", "-", "-", "-"]
                else:
                    tag = ("" if i["launcher"] else " (torch)") + ("*" if i["timing"] == "eager" and gpu else "")
                    row += [fmt_num(i["us"], 1, 1) + tag, f"{i['speedup_vs_torch']:.2f}x", fmt_num(i["pct_roof"]),
                            i["verdict"], f"{i['max_rel_error']:.1e}"]
            rows.append(row)
        print(table(headers, rows, left=2))
    print("\nfloor = max(FLOPs / peak FLOP/s, bytes / peak bandwidth) with the measured peaks; speed-up = torch us / "
          "folder us;\n(torch) = the folder has no public launcher for it, so torch itself is its kernel; max err = "
          "max|folder - torch| / max|torch| on the same inputs."
          + ("\nOn the GPU each call is a CUDA-graph replay (the kernels' time, not the launcher's); * = could not be "
             "captured, timed as launched." if gpu else ""))


def run_nsys(folder: str, options: RunOptions, nsys_output: str | None) -> int:
    nsys = shutil.which("nsys")
    if nsys is None:
        raise UserError("--nsys needs NVIDIA Nsight Systems, but `nsys` is not on PATH (install it or drop --nsys)")
    out = Path(nsys_output or f"nsys_{folder}_{options.precision}")
    passthrough = ["--audio", options.audio, "--model", options.model, "--precision", options.precision,
                   "--warmup", str(options.warmup), "--runs", str(min(options.runs, 3)),
                   "--max-new-tokens", str(options.max_new_tokens), "--min-new-tokens", str(options.min_new_tokens)]
    if options.device:
        passthrough += ["--device", options.device]
    if options.random_weights:
        passthrough.append("--random-weights")
    if options.expected is not None:
        passthrough += ["--expected", options.expected]
    cmd = [nsys, "profile", "--trace=cuda,nvtx", "--force-overwrite=true", "-o", str(out), sys.executable,
           str(REPO_ROOT / "benchmark_student.py"), folder] + passthrough
    print("Running: GLM_ASR_NVTX=1 " + " ".join(cmd))
    code = subprocess.call(cmd, env=dict(os.environ, GLM_ASR_NVTX="1"))
    if code != 0:
        raise UserError(f"nsys profile exited with status {code}")
    report = f"{out}.nsys-rep"
    print(f"\nNsight Systems report: {report}  (NVTX ranges: encoder, encoder.layer, ..., decoder.step)")
    subprocess.call([nsys, "stats", "--report", "nvtx_sum", report])
    print(f"Kernel summary: nsys stats --report cuda_gpu_kern_sum {report}; timeline: nsys-ui {report}")
    return 0


def main(argv) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0], prog="benchmark_detailed.py")
    parser.add_argument("folder", nargs="?", help="track folder, e.g. glm_asr_triton_example")
    add_common_args(parser, runs_default=10)
    parser.add_argument("--compare", metavar="FOLDER[:PATH]", action="append",
                        help="measure another folder, or another path (e.g. glm_asr_triton_example:course), "
                             "side by side; repeat for more columns (e.g. glm_asr_cutile_example:course and "
                             "glm_asr_cutile_example:cupy: the kernels against the plain CuPy baseline)")
    parser.add_argument("--baseline", choices=["hf"], help="hf: transformers' own model, same weights, as a column")
    parser.add_argument("--attention-only", action="store_true", help="micro-benchmark the attention kernels")
    parser.add_argument("--linear-only", action="store_true", help="micro-benchmark the linear kernels")
    parser.add_argument("--seq-len", type=positive_int, help="prompt length for the micro-benchmarks "
                        "(default: the audio's prompt length)")
    parser.add_argument("--csv", metavar="PATH", help="write the per-operator table as CSV")
    parser.add_argument("--plot", metavar="DIR", help="write roofline.png and components.png to DIR")
    parser.add_argument("--top", type=positive_int, default=30, help="operator rows printed (default 30)")
    parser.add_argument("--refresh-peaks", action="store_true", help="measure the device peaks again")
    parser.add_argument("--nsys", action="store_true", help="run benchmark_student.py under Nsight Systems")
    parser.add_argument("--nsys-output", metavar="PATH", help="report name for --nsys (default nsys_FOLDER_DTYPE)")
    args = parser.parse_args(argv)
    if args.folder is None:
        print("Available folders:\n  " + "\n  ".join(track_folders()))
        return 2
    device = resolve_device(args.device)
    options, cpu_defaults = settle_run_options(RunOptions.from_args(args), device)
    if cpu_defaults:
        print(cpu_defaults)
    # One name for the precision from here on (bf16, tf32, fp32): it picks the roof and the bytes.
    options = replace(options, precision=from_options(args.precision, args.dtype, device).name, dtype=None)
    tracks = [(args.folder.rstrip("/").split("/")[-1], args.path)] + [split_track(spec) for spec in args.compare or []]
    for folder, _ in tracks:
        if folder not in track_folders():
            raise UserError(f"unknown folder {folder!r}; choose one of: {', '.join(track_folders())}")
    if args.nsys:
        return run_nsys(tracks[0][0], options, args.nsys_output)
    check_output_path(args.json)
    check_output_path(args.csv, "--csv")
    if args.plot:
        pyplot(required_by="--plot")  # fail now, not after the measurements
    peaks = roofline.device_peaks(device, refresh=args.refresh_peaks)

    if args.attention_only or args.linear_only:
        if args.baseline:
            print("note: --baseline is for whole transcriptions; the micro-benchmarks compare with torch")
        kinds = [kind for kind, chosen in (("attention", args.attention_only), ("linear", args.linear_only)) if chosen]
        res = run_micro(options, kinds, args.seq_len, [folder for folder, _ in tracks], peaks, device)
        print_micro(res, peaks)
        if args.json:
            write_json(args.json, res)
        return 0

    # An unknown path, or a folder and path named twice, fails now, not after the first measurement.
    tracks = [(folder, resolve_path(folder, path)) for folder, path in tracks]
    for i, (folder, path) in enumerate(tracks[1:], 1):
        if (folder, path) in tracks[:i]:
            raise UserError(f"--compare {folder}:{path} names a folder and path already measured")
    reports, main_session = [], None
    for folder, path in tracks + ([("hf", None)] if args.baseline == "hf" else []):
        if folder == "hf":  # transformers on the main folder's inputs, device and weights
            session, label = open_hf_session(main_session), "transformers"
        else:
            session = open_session(replace(options, path=path), folder)
            label = folder if len(track_paths(folder)) == 1 else f"{folder}:{session.path}"
        reports.append(build_report(session, measure(session, label), peaks, label))
        if main_session is None:
            print_report(reports[0], peaks, args.top)
            main_session = session
        session.model = None
        del session
        release(device)
    cmp = comparison(reports) if len(reports) > 1 else None
    if cmp:
        print_comparison(cmp)
        print("\n(full per-operator tables of every column: --json / --csv)")
    if args.csv:
        write_csv(args.csv, reports)
        print(f"Per-operator CSV: {args.csv}")
    if args.plot:
        for p in write_plots(args.plot, reports, peaks):
            print(f"Plot: {p}")
    if args.json:
        write_json(args.json, reports[0] | {"peaks": peaks.to_json(), "others": reports[1:], "comparison": cmp})
        print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    run_cli(main)
