"""Where the time of one transcription goes, every way benchmark_detailed.py measures it: end to end,
per component and layer (region timers), per kernel and operator class (one profiled run, with FLOPs,
bytes and roofline verdicts), and, for a track that replays CUDA graphs, again with the graphs off.
``measure`` runs the transcriptions, ``build_report`` turns them into the report's dict (the JSON
benchmark_detailed.py writes), ``comparison`` sets reports side by side.
"""

from ..model.frontend import decode as decode_text
from . import roofline
from .components import aggregate, summarize, timed_run
from .operators import has_kernels, kernel_class, operator_tables
from .timer import quartiles, time_call
from .trace import profile_run, split_graph_replays


def measure(session, args, label: str, log=print) -> dict:
    """End to end, components (region timers), one profiled run, and graph-off runs where relevant; every
    transcription after --warmup untimed ones, so compilation is never counted."""
    model, inputs, device = session.model, session.inputs, session.device

    def transcribe():
        return model.generate(inputs, args.max_new_tokens, args.min_new_tokens)[0]

    def region_timed():
        return timed_run(model, inputs, args.max_new_tokens, args.min_new_tokens, device)[0]

    log(f"[{label}] warm-up {args.warmup}, {args.runs} timed runs, {args.runs} component runs, 1 profiled run")
    for _ in range(args.warmup):
        time_call(transcribe, device)
    if args.warmup == 0:  # the region timers and the profiler still never see the first-ever call
        log(f"[{label}] note: --warmup 0: the first timed run includes compilation / first-call costs")
    # Plain and region-timed runs alternate, so both sets see the same machine state (clocks, caches).
    e2e, component_runs = [], []
    for _ in range(args.runs):
        ms, tokens = time_call(transcribe, device)
        e2e.append(ms)
        component_runs.append(region_timed())
    profiled = profile_run(transcribe, device)
    result = {"e2e": e2e, "tokens": tokens, "components": aggregate(component_runs), "profile": profiled,
              "graph": None}
    if device == "cuda" and getattr(model, "use_cuda_graph", False):
        log(f"[{label}] the model replays CUDA graphs: measuring again with use_cuda_graph=False for the "
            "per-region split of what the graphs run")
        model.use_cuda_graph = False
        try:
            time_call(transcribe, device)
            runs = [region_timed() for _ in range(args.runs)]
            eager = profile_run(transcribe, device)
        finally:
            model.use_cuda_graph = True
        # The replayed kernels of the profiled run, placed in the regions they have in the eager run.
        split_graph_replays(profiled, eager)
        result["graph"] = {"components": aggregate(runs), "profile": eager}
    return result


# The component rows, top level then parts: (key, name; {prompt}, {layers} and {steps} filled in).
COMPONENT_ROWS = (("encoder", "encoder"), ("encoder.conv", "conv"), ("encoder.layers", "layers ({encoder_layers})"),
                  ("encoder.norm", "norm"), ("encoder.other", "other (in encoder, between parts)"),
                  ("projector", "projector"), ("prefill", "prefill ({prompt}-token prompt)"),
                  ("prefill.embed", "embed"), ("prefill.layers", "layers ({prefill_layers})"),
                  ("prefill.head", "head"), ("prefill.other", "other (in prefill, between parts)"),
                  ("decode", "decode ({steps} steps)"), ("decode.embed", "embed"), ("decode.layers", "layers"),
                  ("decode.head", "head"), ("decode.other", "other (in steps)"),
                  ("outside", "outside regions (host loop, syncs, copies)"))


def build_report(session, args, measured: dict, peaks, label: str, log=print) -> dict:
    """The report of one folder (or transformers) from ``measure``'s result; its keys are the JSON's."""
    inputs, e2e, comp, prof, graph = session.inputs, measured["e2e"], measured["components"], measured["profile"], \
        measured["graph"]
    q1, med, q3 = quartiles(e2e)
    op_note = ""
    if graph and not has_kernels(prof) and has_kernels(graph["profile"]):
        # The profiler recorded no kernel of the graphed run (a CUPTI problem): use the eager run's.
        prof = graph["profile"]
        op_note = ("the profiler recorded no kernels in the run with CUDA graphs, so kernels come from the "
                   "use_cuda_graph=False run")
        log(f"[{label}] note: {op_note}")
    elif prof.replayed_split[1]:
        placed, replayed = prof.replayed_split
        op_note = (f"{placed} of {replayed} kernels replayed from CUDA graphs are placed in the region they run in "
                   "with use_cuda_graph=False (matched by name and order)"
                   + (f"; the other {replayed - placed} count for the region around the replay" if placed < replayed
                      else ""))
    kern = summarize(prof.regions, prof.wall_ms)
    gcomp = graph["components"] if graph else None
    gkern = summarize(graph["profile"].regions, graph["profile"].wall_ms) if graph else None
    tokens = prof.tokens or measured["tokens"]
    steps = int(kern["decode.steps"]) if kern["decode.steps"] else max(len(tokens) - 1, 0)
    ops = roofline.transcription_ops(session.checkpoint.config, windows=inputs.input_features.shape[0],
                                     mel_frames=inputs.input_features.shape[-1], prompt_len=inputs.input_ids.shape[1],
                                     decode_steps=steps, dtype=args.precision, batch=inputs.batch_size)
    operators, classes = operator_tables(prof, ops, peaks, args.precision)
    # A prompt phase replayed as one CUDA graph runs no region inside it in the timed runs: its parts and
    # layers come from the graph-off runs, as the decode step's parts do for a replayed step.
    prompt_graph = bool(graph) and comp["encoder"]["median"] == 0 and gcomp["encoder"]["median"] > 0
    lcomp, lkern = (gcomp, gkern) if prompt_graph else (comp, kern)
    total = comp["total"]  # end to end of the region-timed runs themselves
    names = {"encoder_layers": len(lcomp["layers.encoder"]), "prefill_layers": len(lcomp["layers.prefill"]),
             "prompt": inputs.input_ids.shape[1], "steps": steps}
    rows = []
    for key, name in COMPONENT_ROWS:
        level = int("." in key)
        graph_off = level == 1 and (prompt_graph if not key.startswith("decode") else graph is not None)
        wall, kernels = (gcomp, gkern) if graph_off else (comp, kern)
        rows.append({"name": name.format(**names), "key": key, "level": level, "wall_ms": wall[key]["median"],
                     "q1_ms": wall[key]["q1"], "q3_ms": wall[key]["q3"],
                     "pct": 100 * wall[key]["median"] / total["median"] if total["median"] else 0.0,
                     "kernel_ms": kernels.get(key, 0.0), "note": "", "graph_off": graph_off,
                     "in_graph": prompt_graph and key in ("encoder", "projector")})
    rows[-1]["kernel_ms"] = sum(k.ms for k in prof.kernels if k.region < 0)
    top = [r for r in rows if r["level"] == 0]
    total_sum, kernel_sum = sum(r["wall_ms"] for r in top), sum(r["kernel_ms"] for r in top)
    step = comp["decode.step_median"]
    processor = session.checkpoint.processor
    return {
        "label": label, "folder": label.split(":")[0], "path": getattr(session, "path", None),
        "model": session.checkpoint.description, "precision": args.precision, "device": session.device,
        "device_name": peaks.device, "audio_seconds": round(session.audio_seconds, 3),
        "windows": int(inputs.input_features.shape[0]), "mel_frames": int(inputs.input_features.shape[-1]),
        "prompt_len": int(inputs.input_ids.shape[1]), "tokens": len(tokens), "decode_steps": steps,
        "token_ids": list(tokens), "transcription": decode_text(processor, tokens) if processor else "",
        "runs": args.runs, "warmup": args.warmup,
        "end_to_end": {"median_ms": med, "q1_ms": q1, "q3_ms": q3, "min_ms": min(e2e), "max_ms": max(e2e),
                       "runs_ms": e2e, "ms_per_token": med / max(len(tokens), 1)},
        "components": rows,
        "component_totals": {
            "sum_ms": total_sum, "end_to_end_ms": total["median"], "end_to_end_q1_ms": total["q1"],
            "end_to_end_q3_ms": total["q3"], "remainder_ms": total["median"] - total_sum,
            "remainder_pct": 100 * (total["median"] - total_sum) / total["median"] if total["median"] else 0.0,
            "plain_end_to_end_ms": med, "timer_overhead_ms": total["median"] - med,
            "kernel_sum_ms": kernel_sum, "profiled_wall_ms": prof.wall_ms,
            "kernel_remainder_ms": prof.wall_ms - kernel_sum},
        "decode_step": {"median_ms": step["median"], "q1_ms": step["q1"], "q3_ms": step["q3"], "steps": steps,
                        "kernel_median_ms": kern["decode.step_median"]},
        "layers": {
            "encoder": lcomp["layers.encoder"], "prefill": lcomp["layers.prefill"],
            "decode": (gcomp or comp)["layers.decode"],
            "prompt_source": "use_cuda_graph=False runs" if prompt_graph else "the same runs",
            "decode_source": "use_cuda_graph=False runs" if graph else "the same runs",
            "encoder_kernel_ms": lkern["layers.encoder"], "prefill_kernel_ms": lkern["layers.prefill"],
            "decode_kernel_ms": (gkern or kern)["layers.decode"]},
        "cuda_graph": None if not graph else {
            "step_ms_with_graph": step["median"], "step_ms_without_graph": gcomp["decode.step_median"]["median"],
            "decode_ms_without_graph": gcomp["decode"]["median"], "prompt_graph": prompt_graph,
            "prompt_ms_with_graph": comp["prefill"]["median"],
            "prompt_ms_without_graph": sum(gcomp[c]["median"] for c in ("encoder", "projector", "prefill")),
            "replayed_kernels": prof.replayed_split[1], "replayed_kernels_placed": prof.replayed_split[0],
            # Launches of the profiled transcription: graph replays, and kernels launched one by one
            # (copies aside), which a transcription that is all graphs has none of.
            "graph_launches": len({k.replay for k in prof.kernels if k.replay is not None}),
            "kernels_outside_graphs": sum(k.replay is None and kernel_class(k.name) != "copy" for k in prof.kernels)},
        "operators": operators,
        "operator_classes": classes,
        "operators_note": op_note,
        "kernel_time_ms": sum(k.ms for k in prof.kernels),
    }


def comparison(reports: list[dict]) -> dict:
    """Side-by-side numbers: per component (wall ms) and per (phase, class) (kernel ms)."""
    components = [{"name": r["name"], "key": r["key"], "level": r["level"],
                   "ms": [rep["components"][i]["wall_ms"] for rep in reports]}
                  for i, r in enumerate(reports[0]["components"])]
    components.append({"name": "end to end (median)", "key": "e2e", "level": 0,
                       "ms": [rep["end_to_end"]["median_ms"] for rep in reports]})
    kernel_ms = [{(c["phase"], c["class"]): c["total_ms"] for c in rep["operator_classes"] if c["kernels"]}
                 for rep in reports]
    keys = dict.fromkeys(key for per_class in kernel_ms for key in per_class)  # first seen first
    classes = [{"phase": phase, "class": cls, "ms": [per_class.get((phase, cls), 0.0) for per_class in kernel_ms]}
               for phase, cls in keys]
    return {"labels": [r["label"] for r in reports], "components": components, "classes": classes,
            "tokens": [r["tokens"] for r in reports]}
