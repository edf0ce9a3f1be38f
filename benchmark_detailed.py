#!/usr/bin/env python3
"""Where the time of one transcription goes: components, layers, kernels, roofline verdicts.

    python benchmark_detailed.py glm_asr_triton_example [--precision bf16] [--runs 10]
        [--compare glm_asr_scratch] [--baseline hf] [--json out.json] [--csv ops.csv] [--plot DIR]
    python benchmark_detailed.py glm_asr_cutile_example --compare glm_asr_cutile_example:course
        --compare glm_asr_cutile_example:cupy        (fused kernels, course kernels, plain CuPy)
    python benchmark_detailed.py FOLDER --attention-only | --linear-only [--seq-len N]
    python benchmark_detailed.py FOLDER --nsys

Measurements, in this order, all after --warmup untimed transcriptions (compilation never counted):
  1. end to end: --runs transcriptions, synchronised (CUDA events on a GPU): median, quartiles, min/max;
  2. components: --runs transcriptions with region timers (glm_asr_common.measure.profiling.RegionTimer: a CUDA
     event at every region entry/exit): encoder, projector, prefill, decode steps, per layer;
  3. operators: one transcription under torch.profiler, read from its Chrome trace; every kernel
     attributed to its innermost region (on a CPU: every torch op's self time), grouped per phase and
     kernel name, with FLOPs and bytes of the logical operations (glm_asr_common.measure.roofline) and a
     roofline verdict against measured peaks;
  4. a track that replays CUDA graphs (model.use_cuda_graph: the decode step, maybe the whole prompt
     phase) is measured again with the graphs off: the per-layer split (no region runs inside a
     replay), and the eager kernel order that places each replayed kernel in its region.
Exit codes: 0 done, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import csv
import functools
import gc
import importlib
import inspect
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from glm_asr_common.measure import roofline
from glm_asr_common.model import course_model
from glm_asr_common.tools.command_line import (ArgumentParser, add_common_args, check_json_path, open_session, positive_int,
                                resolve_device, settle_run_options, write_json)
from glm_asr_common.errors import UserError, run_cli
from glm_asr_common.model.frontend import decode as decode_text
from glm_asr_common.reference.hf_model import HFTrack, raw_config
from glm_asr_common.model.precision import from_options, get_precision
from glm_asr_common.measure.profiling import (aggregate, component_of, profile_run, quartiles, split_graph_replays, summarize,
                                      timed_run)
from glm_asr_common.tools.tracks import REPO_ROOT, resolve_path, track_folders, track_paths

PHASE_LABEL = {"encoder": "encoder", "projector": "projector", "prefill": "prefill", "decode": "decode",
               "outside": "outside"}
FOOTER = (
    "How to read this: AI = useful FLOPs per byte of minimum memory traffic (glm_asr_common/measure/roofline.py);\n"
    "below the ridge point (peak FLOP/s / peak bandwidth = {ridge:.0f} FLOP/B) the best a kernel can be is\n"
    "memory-bound, above it compute-bound; latency-bound = under 10% of both peaks with short launches.\n"
    "%roof = achieved / attainable at that AI. '~' = the class's useful work split over its kernels by time;\n"
    "'no kernel' = the class's work is done inside other kernels (fused) or by other classes' ops (decomposed).")


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def sync(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


def timed_generate(model, inputs, args, device) -> tuple[float, list[int]]:
    """One synchronised transcription: (ms, tokens of row 0). CUDA events on a GPU."""
    if device == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        tokens = model.generate(inputs, args.max_new_tokens, args.min_new_tokens)[0]
        end.record()
        end.synchronize()
        return start.elapsed_time(end), tokens
    start = time.perf_counter()
    tokens = model.generate(inputs, args.max_new_tokens, args.min_new_tokens)[0]
    return (time.perf_counter() - start) * 1000, tokens


def fmt_ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) >= 1 else f"{x:.3f}"


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


def short(name: str, width: int) -> str:
    name = " ".join(name.split())
    return name if len(name) <= width else name[: width - 1] + "…"


def table(headers: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """Fixed-width table: first column left-aligned, the rest right-aligned (align: 'l'/'r' per column)."""
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    def line(cells):
        return "  ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()
    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def release(device: str):
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def open_hf_session(args, like):
    """A Session-like object for transformers with the same checkpoint, inputs and device as ``like``."""
    from glm_asr_common.tools.command_line import Session

    start = time.perf_counter()
    ckpt = like.checkpoint  # the very same canonical weights the folder was measured with
    model = HFTrack(raw_config(args), ckpt.weights, ckpt.config, like.device, like.precision)
    sync(like.device)
    print(f"Baseline: transformers GlmAsrForConditionalGeneration (sdpa), same weights; load "
          f"{time.perf_counter() - start:.1f}s")
    return Session("transformers (hf)", "hf", like.device, like.precision, like.precision_description, ckpt,
                   like.inputs, like.audio_seconds, like.features_ms, time.perf_counter() - start,
                   model=model, path_summary="transformers' GlmAsrForConditionalGeneration")


# ---------------------------------------------------------------------------------------------
# Measurements of one folder
# ---------------------------------------------------------------------------------------------


def measure(session, args, label: str) -> dict:
    """End to end, components (region timers), one profiled run, and graph-off runs where relevant."""
    model, inputs, device = session.model, session.inputs, session.device
    print(f"[{label}] warm-up {args.warmup}, {args.runs} timed runs, {args.runs} component runs, 1 profiled run")
    for _ in range(args.warmup):
        timed_generate(model, inputs, args, device)
    if args.warmup == 0:  # the region timers and the profiler still never see the first-ever call
        print(f"[{label}] note: --warmup 0: the first timed run includes compilation / first-call costs")
    # Plain and region-timed runs alternate, so both sets see the same machine state (clocks, caches).
    e2e, tokens, component_runs = [], [], []
    for _ in range(args.runs):
        ms, tokens = timed_generate(model, inputs, args, device)
        e2e.append(ms)
        component_runs.append(timed_run(model, inputs, args.max_new_tokens, args.min_new_tokens, device)[0])
    profiled = profile_run(lambda: model.generate(inputs, args.max_new_tokens, args.min_new_tokens)[0], device)
    result = {"e2e": e2e, "tokens": tokens, "components": aggregate(component_runs), "profile": profiled,
              "graph": None}
    if device == "cuda" and getattr(model, "use_cuda_graph", False):
        print(f"[{label}] the model replays CUDA graphs: measuring again with use_cuda_graph=False for the "
              "per-region split of what the graphs run")
        model.use_cuda_graph = False
        try:
            timed_generate(model, inputs, args, device)
            runs = [timed_run(model, inputs, args.max_new_tokens, args.min_new_tokens, device)[0]
                    for _ in range(args.runs)]
            prof = profile_run(lambda: model.generate(inputs, args.max_new_tokens, args.min_new_tokens)[0], device)
        finally:
            model.use_cuda_graph = True
        # The replayed kernels of the profiled run, placed in the regions they have in the eager run.
        split_graph_replays(profiled, prof)
        result["graph"] = {"components": aggregate(runs), "profile": prof}
    return result


def needs_cupti_before_graphs() -> bool:
    """CUDA before 12 can break a graph captured before CUPTI first attached (pytorch issue 75504, the
    reason for torch.profiler._utils._init_for_cuda_graphs). On CUDA 12+ a profiler started after the
    capture records the replayed kernels (checked on an H200, CUDA 13), so nothing is opened early."""
    version = getattr(torch.version, "cuda", None)
    if getattr(torch.version, "hip", None) or not version:
        return False
    try:
        return int(str(version).split(".")[0]) < 12
    except ValueError:
        return False


def init_profiler_for_cuda_graphs():
    """On old CUDA only: attach CUPTI (an empty CPU+CUDA profiler session) before any graph is captured."""
    if not needs_cupti_before_graphs():
        return False
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        pass
    return True


def kernel_summary(profile) -> dict:
    return summarize(profile.regions, profile.wall_ms)


def has_kernels(profile) -> bool:
    """Whether a profiled run recorded any device work besides copies."""
    return any(roofline.kernel_class(k.name) != "copy" for k in profile.kernels)


# ---------------------------------------------------------------------------------------------
# Operators: kernels grouped per (phase, class, name), FLOPs/bytes, verdicts
# ---------------------------------------------------------------------------------------------


def classify(kernel, chain) -> tuple[str, str, str]:
    """(phase, part, class) of one kernel record."""
    if kernel.region < 0:
        phase, part = "outside", ""
    else:
        phase, part = component_of(chain)
    if kernel.name.startswith("(host"):
        return phase, part, "host"
    cls = roofline.torch_op_class(kernel.torch_op) if kernel.torch_op else None
    if cls is None or cls == "gemm" and roofline.kernel_class(kernel.name) == "copy":
        cls = roofline.kernel_class(kernel.name)
    if cls == "gemm" and part == "head":
        cls = "lm_head"
    return phase, part, cls


def operator_tables(profile, ops: list, peaks, dtype: str) -> tuple[list[dict], list[dict]]:
    """Per-operator rows (phase, class, kernel name) and per-class rows (phase, class)."""
    regions = profile.regions
    chains = {}
    groups: dict[tuple, dict] = {}
    for k in profile.kernels:
        if k.region not in chains:
            chains[k.region] = regions.chain(k.region) if k.region >= 0 else []
        phase, _part, cls = classify(k, chains[k.region])
        key = (phase, cls, k.name)
        if key not in groups:
            groups[key] = {"phase": phase, "class": cls, "kernel": k.name, "calls": 0, "ms": 0.0, "shape_flops": 0.0,
                           "shape_bytes": 0.0, "aux": roofline.is_aux_kernel(k.name), "seen": set(), "unshaped": False}
        g = groups[key]
        if k.call is None or k.call not in g["seen"]:
            g["calls"] += 1
            if k.call is not None:
                g["seen"].add(k.call)
        g["ms"] += k.ms
        g["unshaped"] |= k.cost is None
        if k.cost is not None:
            g["shape_flops"] += k.cost[0]
            g["shape_bytes"] += k.cost[1]
    logical = roofline.by_class(ops)
    total_ms = sum(g["ms"] for g in groups.values()) or 1.0
    # FLOPs/bytes per row: recorded shapes, else the class's logical work split by time.
    for g in groups.values():
        g["flops"] = g["bytes"] = None
        g["source"] = "-"
        if not g["unshaped"] and not g["aux"]:
            g["flops"], g["bytes"], g["source"] = g["shape_flops"], g["shape_bytes"], "shapes"
    by_class: dict[tuple, list] = {}
    for g in groups.values():
        by_class.setdefault((g["phase"], g["class"]), []).append(g)
    for key, rows in by_class.items():
        if key not in logical:
            continue
        lf, lb = logical[key]
        shaped = [g for g in rows if g["source"] == "shapes"]
        rest = [g for g in rows if g["source"] == "-" and not g["aux"]]
        if not rest:
            continue
        rf = max(0.0, lf - sum(g["flops"] for g in shaped))
        rb = max(0.0, lb - sum(g["bytes"] for g in shaped))
        rest_ms = sum(g["ms"] for g in rest) or 1.0
        for g in rest:
            share = g["ms"] / rest_ms
            g["flops"], g["bytes"] = rf * share, rb * share
            g["source"] = "model" if len(rest) == 1 and not shaped else "model~"
    operators = []
    for g in sorted(groups.values(), key=lambda g: -g["ms"]):
        roof = roofline.assess(g["flops"], g["bytes"], g["ms"] / 1000, g["calls"], peaks, dtype)
        if g["class"] == "host":
            roof.verdict = "host (Python)"
        operators.append({
            "phase": g["phase"], "class": g["class"], "kernel": g["kernel"], "calls": g["calls"],
            "total_ms": g["ms"], "pct": 100 * g["ms"] / total_ms, "mean_us": 1000 * g["ms"] / g["calls"],
            "flops": g["flops"], "bytes": g["bytes"], "source": g["source"], "aux": g["aux"],
            "intensity": roof.intensity, "tflops": None if roof.achieved_flops is None else roof.achieved_flops / 1e12,
            "gbps": None if roof.achieved_bw is None else roof.achieved_bw / 1e9, "pct_peak_flops": roof.pct_flops,
            "pct_peak_bw": roof.pct_bw, "pct_roof": roof.pct_roof, "verdict": roof.verdict,
        })
    classes = []
    keys = set(by_class) | set(logical)
    order = {p: i for i, p in enumerate(roofline.PHASES)}
    corder = {c: i for i, c in enumerate(roofline.CLASSES + ("host",))}
    for key in sorted(keys, key=lambda k: (order.get(k[0], 99), corder.get(k[1], 99))):
        rows = by_class.get(key, [])
        ms = sum(g["ms"] for g in rows)
        calls = sum(g["calls"] for g in rows)
        have = [g for g in rows if g["flops"] is not None]
        if rows:
            flops = sum(g["flops"] for g in have) if have else None
            nbytes = sum(g["bytes"] for g in have) if have else None
        else:
            flops, nbytes = logical[key]
        roof = roofline.assess(flops, nbytes, ms / 1000, calls, peaks, dtype) if rows else None
        if key[1] == "host":
            roof.verdict = "host (Python)"
        classes.append({
            "phase": key[0], "class": key[1], "kernels": len(rows), "calls": calls, "total_ms": ms,
            "pct": 100 * ms / total_ms, "flops": flops, "bytes": nbytes,
            "model_flops": logical.get(key, (None, None))[0], "model_bytes": logical.get(key, (None, None))[1],
            "intensity": None if roof is None else roof.intensity,
            "tflops": None if roof is None or roof.achieved_flops is None else roof.achieved_flops / 1e12,
            "gbps": None if roof is None or roof.achieved_bw is None else roof.achieved_bw / 1e9,
            "pct_peak_flops": None if roof is None else roof.pct_flops,
            "pct_peak_bw": None if roof is None else roof.pct_bw,
            "pct_roof": None if roof is None else roof.pct_roof,
            "verdict": "no kernel (fused/decomposed)" if roof is None else roof.verdict,
        })
    return operators, classes


# ---------------------------------------------------------------------------------------------
# Building one report
# ---------------------------------------------------------------------------------------------


def build_report(session, args, measured: dict, peaks, label: str) -> dict:
    device, inputs, cfg = session.device, session.inputs, session.checkpoint.config
    e2e = measured["e2e"]
    q1, med, q3 = quartiles(e2e)
    comp = measured["components"]
    prof = measured["profile"]
    graph = measured["graph"]
    op_note = ""
    if graph and not has_kernels(prof) and has_kernels(graph["profile"]):
        # The profiler recorded no kernel of the graphed run (a CUPTI problem): use the eager run's.
        prof = graph["profile"]
        op_note = ("the profiler recorded no kernels in the run with CUDA graphs, so kernels come from the "
                   "use_cuda_graph=False run")
        print(f"[{label}] note: {op_note}")
    elif prof.replayed_split[1]:
        placed, replayed = prof.replayed_split
        op_note = (f"{placed} of {replayed} kernels replayed from CUDA graphs are placed in the region they run in "
                   "with use_cuda_graph=False (matched by name and order)"
                   + (f"; the other {replayed - placed} count for the region around the replay" if placed < replayed
                      else ""))
    op_profile = prof
    kern = kernel_summary(prof)
    gcomp = graph["components"] if graph else None
    gkern = kernel_summary(graph["profile"]) if graph else None
    tokens = prof.tokens or measured["tokens"]
    steps = int(kern["decode.steps"]) if kern["decode.steps"] else max(len(tokens) - 1, 0)
    precision = args.precision
    # A prompt phase replayed as one CUDA graph runs no region inside it in the timed runs.
    prompt_graph = bool(graph) and comp["encoder"]["median"] == 0 and gcomp["encoder"]["median"] > 0
    ops = roofline.transcription_ops(cfg, windows=inputs.input_features.shape[0],
                                     mel_frames=inputs.input_features.shape[-1], prompt_len=inputs.input_ids.shape[1],
                                     decode_steps=steps, dtype=precision, batch=inputs.batch_size)
    operators, classes = operator_tables(op_profile, ops, peaks, precision)

    def m(agg, key):
        v = agg[key]
        return v["median"], v["q1"], v["q3"]

    rows = []

    total, total_q1, total_q3 = m(comp, "total")  # end to end of the region-timed runs themselves

    def add(name, key, level, note="", from_graph_off=False, in_graph=False):
        src, ksrc = (gcomp, gkern) if from_graph_off else (comp, kern)
        wm, wq1, wq3 = m(src, key)
        rows.append({"name": name, "key": key, "level": level, "wall_ms": wm, "q1_ms": wq1, "q3_ms": wq3,
                     "pct": 100 * wm / total if total else 0.0, "kernel_ms": ksrc.get(key, 0.0),
                     "note": note, "graph_off": from_graph_off, "in_graph": in_graph})

    lcomp = gcomp if prompt_graph else comp  # per-layer walls of the prompt phase
    n_enc, n_pre = len(lcomp["layers.encoder"]), len(lcomp["layers.prefill"])
    add("encoder", "encoder", 0, in_graph=prompt_graph)
    for part, name in (("conv", "conv"), ("layers", f"layers ({n_enc})"), ("norm", "norm"),
                       ("other", "other (in encoder, between parts)")):
        add(name, f"encoder.{part}", 1, from_graph_off=prompt_graph)
    add("projector", "projector", 0, in_graph=prompt_graph)
    add(f"prefill ({inputs.input_ids.shape[1]}-token prompt)", "prefill", 0)
    for part, name in (("embed", "embed"), ("layers", f"layers ({n_pre})"), ("head", "head"),
                       ("other", "other (in prefill, between parts)")):
        add(name, f"prefill.{part}", 1, from_graph_off=prompt_graph)
    add(f"decode ({steps} steps)", "decode", 0)
    for part, name in (("embed", "embed"), ("layers", "layers"), ("head", "head"), ("other", "other (in steps)")):
        add(name, f"decode.{part}", 1, from_graph_off=graph is not None)
    add("outside regions (host loop, syncs, copies)", "outside", 0)
    kernel_outside = sum(k.ms for k in prof.kernels if k.region < 0)
    rows[-1]["kernel_ms"] = kernel_outside
    top = [r for r in rows if r["level"] == 0]
    total_sum = sum(r["wall_ms"] for r in top)
    kernel_sum = sum(r["kernel_ms"] for r in top)
    step = comp["decode.step_median"]
    lkern = gkern if prompt_graph else kern
    layers = {
        "encoder": lcomp["layers.encoder"], "prefill": lcomp["layers.prefill"],
        "decode": (gcomp or comp)["layers.decode"],
        "prompt_source": ("use_cuda_graph=False runs" if prompt_graph else "the same runs"),
        "decode_source": ("use_cuda_graph=False runs" if graph else "the same runs"),
        "encoder_kernel_ms": lkern["layers.encoder"], "prefill_kernel_ms": lkern["layers.prefill"],
        "decode_kernel_ms": (gkern or kern)["layers.decode"],
    }
    processor = session.checkpoint.processor
    report = {
        "label": label, "folder": label.split(":")[0], "path": getattr(session, "path", None), "model": session.checkpoint.description,
        "precision": precision, "device": device,
        "device_name": peaks.device, "audio_seconds": round(session.audio_seconds, 3),
        "windows": int(inputs.input_features.shape[0]), "mel_frames": int(inputs.input_features.shape[-1]),
        "prompt_len": int(inputs.input_ids.shape[1]), "tokens": len(tokens), "decode_steps": steps,
        "token_ids": list(tokens), "transcription": decode_text(processor, tokens) if processor else "",
        "runs": args.runs, "warmup": args.warmup,
        "end_to_end": {"median_ms": med, "q1_ms": q1, "q3_ms": q3, "min_ms": min(e2e), "max_ms": max(e2e),
                       "runs_ms": e2e, "ms_per_token": med / max(len(tokens), 1)},
        "components": rows,
        "component_totals": {
            "sum_ms": total_sum, "end_to_end_ms": total, "end_to_end_q1_ms": total_q1, "end_to_end_q3_ms": total_q3,
            "remainder_ms": total - total_sum, "remainder_pct": 100 * (total - total_sum) / total if total else 0.0,
            "plain_end_to_end_ms": med, "timer_overhead_ms": total - med,
            "kernel_sum_ms": kernel_sum, "profiled_wall_ms": prof.wall_ms,
            "kernel_remainder_ms": prof.wall_ms - kernel_sum,
        },
        "decode_step": {"median_ms": step["median"], "q1_ms": step["q1"], "q3_ms": step["q3"], "steps": steps,
                        "kernel_median_ms": kern["decode.step_median"]},
        "layers": layers,
        "cuda_graph": None if not graph else {
            "step_ms_with_graph": step["median"], "step_ms_without_graph": gcomp["decode.step_median"]["median"],
            "decode_ms_without_graph": gcomp["decode"]["median"], "prompt_graph": prompt_graph,
            "prompt_ms_with_graph": comp["prefill"]["median"],
            "prompt_ms_without_graph": sum(gcomp[c]["median"] for c in ("encoder", "projector", "prefill")),
            "replayed_kernels": op_profile.replayed_split[1], "replayed_kernels_placed": op_profile.replayed_split[0]},
        "operators": operators,
        "operator_classes": classes,
        "operators_note": op_note,
        "kernel_time_ms": sum(k.ms for k in op_profile.kernels),
    }
    return report


def split_track(spec: str) -> tuple[str, str | None]:
    """"folder" or "folder:path" -> (folder name, path or None)."""
    folder, _, path = spec.partition(":")
    return folder.rstrip("/").split("/")[-1], path or None


def analyze(args, folder: str, peaks, hf_like=None) -> tuple[dict, object]:
    """Load ``folder`` (or transformers when hf_like is a session), measure, return (report, session)."""
    if hf_like is None:
        session = open_session(args, folder)
        label = folder.rstrip("/").split("/")[-1]
        if len(track_paths(label)) > 1:  # which path, where a folder has several (fast / course)
            label = f"{label}:{session.path}"
    else:
        session = open_hf_session(args, hf_like)
        label = "transformers"
    measured = measure(session, args, label)
    return build_report(session, args, measured, peaks, label), session


# ---------------------------------------------------------------------------------------------
# Text output
# ---------------------------------------------------------------------------------------------


def print_report(rep: dict, peaks, top: int = 30):
    device = rep["device"]
    cpu = device == "cpu"
    kcol = "CPU ms (prof.)" if cpu else "kernel ms"
    e = rep["end_to_end"]
    print()
    print("=" * 100)
    print(f"DETAILED BENCHMARK: {rep['label']}")
    print("=" * 100)
    print(f"Model: {rep['model']} (precision {rep['precision']}, {device})")
    print(f"Input: {rep['audio_seconds']:.2f}s audio, {rep['windows']} window(s) of {rep['mel_frames']} mel frames, "
          f"prompt {rep['prompt_len']} tokens; {rep['tokens']} tokens generated ({rep['decode_steps']} decode steps)")
    if rep["transcription"]:
        print(f"Transcription: {rep['transcription']}")
    print(f"Peaks: {peaks.describe()}")
    print(f"Ridge point ({rep['precision']}): {peaks.ridge(rep['precision']):.0f} FLOP/byte")
    print(f"Runs: {rep['warmup']} warm-up, then {rep['runs']} plain and {rep['runs']} region-timed runs (alternating) + 1 profiled")

    print("\n== End to end ==")
    print(f"  {fmt_ms(e['median_ms'])} ms median  [IQR {fmt_ms(e['q1_ms'])} - {fmt_ms(e['q3_ms'])}, "
          f"min {fmt_ms(e['min_ms'])}, max {fmt_ms(e['max_ms'])}] over {len(e['runs_ms'])} runs; "
          f"{fmt_ms(e['ms_per_token'])} ms/token")

    print(f"\n== Components (median of {rep['runs']} runs with region timers; {kcol} from the profiled run) ==")
    rows = []
    for r in rep["components"]:
        name = ("  " * r["level"]) + r["name"] + (" †" if r["graph_off"] else "") + (" ‡" if r.get("in_graph") else "")
        rows.append([name, fmt_ms(r["wall_ms"]), f"{fmt_ms(r['q1_ms'])}-{fmt_ms(r['q3_ms'])}",
                     f"{r['pct']:.1f}%", fmt_ms(r["kernel_ms"])])
    t = rep["component_totals"]
    d = rep["decode_step"]
    rows.append(["decode step (median; not added)", fmt_ms(d["median_ms"]), f"{fmt_ms(d['q1_ms'])}-{fmt_ms(d['q3_ms'])}",
                 "", fmt_ms(d["kernel_median_ms"])])
    rows.append(["sum of the top-level rows", fmt_ms(t["sum_ms"]), "", f"{100 * t['sum_ms'] / t['end_to_end_ms']:.1f}%"
                 if t["end_to_end_ms"] else "", fmt_ms(t["kernel_sum_ms"])])
    rows.append(["end to end of these runs / profiled run", fmt_ms(t["end_to_end_ms"]),
                 f"{fmt_ms(t['end_to_end_q1_ms'])}-{fmt_ms(t['end_to_end_q3_ms'])}", "100.0%",
                 fmt_ms(t["profiled_wall_ms"])])
    rows.append(["unexplained remainder (e2e - sum)", fmt_ms(t["remainder_ms"]), "", f"{t['remainder_pct']:.1f}%",
                 fmt_ms(t["kernel_remainder_ms"])])
    print(table(["component", "wall ms", "IQR", "% e2e", kcol], rows))
    print(f"  Without region timers (the end-to-end runs above): {fmt_ms(t['plain_end_to_end_ms'])} ms, so the "
          f"timers cost {fmt_ms(t['timer_overhead_ms'])} ms (noise included).")
    notes = []
    if cpu:
        notes.append("CPU ms (prof.) = CPU time of the ranges in the profiled run (torch ops + Python inside them); "
                     "its remainder is host time outside every op.")
    else:
        notes.append("kernel ms = GPU kernel time attributed to the innermost region in the profiled run; its "
                     "remainder is GPU idle time (launch gaps, host work, syncs).")
        if rep["decode_step"]["kernel_median_ms"] > 1.05 * rep["decode_step"]["median_ms"]:
            notes.append("kernel ms above wall ms: with programmatic dependent launch (Hopper and later) a kernel "
                         "starts before the previous one ends and its time includes that wait, so kernels overlap "
                         "and their sum exceeds the wall time; GLM_ASR_PDL=0 gives per-kernel times without overlap.")
    notes.append("wall ms = time between region entry and exit (CUDA events / CPU clock) in the same runs; its "
                 "remainder is only that medians do not add exactly.")
    if rep["cuda_graph"]:
        g = rep["cuda_graph"]
        what = "parts and per-layer times" if g.get("prompt_graph") else "decode parts and per-layer decode times"
        notes.append(f"† {what} come from runs with use_cuda_graph=False (a graph replay runs no region inside "
                     f"it): a step takes {fmt_ms(g['step_ms_with_graph'])} ms with the graph, "
                     f"{fmt_ms(g['step_ms_without_graph'])} ms without.")
        if g.get("prompt_graph"):
            notes.append(f"‡ ran inside the replayed prompt graph, so its wall time is in the prefill row "
                         f"({fmt_ms(g['prompt_ms_with_graph'])} ms for the whole prompt phase; "
                         f"{fmt_ms(g['prompt_ms_without_graph'])} ms without graphs).")
        if g.get("replayed_kernels"):
            placed, replayed = g["replayed_kernels_placed"], g["replayed_kernels"]
            notes.append(f"kernel ms of replayed graphs: {placed} of {replayed} kernels placed in the region they "
                         "run in with use_cuda_graph=False (same names, same order)"
                         + ("; the rest count for the region around the replay." if placed < replayed else "."))
    for n in notes:
        print("  " + n)

    L = rep["layers"]
    n = max(len(L["encoder"]), len(L["prefill"]), len(L["decode"]))
    if n:
        source = (f"from {L['decode_source']}" if L.get("prompt_source", L["decode_source"]) == L["decode_source"]
                  else f"encoder/prefill from {L['prompt_source']}, decode from {L['decode_source']}")
        print(f"\n== Per layer (wall ms, median over runs; decode = median over steps; {source}) ==")
        rows = []
        for i in range(n):
            cell = lambda lst: fmt_ms(lst[i]) if i < len(lst) else ""
            rows.append([str(i), cell(L["encoder"]), cell(L["encoder_kernel_ms"]), cell(L["prefill"]),
                         cell(L["prefill_kernel_ms"]), cell(L["decode"]), cell(L["decode_kernel_ms"])])
        mean = lambda lst: fmt_ms(statistics.fmean(lst)) if lst else ""
        rows.append(["mean", mean(L["encoder"]), mean(L["encoder_kernel_ms"]), mean(L["prefill"]),
                     mean(L["prefill_kernel_ms"]), mean(L["decode"]), mean(L["decode_kernel_ms"])])
        k = "cpu" if cpu else "kern"
        print(table(["layer", "encoder", f"enc {k}", "prefill", f"pre {k}", "decode step", f"dec {k}"], rows))

    print_operators(rep, peaks, top)


def print_operators(rep: dict, peaks, top: int = 30):
    ops = rep["operators"]
    unit = "CPU op self time" if rep["device"] == "cpu" else "GPU kernels"
    print(f"\n== Operators ({unit} of 1 profiled transcription, grouped by phase and name; "
          f"top {min(top, len(ops))} of {len(ops)}) ==")
    rows = []
    for o in ops[:top]:
        mark = "~" if o["source"] == "model~" else ""
        rows.append([o["phase"], o["class"], short(o["kernel"], 44), str(o["calls"]), fmt_ms(o["total_ms"]),
                     f"{o['pct']:.1f}", fmt_num(o["mean_us"]), mark + fmt_num(o["flops"], 1e9, 2),
                     mark + fmt_num(o["bytes"], 1e6), fmt_num(o["intensity"]), fmt_num(o["tflops"], 1, 2),
                     fmt_num(o["gbps"]), fmt_num(o["pct_peak_flops"]), fmt_num(o["pct_peak_bw"]), o["verdict"]])
    print(table(["phase", "class", "kernel", "calls", "ms", "%", "mean us", "GFLOP", "MB", "AI", "TFLOP/s", "GB/s",
                 "%pkFLOP", "%pkBW", "verdict"], rows, align="lllrrrrrrrrrrrl"))
    if len(ops) > top:
        rest = ops[top:]
        print(f"  ... {len(rest)} more rows, {fmt_ms(sum(o['total_ms'] for o in rest))} ms in all (--csv has every row)")
    print(f"  total {fmt_ms(rep['kernel_time_ms'])} ms of {unit.lower()} in the profiled run")
    if rep.get("operators_note"):
        print(f"  note: {rep['operators_note']}")

    print("\n== Operator classes (per phase; the roofline points) ==")
    rows = []
    for c in rep["operator_classes"]:
        rows.append([c["phase"], c["class"], str(c["kernels"]), str(c["calls"]), fmt_ms(c["total_ms"]) if c["kernels"] else "-",
                     f"{c['pct']:.1f}", fmt_num(c["flops"], 1e9, 2), fmt_num(c["bytes"], 1e6), fmt_num(c["intensity"]),
                     fmt_num(c["tflops"], 1, 2), fmt_num(c["gbps"]), fmt_num(c["pct_roof"]), c["verdict"]])
    print(table(["phase", "class", "kernels", "calls", "ms", "%", "GFLOP", "MB", "AI", "TFLOP/s", "GB/s", "%roof",
                 "verdict"], rows, align="llrrrrrrrrrrl"))
    print()
    print(FOOTER.format(ridge=peaks.ridge(rep["precision"])))


def comparison(reports: list[dict]) -> dict:
    """Side-by-side numbers: per component (wall ms) and per (phase, class) (kernel ms)."""
    base = reports[0]
    comp_rows = []
    for i, r in enumerate(base["components"]):
        row = {"name": r["name"], "key": r["key"], "level": r["level"], "ms": [rep["components"][i]["wall_ms"]
                                                                             for rep in reports]}
        comp_rows.append(row)
    comp_rows.append({"name": "end to end (median)", "key": "e2e", "level": 0,
                      "ms": [rep["end_to_end"]["median_ms"] for rep in reports]})
    keys = []
    for rep in reports:
        for c in rep["operator_classes"]:
            if c["kernels"] and (c["phase"], c["class"]) not in keys:
                keys.append((c["phase"], c["class"]))
    class_rows = []
    for key in keys:
        ms = []
        for rep in reports:
            hit = [c for c in rep["operator_classes"] if (c["phase"], c["class"]) == key and c["kernels"]]
            ms.append(hit[0]["total_ms"] if hit else 0.0)
        class_rows.append({"phase": key[0], "class": key[1], "ms": ms})
    return {"labels": [r["label"] for r in reports], "components": comp_rows, "classes": class_rows,
            "tokens": [r["tokens"] for r in reports]}


def speedup(base: float, other: float) -> str:
    if base <= 0 or other <= 0:
        return "-"
    return f"{other / base:.2f}x"


def print_comparison(cmp: dict):
    labels = cmp["labels"]
    base = labels[0]
    print("\n" + "=" * 100)
    print(f"COMPARISON: {' vs '.join(labels)}   (speed-up of {base} = other ms / {base} ms; > 1 means {base} is faster)")
    print("=" * 100)
    if len(set(cmp["tokens"])) > 1:
        print(f"  note: token counts differ ({', '.join(f'{l}: {t}' for l, t in zip(labels, cmp['tokens']))}); "
              "decode totals are not like for like (use --min-new-tokens N --max-new-tokens N)")
    headers = ["component (wall ms, median)"] + labels + [f"{base} vs {l}" for l in labels[1:]]
    rows = []
    for r in cmp["components"]:
        rows.append([("  " * r["level"]) + r["name"]] + [fmt_ms(x) for x in r["ms"]] +
                    [speedup(r["ms"][0], x) for x in r["ms"][1:]])
    print(table(headers, rows))
    print()
    headers = ["phase", "class (kernel ms)"] + labels + [f"{base} vs {l}" for l in labels[1:]]
    rows = [[r["phase"], r["class"]] + [fmt_ms(x) if x else "-" for x in r["ms"]] +
            [speedup(r["ms"][0], x) for x in r["ms"][1:]] for r in cmp["classes"]]
    print(table(headers, rows, align="ll" + "r" * (len(headers) - 2)))


# ---------------------------------------------------------------------------------------------
# CSV, JSON, plots
# ---------------------------------------------------------------------------------------------

CSV_COLUMNS = ["folder", "phase", "class", "kernel", "calls", "total_ms", "pct", "mean_us", "flops", "bytes",
               "source", "intensity", "tflops", "gbps", "pct_peak_flops", "pct_peak_bw", "pct_roof", "verdict"]


def write_csv(path: str, reports: list[dict]):
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with tmp.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(CSV_COLUMNS)
            for rep in reports:
                for o in rep["operators"]:
                    w.writerow([rep["label"]] + ["" if o.get(c) is None else o[c] for c in CSV_COLUMNS[1:]])
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write --csv {path}: {e.strerror}") from None


def _prompt_graph(report: dict) -> bool:
    return bool((report.get("cuda_graph") or {}).get("prompt_graph"))


def _bar_values(report: dict) -> dict[str, float]:
    """Wall ms per top-level component for the stacked bar. A replayed prompt graph times encoder,
    projector and prefill as one (the prefill row); its wall time is shared out in proportion to the
    kernel time of each, so the bar still shows where the prompt phase goes."""
    comps = {c["key"]: c for c in report["components"]}
    values = {key: max(0.0, comps[key]["wall_ms"]) for key in ("encoder", "projector", "prefill", "decode", "outside")}
    if _prompt_graph(report):
        phase = ("encoder", "projector", "prefill")
        kernel = {key: max(0.0, comps[key]["kernel_ms"] or 0.0) for key in phase}
        total = sum(kernel.values())
        if total > 0:
            wall = sum(values[key] for key in phase)
            values.update({key: wall * kernel[key] / total for key in phase})
    return values


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UserError("--plot needs matplotlib, which is not installed (pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


PHASE_MARKERS = {"encoder": "o", "projector": "s", "prefill": "^", "decode": "D", "outside": "x"}
CLASS_COLORS = {"conv": "#8c564b", "gemm": "#1f77b4", "attention": "#d62728", "norm": "#2ca02c",
                "rope": "#bcbd22", "pointwise": "#ff7f0e", "embedding": "#9467bd", "lm_head": "#17becf", "argmax": "#7f7f7f",
                "copy": "#c7c7c7", "other": "#e377c2", "host": "#000000"}


def write_plots(out_dir: str, reports: list[dict], peaks) -> list[str]:
    plt = import_pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    precision = reports[0]["precision"]
    paths = []

    # Roofline: one point per (phase, class) with a FLOP/byte model, per report.
    fig, ax = plt.subplots(figsize=(10.5, 6.5))
    points = [(rep, c) for rep in reports for c in rep["operator_classes"]
              if c["kernels"] and c["tflops"] and c["intensity"] and c["tflops"] > 0]
    ais = [c["intensity"] for _, c in points] or [1.0]
    bw = peaks.bandwidth
    main_peak = peaks.flops_for(precision)
    lo = min(min(ais) / 3, 0.05)
    hi = max(max(ais) * 8, main_peak / bw * 10)
    xs = np.logspace(math.log10(lo), math.log10(hi), 200)
    # The precision's roof solid; on a GPU the other measured matmul roofs as thin dashed lines.
    roofs = [(f"{precision} roof", main_peak, "-", 1.6)]
    if peaks.kind == "cuda":
        names = {"bfloat16": "bfloat16 roof", "tf32": "tf32 roof", "float32": "float32 IEEE roof (CUDA cores)"}
        roofs += [(names.get(k, f"{k} roof"), v, "--", 0.9) for k, v in peaks.matmul.items()
                  if abs(v - main_peak) > 1e-6 * v]
    for name, peak, style, lw in roofs:
        ax.plot(xs, np.minimum(peak, xs * bw) / 1e12, style, color="0.25", lw=lw,
                label=f"{name}: {peak / 1e12:,.3g} TFLOP/s, ridge {peak / bw:.0f} FLOP/B")
        ax.axvline(peak / bw, color="0.55", lw=0.7, ls=":")
    x_bw = math.sqrt(lo * main_peak / bw)
    ax.text(x_bw, x_bw * bw / 1e12 * 1.25, f"{bw / 1e9:,.0f} GB/s", fontsize=8, color="0.25",
            rotation=0, ha="center")
    fills = ["full", "none", "left"]
    placed = []
    for ri, rep in enumerate(reports):
        for c in (c for r, c in points if r is rep):
            color = CLASS_COLORS.get(c["class"], "#333333")
            ax.plot(c["intensity"], c["tflops"], marker=PHASE_MARKERS.get(c["phase"], "o"), ms=9, color=color,
                    fillstyle=fills[ri % 3], ls="none", alpha=0.9)
            if ri == 0:  # label the first report's points; nudge labels that would overlap
                lx, ly = math.log10(c["intensity"]), math.log10(c["tflops"])
                dy = 4
                while any(abs(lx - px) < 0.45 and abs(ly + dy / 60 - py) < 0.12 for px, py in placed):
                    dy -= 9
                placed.append((lx, ly + dy / 60))
                ax.annotate(f"{c['phase']}·{c['class']}", (c["intensity"], c["tflops"]), fontsize=7,
                            xytext=(6, dy), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of minimum memory traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    where = "CPU measurements" if peaks.kind == "cpu" else "measured"
    ax.set_title(f"Roofline per operator class: {', '.join(r['label'] for r in reports)}\n"
                 f"{precision}, {peaks.device}; peaks {where}", fontsize=9)
    from matplotlib.lines import Line2D

    handles, _ = ax.get_legend_handles_labels()
    handles += [Line2D([], [], marker=m, ls="none", color="0.3", label=p) for p, m in PHASE_MARKERS.items()
                if any(c["phase"] == p for _, c in points)]
    handles += [Line2D([], [], marker="o", ls="none", color=CLASS_COLORS[k], label=k) for k in CLASS_COLORS
                if any(c["class"] == k for _, c in points)]
    if len(reports) > 1:
        handles += [Line2D([], [], marker="o", ls="none", color="0.3", fillstyle=fills[i % 3], label=r["label"])
                    for i, r in enumerate(reports)]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    path = out / "roofline.png"
    fig.savefig(path, dpi=130)
    plt.close(fig)
    paths.append(str(path))

    # Stacked bar: components of each report's end to end time.
    fig, ax = plt.subplots(figsize=(max(6.5, 2.2 * len(reports) + 4), 5.5))
    parts = [("encoder", "encoder", "#1f77b4"), ("projector", "projector", "#9467bd"), ("prefill", "prefill", "#2ca02c"),
             ("decode", "decode steps", "#d62728"), ("outside", "outside regions", "#7f7f7f")]
    labels = [r["label"] for r in reports]
    bottoms = [0.0] * len(reports)
    bar_values = [_bar_values(r) for r in reports]
    for key, name, color in parts:
        vals = [values[key] for values in bar_values]
        bars = ax.bar(labels, vals, bottom=bottoms, color=color, label=name, width=0.55)
        for b, v, bot, r in zip(bars, vals, bottoms, reports):
            if v > 0.1 * r["component_totals"]["end_to_end_ms"]:
                ax.text(b.get_x() + b.get_width() / 2, bot + v / 2, f"{fmt_ms(v)} ms", ha="center", va="center",
                        fontsize=8, color="white")
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    for i, r in enumerate(reports):
        e2e = r["component_totals"]["end_to_end_ms"]
        ax.plot([i - 0.32, i + 0.32], [e2e] * 2, color="black", lw=1.5)
        ax.text(i, e2e, f"end to end {fmt_ms(e2e)} ms\n(remainder {fmt_ms(e2e - bottoms[i])} ms)", ha="center",
                va="bottom", fontsize=8)
    ax.set_ylabel("ms (median over runs, region timers)")
    split_note = ("\n* one CUDA graph from encoder to first token: its wall time split by kernel time"
                  if any(_prompt_graph(r) for r in reports) else "")
    ax.set_title(f"Where one transcription's time goes\n{reports[0]['precision']}, {peaks.device}{split_note}",
                 fontsize=9)
    ax.set_xticks(range(len(reports)), [r["label"] + (" *" if _prompt_graph(r) else "") for r in reports])
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_ylim(0, max(max(bottoms), max(r["component_totals"]["end_to_end_ms"] for r in reports)) * 1.15)
    fig.tight_layout()
    path = out / "components.png"
    fig.savefig(path, dpi=130)
    plt.close(fig)
    paths.append(str(path))
    return paths


# ---------------------------------------------------------------------------------------------
# --attention-only / --linear-only micro-benchmarks
# ---------------------------------------------------------------------------------------------


def model_config(args):
    from glm_asr_common.model.checkpoint import read_config, resolve_model_dir
    from glm_asr_common.model.config import ModelConfig

    if args.random_weights:
        return ModelConfig.from_dict(raw_config(args))
    return read_config(resolve_model_dir(args.model, need_weights=False))


def default_seq_len(args, cfg) -> int:
    """The prompt length the audio gives: 3 text ids + one per audio token + 12 text ids."""
    from glm_asr_common.model.audio import load_audio
    from glm_asr_common.model.frontend import SYNTHETIC_PREFIX_LEN, SYNTHETIC_SUFFIX_LEN, audio_tokens_of

    tokens = int(audio_tokens_of(len(load_audio(args.audio)), cfg).sum())
    return tokens + SYNTHETIC_PREFIX_LEN + SYNTHETIC_SUFFIX_LEN


def bench_us(fn, device: str, runs: int, flush=None) -> tuple[float, float, float]:
    """(q1, median, q3) µs of ``fn`` after 3 untimed calls; on CUDA each call follows an L2 flush."""
    for _ in range(3):
        fn()
    sync(device)
    times = []
    for _ in range(runs):
        if flush is not None:
            flush.zero_()
        times.append(roofline.time_call(fn, device) * 1e6)
    return quartiles(times)


# The launchers the micro-benchmarks time, by module: a fast path's fused kernels and the course path's.
MICRO_LAUNCHERS = (("fast_attention", ("flash_attention", "decode_attention")),
                   ("fast_linear", ("linear", "swiglu_linear")),
                   ("layers", ("linear_tf32",)))


def folder_launchers(folder: str) -> dict:
    """The folder's kernel launchers that the micro-benchmarks know, where it has them; a folder that
    runs the course model also gets its attention, composed of the folder's three kernels."""
    found = {}
    for module, names in MICRO_LAUNCHERS:
        try:
            mod = importlib.import_module(f"{folder}.{module}")
        except ImportError:
            continue
        for name in names:
            if callable(getattr(mod, name, None)):
                found[name] = getattr(mod, name)
    try:
        ops = course_model.track_ops(folder)
    except (ImportError, UserError):  # not a course-model folder (the PyTorch track)
        return found
    found["encoder_attention"] = functools.partial(course_model.encoder_attention, ops)
    found["decoder_attention"] = functools.partial(course_model.decoder_attention, ops)
    return found


def _bthd_to_bhtd(out):
    return out.transpose(1, 2)


def max_rel_error(out, ref) -> float:
    """max |out - ref| / max |ref| (the folder's kernel against torch at the same shape)."""
    ref = ref.float()
    return float((out.float().reshape(ref.shape) - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def attention_cases(cfg, seq_len: int, args, device, dtype):
    """(name, shape text, logical Op, torch fn, {launcher: fn builder}, output → torch layout)."""
    import torch.nn.functional as F

    e = roofline.ELEMENT_BYTES[args.precision]
    dot = get_precision(args.precision).dot
    enc, dec = cfg.encoder, cfg.decoder
    gen = torch.Generator(device=device).manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
    cases = []
    t = enc.max_positions
    q, k, v = (rnd(1, t, enc.num_heads, enc.head_dim) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    enc_out = torch.empty_like(q)  # token-major, as the course model's o_proj reads it
    scale = enc.head_dim ** -0.5
    cases.append(("encoder self-attention", f"T={t} H={enc.num_heads} D={enc.head_dim} non-causal",
                  roofline.attention("encoder", "enc.attention", batch=1, q_heads=enc.num_heads, kv_heads=enc.num_heads,
                                     tq=t, tk=t, head_dim=enc.head_dim, e=e, causal=False),
                  lambda: F.scaled_dot_product_attention(qt, kt, vt),
                  {"flash_attention": lambda f: (lambda: f(q, k, v, scale, causal=False, precision=dot)),
                   "encoder_attention": lambda f: (lambda: f(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                             scale, enc_out.transpose(1, 2), precision=dot)
                                                   .transpose(1, 2))},
                  _bthd_to_bhtd))
    cache_len = -(-(seq_len + args.max_new_tokens) // 256) * 256
    d_scale = dec.head_dim ** -0.5
    kc = rnd(1, dec.num_kv_heads, cache_len, dec.head_dim)
    vc = rnd(1, dec.num_kv_heads, cache_len, dec.head_dim)
    qp = rnd(1, seq_len, dec.num_heads, dec.head_dim)
    qpt = qp.transpose(1, 2).contiguous()
    kv_start = torch.zeros(1, dtype=torch.int32, device=device)
    k_tok = kc[:, :, :seq_len].transpose(1, 2).contiguous()
    v_tok = vc[:, :, :seq_len].transpose(1, 2).contiguous()

    def prefill_builder(f):
        if "kv_layout" in inspect.signature(f).parameters:
            return lambda: f(qp, kc, vc, d_scale, causal=True, precision=dot, kv_start=kv_start, kv_layout="bhtd")
        return lambda: f(qp, k_tok, v_tok, d_scale, causal=True, precision=dot, kv_start=kv_start)

    prefill_counters = torch.tensor([0, seq_len], dtype=torch.int32, device=device)
    decode_counters = torch.tensor([seq_len - 1, seq_len], dtype=torch.int32, device=device)

    def course_builder(q_bhtd, counters, causal, n_keys):
        # Its (B, H, T, D) output seen token-major (a free view), like the fast kernels' outputs.
        return lambda f: (lambda: f(q_bhtd, kc, vc, d_scale, causal=causal, n_keys=n_keys, kv_start=kv_start,
                                    cache_pos=counters[:1], valid_len=counters[1:], precision=dot).transpose(1, 2))

    cases.append(("decoder prefill attention", f"T={seq_len} Hq={dec.num_heads} Hkv={dec.num_kv_heads} "
                  f"D={dec.head_dim} causal",
                  roofline.attention("prefill", "dec.attention", batch=1, q_heads=dec.num_heads,
                                     kv_heads=dec.num_kv_heads, tq=seq_len, tk=seq_len, head_dim=dec.head_dim, e=e,
                                     causal=True),
                  lambda: F.scaled_dot_product_attention(qpt, kc[:, :, :seq_len], vc[:, :, :seq_len], is_causal=True,
                                                         enable_gqa=True),
                  {"flash_attention": prefill_builder,
                   "decoder_attention": course_builder(qpt, prefill_counters, True, seq_len)}, _bthd_to_bhtd))
    qd = rnd(1, 1, dec.num_heads, dec.head_dim)
    qdt = qd.transpose(1, 2).contiguous()
    valid = torch.tensor([seq_len], dtype=torch.int32, device=device)
    cases.append(("decode attention (1 token)", f"KV={seq_len} (cache {cache_len}) Hq={dec.num_heads} "
                  f"Hkv={dec.num_kv_heads} D={dec.head_dim}",
                  roofline.attention("decode", "dec.attention", batch=1, q_heads=dec.num_heads,
                                     kv_heads=dec.num_kv_heads, tq=1, tk=seq_len, head_dim=dec.head_dim, e=e,
                                     causal=True),
                  lambda: F.scaled_dot_product_attention(qdt, kc[:, :, :seq_len], vc[:, :, :seq_len], enable_gqa=True),
                  {"decode_attention": lambda f: (lambda: f(qd, kc, vc, valid, kv_start, d_scale, precision=dot)),
                   "decoder_attention": course_builder(qdt, decode_counters, False, cache_len)}, _bthd_to_bhtd))
    return cases


def linear_cases(cfg, seq_len: int, args, device, dtype):
    import torch.nn.functional as F

    e = roofline.ELEMENT_BYTES[args.precision]
    dot = get_precision(args.precision).dot
    enc, dec = cfg.encoder, cfg.decoder
    gen = torch.Generator(device=device).manual_seed(0)
    rnd = lambda *shape, s=1.0: (torch.randn(*shape, generator=gen, device=device) * s).to(dtype)
    frames = enc.max_positions
    rows = frames // cfg.merge_factor
    width = enc.num_heads * enc.head_dim
    q_w, kv_w = dec.num_heads * dec.head_dim, dec.num_kv_heads * dec.head_dim
    specs = [  # name, M, N, K, bias, activation (None / "gelu" / "swiglu")
        ("encoder qkv", frames, 3 * width, enc.hidden_size, True, None),
        ("encoder o", frames, enc.hidden_size, width, True, None),
        ("encoder fc1 +gelu", frames, enc.intermediate_size, enc.hidden_size, True, "gelu"),
        ("encoder fc2", frames, enc.hidden_size, enc.intermediate_size, True, None),
        ("projector 1 +gelu", rows, cfg.projector_hidden_size, enc.intermediate_size, True, "gelu"),
        ("projector 2", rows, dec.hidden_size, cfg.projector_hidden_size, True, None),
    ]
    for m, tag in ((seq_len, "prefill"), (1, "decode")):
        specs += [
            (f"{tag} qkv", m, q_w + 2 * kv_w, dec.hidden_size, False, None),
            (f"{tag} o", m, dec.hidden_size, q_w, False, None),
            (f"{tag} gate_up +swiglu", m, dec.intermediate_size, dec.hidden_size, False, "swiglu"),
            (f"{tag} down", m, dec.hidden_size, dec.intermediate_size, False, None),
        ]
    specs.append(("lm_head (decode)", 1, dec.vocab_size, dec.hidden_size, False, None))
    cases = []
    for name, M, N, K, bias, act in specs:
        x = rnd(M, K)
        w = rnd(2 * N if act == "swiglu" else N, K, s=K ** -0.5)
        b = rnd(N, s=0.1) if bias else None
        phase = name.split()[0]
        op = roofline.gemm(phase, name, M, 2 * N if act == "swiglu" else N, K, e, bias=bias)
        if act == "swiglu":
            def torch_fn(x=x, w=w, N=N):
                y = F.linear(x, w)
                return F.silu(y[:, :N]) * y[:, N:]
            builders = {"swiglu_linear": lambda f, x=x, w=w: (lambda: f(x, w, input_precision=dot))}
        else:
            def torch_fn(x=x, w=w, b=b, act=act):
                y = F.linear(x, w, b)
                return F.gelu(y) if act == "gelu" else y
            builders = {"linear": lambda f, x=x, w=w, b=b, act=act: (lambda: f(x, w, b, activation=act,
                                                                             input_precision=dot))}
            if act is None:  # the course kernel has no fused epilogue: it times the plain products
                builders["linear_tf32"] = lambda f, x=x, w=w, b=b: (lambda: f(x, w, b, precision=dot))
        shape = f"M={M} N={2 * N if act == 'swiglu' else N} K={K}" + (" +bias" if bias else "")
        cases.append((name, shape, op, torch_fn, builders, lambda out: out))
    return cases


def run_micro(args, folders: list[str], peaks) -> dict:
    device = resolve_device(args.device)
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    dtype = get_precision(args.precision).dtype
    cfg = model_config(args)
    seq_len = args.seq_len or default_seq_len(args, cfg)
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    impls = [(f, folder_launchers(f)) for f in folders]
    flush = torch.empty(256 << 20, dtype=torch.int8, device=device) if device == "cuda" else None
    runs = max(args.runs, 20) if device == "cuda" else args.runs
    sections = []
    kinds = ([("attention", attention_cases)] if args.attention_only else []) + \
            ([("linear", linear_cases)] if args.linear_only else [])
    for kind, make in kinds:
        rows = []
        for name, shape, op, torch_fn, builders, to_torch in make(cfg, seq_len, args, device, dtype):
            tq1, tmed, tq3 = bench_us(torch_fn, device, runs, flush)
            reference = torch_fn()
            floor = roofline.floor_seconds(op.flops, op.bytes, peaks, args.precision) * 1e6
            row = {"op": name, "shape": shape, "flops": op.flops, "bytes": op.bytes, "floor_us": floor,
                   "torch_us": tmed, "torch_iqr_us": [tq1, tq3], "impls": []}
            for folder, launchers in impls:
                launcher = next((n for n in builders if n in launchers), None)
                entry = {"folder": folder, "launcher": None, "us": tmed, "iqr_us": [tq1, tq3], "note": "torch",
                         "max_rel_error": 0.0}
                if launcher is not None:
                    try:
                        fn = builders[launcher](launchers[launcher])
                        error = max_rel_error(to_torch(fn()), reference)
                        q1, med, q3 = bench_us(fn, device, runs, flush)
                        entry = {"folder": folder, "launcher": launcher, "us": med, "iqr_us": [q1, q3], "note": "",
                                 "max_rel_error": error}
                    except NotImplementedError:
                        entry = {"folder": folder, "launcher": launcher, "us": None, "iqr_us": None,
                                 "note": "not implemented"}
                    except Exception as exc:  # a student kernel failing at this shape: report, go on
                        entry = {"folder": folder, "launcher": launcher, "us": None, "iqr_us": None,
                                 "note": f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"}
                if entry["us"]:
                    roof = roofline.assess(op.flops, op.bytes, entry["us"] / 1e6, 1, peaks, args.precision)
                    entry.update({"tflops": roof.achieved_flops / 1e12, "gbps": roof.achieved_bw / 1e9,
                                  "pct_roof": roof.pct_roof, "verdict": roof.verdict,
                                  "speedup_vs_torch": tmed / entry["us"]})
                row["impls"].append(entry)
            rows.append(row)
        sections.append({"kind": kind, "rows": rows})
    return {"mode": "micro", "folders": folders, "device": device, "precision": args.precision, "seq_len": seq_len,
            "runs": runs, "peaks": peaks.to_json(), "sections": sections}


def print_micro(res: dict, peaks):
    print()
    print("=" * 100)
    print(f"MICRO-BENCHMARKS: {', '.join(res['folders'])} vs torch ({res['precision']}, {res['device']}; "
          f"median of {res['runs']} calls{', cold L2' if res['device'] == 'cuda' else ''}; seq-len {res['seq_len']})")
    print("=" * 100)
    print(f"Peaks: {peaks.describe()}")
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
                    tag = "" if i["launcher"] else " (torch)"
                    row += [fmt_num(i["us"], 1, 1) + tag, f"{i['speedup_vs_torch']:.2f}x", fmt_num(i["pct_roof"]),
                            i["verdict"], f"{i['max_rel_error']:.1e}"]
            rows.append(row)
        print(table(headers, rows, align="ll" + "r" * (len(headers) - 2)))
    print("\nfloor = max(FLOPs / peak FLOP/s, bytes / peak bandwidth) with the measured peaks; speed-up = torch us / "
          "folder us;\n(torch) = the folder has no public launcher for it, so torch itself is its kernel; max err = "
          "max|folder - torch| / max|torch| on the same inputs.")


# ---------------------------------------------------------------------------------------------
# --nsys
# ---------------------------------------------------------------------------------------------


def run_nsys(args) -> int:
    nsys = shutil.which("nsys")
    if nsys is None:
        raise UserError("--nsys needs NVIDIA Nsight Systems, but `nsys` is not on PATH (install it or drop --nsys)")
    folder = args.folder.rstrip("/").split("/")[-1]
    out = Path(args.nsys_output or f"nsys_{folder}_{args.precision}")
    passthrough = ["--audio", args.audio, "--model", args.model, "--precision", args.precision, "--warmup", str(args.warmup),
                   "--runs", str(min(args.runs, 3)), "--max-new-tokens", str(args.max_new_tokens),
                   "--min-new-tokens", str(args.min_new_tokens)]
    if args.device:
        passthrough += ["--device", args.device]
    if args.random_weights:
        passthrough.append("--random-weights")
    if args.expected is not None:
        passthrough += ["--expected", args.expected]
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


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------


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
    cpu_defaults = settle_run_options(args, device)
    if cpu_defaults:
        print(cpu_defaults)
    # One name for the precision from here on (bf16, tf32, fp32): it picks the roof and the bytes.
    args.precision, args.dtype = from_options(args.precision, args.dtype, device).name, None
    folders = track_folders()
    others = [split_track(spec) for spec in args.compare or []]
    for f in [args.folder] + [other for other, _ in others]:
        if f not in folders:
            raise UserError(f"unknown folder {f!r}; choose one of: {', '.join(folders)}")
    folder = args.folder.rstrip("/").split("/")[-1]
    if args.nsys:
        return run_nsys(args)
    check_json_path(args.json)
    for opt, path in (("--csv", args.csv),):
        if path and not Path(path).resolve().parent.is_dir():
            raise UserError(f"{opt} {path}: directory {Path(path).parent} does not exist")
    if args.plot:
        import_pyplot()  # fail now, not after the measurements
    if device == "cuda":
        init_profiler_for_cuda_graphs()
    peaks = roofline.device_peaks(device, refresh=args.refresh_peaks)

    if args.attention_only or args.linear_only:
        if args.baseline:
            print("note: --baseline is for whole transcriptions; the micro-benchmarks compare with torch")
        folders_run = [folder] + [other for other, _ in others]
        res = run_micro(args, folders_run, peaks)
        print_micro(res, peaks)
        if args.json:
            write_json(args.json, res)
        return 0

    measured_tracks = [(folder, resolve_path(folder, args.path))]
    for other, other_path in others:
        # An unknown path fails now, not after the first measurement.
        if (other, resolve_path(other, other_path)) in measured_tracks:
            raise UserError(f"--compare {other}:{resolve_path(other, other_path)} names a folder and path already measured")
        measured_tracks.append((other, resolve_path(other, other_path)))
    main_report, session = analyze(args, folder, peaks)
    reports = [main_report]
    print_report(main_report, peaks, args.top)
    hf_source = None
    if args.baseline == "hf":
        hf_source = session  # same inputs, device, dtype
        session.model = None
        release(device)
    else:
        del session
        release(device)
    for other, other_path in others:
        own_path, args.path = args.path, other_path
        try:
            other_report, other_session = analyze(args, other, peaks)
        finally:
            args.path = own_path
        reports.append(other_report)
        del other_session
        release(device)
    if hf_source is not None:
        hf_report, hf_session = analyze(args, "hf", peaks, hf_like=hf_source)
        reports.append(hf_report)
        del hf_session
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
        data = dict(main_report)
        data["peaks"] = peaks.to_json()
        data["others"] = reports[1:]
        data["comparison"] = cmp
        write_json(args.json, data)
        print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    run_cli(main)
