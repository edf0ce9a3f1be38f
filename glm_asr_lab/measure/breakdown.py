"""Where the time of one transcription goes, every way benchmark_detailed.py measures it: end to end,
per component and layer (region timers), per kernel and operator class (one profiled run, with FLOPs,
bytes and roofline verdicts); a track that replays CUDA graphs is timed as it runs, then split per region
and profiled with the graphs off.
``measure`` runs the transcriptions, ``build_report`` turns them into the report's dict (the JSON
benchmark_detailed.py writes), ``comparison`` sets reports side by side.
"""

from glm_asr_course.model.frontend import decode as decode_text
from glm_asr_lab.measure import roofline
from glm_asr_lab.measure.components import aggregate, summarize, timed_run
from glm_asr_lab.measure.operators import operator_tables
from glm_asr_course.timer import quartiles, time_call
from glm_asr_lab.measure.timeline import decode_step_launches
from glm_asr_lab.measure.trace import graph_launches, profile_run


def measure(session, label: str, log=print) -> dict:
    """End to end, components (region timers) and one profiled run, every transcription after --warmup
    untimed ones (the session's options), so compilation is never counted. A model that replays CUDA graphs runs no region inside
    a replay: its end-to-end and component times are taken as it runs, its launches counted in one
    profiled run, then its per-region split and kernels measured with use_cuda_graph=False."""
    model, inputs, device, options = session.model, session.inputs, session.device, session.options

    def transcribe():
        return model.generate(inputs, options.max_new_tokens, options.min_new_tokens)[0]

    def region_timed():
        return timed_run(model, inputs, options.max_new_tokens, options.min_new_tokens, device)[0]

    log(f"[{label}] warm-up {options.warmup}, {options.runs} timed runs, {options.runs} component runs, 1 profiled run")
    for _ in range(options.warmup):
        time_call(transcribe, device)
    if options.warmup == 0:  # the region timers and the profiler still never see the first-ever call
        log(f"[{label}] note: --warmup 0: the first timed run includes compilation / first-call costs")
    # Plain and region-timed runs alternate, so both sets see the same machine state (clocks, caches).
    e2e, component_runs = [], []
    for _ in range(options.runs):
        ms, tokens = time_call(transcribe, device)
        e2e.append(ms)
        component_runs.append(region_timed())
    result = {"e2e": e2e, "tokens": tokens, "components": aggregate(component_runs), "graph": None}
    if not (device == "cuda" and getattr(model, "use_cuda_graph", False)):
        return result | {"profile": profile_run(transcribe, device)}
    log(f"[{label}] the model replays CUDA graphs: measuring again with use_cuda_graph=False for the "
        "per-region split and the kernel tables")
    graphed = profile_run(transcribe, device)
    launches = graph_launches(graphed) | {"decode_launches": decode_step_launches(graphed)}
    model.use_cuda_graph = False
    try:
        time_call(transcribe, device)
        runs = [region_timed() for _ in range(options.runs)]
        result["profile"] = profile_run(transcribe, device)
    finally:
        model.use_cuda_graph = True
    result["graph"] = {"components": aggregate(runs)} | launches
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


def build_report(session, measured: dict, peaks, label: str) -> dict:
    """The report of one folder (or transformers) from ``measure``'s result; its keys are the JSON's."""
    inputs, e2e, comp, prof, graph = session.inputs, measured["e2e"], measured["components"], measured["profile"], \
        measured["graph"]
    q1, med, q3 = quartiles(e2e)
    precision = session.precision.name
    kern = summarize(prof.regions, prof.wall_ms)
    gcomp = graph["components"] if graph else None
    tokens = prof.tokens or measured["tokens"]
    steps = int(kern["decode.steps"]) if kern["decode.steps"] else max(len(tokens) - 1, 0)
    ops = roofline.transcription_ops(session.checkpoint.config, windows=inputs.input_features.shape[0],
                                     mel_frames=inputs.input_features.shape[-1], prompt_len=inputs.input_ids.shape[1],
                                     decode_steps=steps, dtype=precision, batch=inputs.batch_size)
    operators, classes = operator_tables(prof, ops, peaks, precision)
    # A prompt phase replayed as one CUDA graph runs no region inside it in the timed runs: its parts and
    # layers come from the graph-off runs, as the decode step's parts do for a replayed step.
    prompt_graph = bool(graph) and comp["encoder"]["median"] == 0 and gcomp["encoder"]["median"] > 0
    lcomp = gcomp if prompt_graph else comp
    total = comp["total"]  # end to end of the region-timed runs themselves
    names = {"encoder_layers": len(lcomp["layers.encoder"]), "prefill_layers": len(lcomp["layers.prefill"]),
             "prompt": inputs.input_ids.shape[1], "steps": steps}
    rows = []
    for key, name in COMPONENT_ROWS:
        level = int("." in key)
        graph_off = level == 1 and (prompt_graph if not key.startswith("decode") else graph is not None)
        wall = gcomp if graph_off else comp
        # A part timed without graphs is a share of that run's end to end, not of the graphed one's.
        of = wall["total"]["median"]
        rows.append({"name": name.format(**names), "key": key, "level": level, "wall_ms": wall[key]["median"],
                     "q1_ms": wall[key]["q1"], "q3_ms": wall[key]["q3"],
                     "pct": 100 * wall[key]["median"] / of if of else 0.0,
                     "kernel_ms": kern.get(key, 0.0), "graph_off": graph_off,
                     "in_graph": prompt_graph and key in ("encoder", "projector")})
    rows[-1]["kernel_ms"] = sum(k.ms for k in prof.kernels if k.region < 0)
    top = [r for r in rows if r["level"] == 0]
    total_sum, kernel_sum = sum(r["wall_ms"] for r in top), sum(r["kernel_ms"] for r in top)
    step = comp["decode.step_median"]
    processor = session.checkpoint.processor
    off = "use_cuda_graph=False runs"
    return {
        "label": label, "folder": label.split(":")[0], "path": getattr(session, "path", None),
        "model": session.checkpoint.description, "precision": precision, "device": session.device,
        "device_name": peaks.device, "audio_seconds": round(session.audio_seconds, 3),
        "windows": int(inputs.input_features.shape[0]), "mel_frames": int(inputs.input_features.shape[-1]),
        "prompt_len": int(inputs.input_ids.shape[1]), "tokens": len(tokens), "decode_steps": steps,
        "token_ids": list(tokens), "transcription": decode_text(processor, tokens) if processor else "",
        "runs": session.options.runs, "warmup": session.options.warmup,
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
            "prompt_source": off if prompt_graph else "the same runs",
            "decode_source": off if graph else "the same runs",
            "encoder_kernel_ms": kern["layers.encoder"], "prefill_kernel_ms": kern["layers.prefill"],
            "decode_kernel_ms": kern["layers.decode"]},
        # The kernel columns and tables come from the profiled run: with use_cuda_graph=False where the model
        # replays graphs (the same kernels, each launched inside its region), so "profiled_run" says which.
        "profiled_run": "use_cuda_graph=False" if graph else "as the model runs",
        "cuda_graph": None if not graph else {
            "step_ms_with_graph": step["median"], "step_ms_without_graph": gcomp["decode.step_median"]["median"],
            "decode_ms_without_graph": gcomp["decode"]["median"], "prompt_graph": prompt_graph,
            "prompt_ms_with_graph": comp["prefill"]["median"],
            "prompt_ms_without_graph": sum(gcomp[c]["median"] for c in ("encoder", "projector", "prefill")),
            "graph_launches": graph["graph_launches"], "kernels_outside_graphs": graph["kernels_outside_graphs"],
            "decode_launches": graph.get("decode_launches")},
        "operators": operators,
        "operator_classes": classes,
        "kernel_time_ms": sum(k.ms for k in prof.kernels),
    }


def decode_step_bytes(report: dict) -> float:
    """The bytes one decode step of ``report`` must move: its decode classes' logical bytes (every weight with
    lm_head, the KV cache, the activations: the roofline model's) over its steps."""
    decode = sum(c["model_bytes"] or 0 for c in report["operator_classes"] if c["phase"] == "decode")
    return decode / max(report["decode_steps"], 1)


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
