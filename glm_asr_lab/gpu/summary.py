#!/usr/bin/env python3
"""The short tables that end utils/gpu_check.sh (every step's exit and result, then parity, clips, benchmarks,
the fast paths against their floor), also written to OUT_DIR/summary.md."""

import datetime
import json
import re
import sys
from pathlib import Path


from glm_asr_lab.measure.breakdown import decode_step_bytes  # noqa: E402
from glm_asr_lab.measure.roofline import Peaks  # noqa: E402


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


# What a step's last lines say of it: pytest's count, a self-check's count, a tool's own "N of M" line.
RESULT_LINE = re.compile(r"(\d+ (passed|failed)\b.*|\d+ of \d+ .*)")


def steps_table(log: Path) -> list[str]:
    """One row per step of gpu_check.sh's log.txt ("=== NAME (HH:MM:SS)" ... "=== NAME exit N"): its exit,
    seconds (to the next step's start) and last result line, so a part without tables of its own (kernels,
    robust) still ends in one. The summary step, still running when it is read, only ends the one before."""
    if not log.is_file():
        return []
    steps = []  # [name, start, exit or None, result]
    for line in log.read_text(errors="replace").splitlines():
        if opened := re.fullmatch(r"=== (.+) \((\d\d:\d\d:\d\d)\)", line):
            steps.append([opened[1], datetime.datetime.strptime(opened[2], "%H:%M:%S"), None, ""])
        elif (closed := re.fullmatch(r"=== (.+) exit (\d+)", line)) and steps and closed[1] == steps[-1][0]:
            steps[-1][2] = int(closed[2])
        elif steps and (result := RESULT_LINE.search(line.strip(" ="))):
            steps[-1][3] = result[0]
    rows = []
    for (name, began, code, result), following in zip(steps, steps[1:] + [None]):
        if code is None or name == "summary":
            continue
        seconds = f"{(following[1] - began).seconds}" if following else "-"
        verdict = "0" if code == 0 else f"**{code}**" + (" (time limit)" if code == 124 else "")
        rows.append(f"| {name} | {verdict} | {seconds} | {result or '-'} |")
    return ["| step | exit | seconds | result |", "| --- | --- | --- | --- |", *rows, ""] if rows else []


def parity_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    ref = rows[0]
    lines = [f"Parity, full-size random weights: transformers' true-fp32 reference decodes {ref['ref_distinct_ids']} "
             f"distinct ids in {ref['tokens']} tokens (smallest top-2 logit gap {ref['min_top2_gap']:.3g}).", "",
             "| track | precision | prefill logits rel err (norm / max) | ids equal to fp32 reference | "
             "free-running regret max (token, top-2 gap) | same-context regret (flips) | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        err = (f"{row['rel_err_norm']:.2e} / {row['rel_err_max']:.2e}" if "rel_err_norm" in row else "-")
        lines.append(f"| {row['track']} | {row['precision']} | {err} | {row['tokens_agree']}/{row['tokens']} | "
                     f"{row['max_regret']:.3g} ({row['max_regret_step']}, {row['max_regret_top2_gap']:.3g}) | "
                     f"{row.get('same_context_regret', 0):.3g} ({row.get('same_context_flips', 0)}) | "
                     f"{row.get('verdict', 'yardstick')} |")
    return lines + [""]


def clips_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = ["| clip | track | windows | prompt | fp32 ids == transformers | bf16 ms | real-time factor | peak GiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['clip']} | {r['track']} | {r['windows']} | {r['prompt_len']} | {r['fp32_ids_equal']} | "
                     f"{r['bf16_ms']:.1f} | {r['real_time_factor']:.4f} | {r['peak_gib']:.1f} |")
    return lines + [""]


def bench_table(rows: list[dict], parity: list[dict]) -> list[str]:
    if not rows:
        return []
    hf_ms = {r["precision"]: r["hf_ms_median"] for r in parity if "hf_ms_median" in r}
    lines = ["| benchmark.sh (13 tokens, test clip) | path | precision | ms per transcription | ms/token | "
             "vs transformers |", "| --- | --- | --- | --- | --- | --- |"]
    for precision, ms in hf_ms.items():
        lines.append(f"| transformers (sdpa) | - | {precision} | {ms:.1f} | {ms / 13:.2f} | 1.0× |")
    for r in rows:
        precision = r.get("precision", r.get("dtype"))
        ratio = f"{hf_ms[precision] / r['mean_ms']:.1f}×" if precision in hf_ms else "-"
        lines.append(f"| {r['folder']} | {r.get('path', '-')} | {precision} | {r['mean_ms']:.1f} ± {r['std_ms']:.1f} "
                     f"| {r['ms_per_token']:.2f} | {ratio} |")
    return lines + [""]


# The fastpath part's files: OUT_DIR/fastpath.jsonl (glm_asr_lab/gpu/fastpath.py) and, under OUT_DIR/fastpath/,
# benchmark_detailed.py's JSON of each fast path in bf16 (components_*.json), of their kernels alone (micro.json)
# and of the Triton fast path in IEEE fp32 (ieee.json).
TRITON_FAST, CUTILE_FAST, TRITON_COURSE = ("glm_asr_triton_example:fast", "glm_asr_cutile_example:fast",
                                           "glm_asr_triton_example:course")
# Issue 27's target for the encoder's flash attention, a share of the dense bf16 peak measured in the same run.
ATTENTION_TARGET = 0.45
ENCODER_GEMMS = ("encoder qkv", "encoder o", "encoder fc1 +gelu", "encoder fc2")  # micro's rows, one layer's four


def read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def cell(value, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def micro_rates(micro: dict | None, folder: str) -> dict:
    """TFLOP/s of the encoder's four GEMMs (together) and of its flash attention, each launch timed alone at the
    model's shapes with a cold L2 (benchmark_detailed.py --linear-only --attention-only). Empty where the folder
    was not measured or ran torch's kernel instead of its own."""
    if not micro or folder not in micro["folders"]:
        return {}
    i = micro["folders"].index(folder)
    rows = {r["op"]: r for section in micro["sections"] for r in section["rows"]}
    out = {}
    gemms = [rows[name] for name in ENCODER_GEMMS if name in rows]
    if gemms and all(r["impls"][i]["launcher"] and r["impls"][i]["us"] for r in gemms):
        out["gemm_tflops"] = sum(r["flops"] for r in gemms) / sum(r["impls"][i]["us"] for r in gemms) / 1e6
    attention = rows.get("encoder self-attention")
    if attention and attention["impls"][i]["launcher"] and attention["impls"][i]["us"]:
        out["attention_tflops"] = attention["flops"] / attention["impls"][i]["us"] / 1e6
    return out


def transcription_rates(report: dict | None, peaks: Peaks) -> dict:
    """From benchmark_detailed.py's report of a transcription: the decode step (median replay) against the bytes
    a step must move (every weight with lm_head, the KV cache, the activations: the roofline model's) as GB/s and
    share of the copy bandwidth; graph launches a token and kernels launched outside graphs; the encoder's GEMMs
    as they ran in it (their kernel time: with PDL a Triton kernel's includes its wait for the one before)."""
    if not report:
        return {}
    step_bytes = decode_step_bytes(report)
    step_ms = report["decode_step"]["median_ms"]
    out = {"step_ms": step_ms, "step_gbps": step_bytes / step_ms / 1e6,
           "step_pct_copy": 100 * step_bytes / (step_ms / 1000) / peaks.bandwidth}
    graph = report.get("cuda_graph") or {}
    if "graph_launches" in graph:
        out["launches_per_token"] = graph["graph_launches"] / report["tokens"]
        out["kernels_outside_graphs"] = graph["kernels_outside_graphs"]
    def encoder_tflops(kind):
        found = next((c for c in report["operator_classes"] if (c["phase"], c["class"]) == ("encoder", kind)), None)
        return found and found["tflops"]

    out["gemm_in_model_tflops"] = encoder_tflops("gemm")
    out["attention_in_model_tflops"] = encoder_tflops("attention")
    return out


def met(ok: bool | None) -> str:
    return "-" if ok is None else ("**yes**" if ok else "**no**")


def fastpath_tables(out: Path) -> list[str]:
    """The fastpath part: end to end against the floor and transformers, then the components, then where the
    Triton fast path's time goes in IEEE fp32."""
    rows = read_lines(out / "fastpath.jsonl")
    if not rows:
        return []
    first_peaks = next((r for r in rows if r["kind"] == "peaks"), None)
    timing = {(r["track"], r["precision"]): r for r in rows if r["kind"] == "timing" and "mean_ms" in r}
    anchors = {r["anchor"]: r for r in rows if r["kind"] == "anchor" and "mean_ms" in r}
    failed = [r.get("track", "transformers " + r.get("anchor", "")) + " " + r["precision"] for r in rows
              if "error" in r]
    lines = []
    if first_peaks:
        peaks = Peaks(**first_peaks["peaks"])
        lines.append(f"Fast paths: {peaks.describe()}; test clip, {first_peaks['tokens']} tokens (prompt "
                     f"{first_peaks['prompt_len']}), random weights. Floors from these peaks.")
    lines += ["", "| path | precision | ms, mean ± std (runs) | floor ms | time / floor | target | met |",
              "| --- | --- | --- | --- | --- | --- | --- |"]

    def ratio(a, b):
        return a["mean_ms"] / b["mean_ms"] if a and b else None

    for (track, precision), r in timing.items():
        fast = timing.get((TRITON_FAST, precision))
        target, ok = "-", None
        if track == TRITON_FAST and precision in ("bf16", "tf32"):
            limit = 1.2 if precision == "bf16" else 1.3
            target, ok = f"≤ {limit} × floor", r["mean_ms"] <= limit * r["floor_ms"]
        elif track == CUTILE_FAST:
            target, ok = "≤ 1.10 × Triton fast", None if fast is None else ratio(r, fast) <= 1.10
            target += f" ({cell(ratio(r, fast), '.2f', '×')})"
        elif track == TRITON_FAST and precision == "fp32":
            course = timing.get((TRITON_COURSE, "fp32"))
            target = f"≤ Triton course ({cell(ratio(r, course), '.2f', '×')})"
            ok = None if course is None else r["mean_ms"] <= course["mean_ms"]
            if course:  # both IEEE fp32: the same ids, or one path's arithmetic is off
                target += f"; ids {'=' if r['ids'] == course['ids'] else '≠'} course's"
        elif track == TRITON_COURSE and fast:
            target = f"(Triton fast × {ratio(r, fast):.2f})"
        lines.append(f"| {track} | {precision} | {r['mean_ms']:.1f} ± {r['std_ms']:.1f} ({len(r['runs_ms'])}) | "
                     f"{r['floor_ms']:.1f} | {r['mean_ms'] / r['floor_ms']:.2f}× | {target} | {met(ok)} |")
    for name, r in anchors.items():
        versus = ", ".join(f"{label} fast {r['mean_ms'] / timing[(track, 'bf16')]['mean_ms']:.1f}× faster"
                           for track, label in ((TRITON_FAST, "Triton"), (CUTILE_FAST, "cuTile"))
                           if (track, "bf16") in timing)
        lines.append(f"| transformers: {r['setting']} | bf16 | {r['mean_ms']:.1f} ± {r['std_ms']:.1f} "
                     f"({len(r['runs_ms'])}) | | | anchor (first call {r['first_call_ms'] / 1000:.1f} s); {versus} | |")
    if failed:
        lines.append(f"\nFailed (see log.txt): {', '.join(failed)}")

    detail = out / "fastpath"
    reports = {r["label"]: r for r in map(read_json, sorted(detail.glob("components_*.json")))}
    micro = read_json(detail / "micro.json")
    if reports or micro:
        peaks = Peaks(**next(iter(reports.values()), micro)["peaks"])
        tracks = (TRITON_FAST, CUTILE_FAST)
        model = {t: transcription_rates(reports.get(t), peaks) for t in tracks}
        alone = {t: micro_rates(micro, t.split(":")[0]) for t in tracks}
        bf16_peak = peaks.flops_for("bf16") / 1e12
        lines += ["", f"Components, bf16 ({peaks.device}: copy {peaks.bandwidth / 1e9:,.0f} GB/s, dense bf16 "
                  f"{bf16_peak:,.0f} TFLOP/s, measured)", "",
                  "| component | Triton fast | cuTile fast | target | met (Triton / cuTile) |",
                  "| --- | --- | --- | --- | --- |"]

        def of_peak(tflops):
            return "-" if tflops is None else f"{tflops:.0f} ({100 * tflops / bf16_peak:.0f} %)"

        def row(name, values, target, ok):
            """ok(track): the target met, or None where that track's figure is missing."""
            lines.append(f"| {name} | {' | '.join(values)} | {target} | {' / '.join(met(ok(t)) for t in tracks)} |")

        row("encoder GEMMs q\\|k\\|v, o, fc1, fc2, each alone (TFLOP/s, % of dense peak)",
            [of_peak(alone[t].get("gemm_tflops")) for t in tracks], "≥ 600 TFLOP/s",
            lambda t: alone[t]["gemm_tflops"] >= 600 if "gemm_tflops" in alone[t] else None)
        row("encoder GEMMs in the transcription (kernel time)",
            [of_peak(model[t].get("gemm_in_model_tflops")) for t in tracks], "-", lambda t: None)
        row("encoder flash attention, alone (TFLOP/s, % of dense peak)",
            [of_peak(alone[t].get("attention_tflops")) for t in tracks], f"≥ {100 * ATTENTION_TARGET:.0f} % of peak",
            lambda t: alone[t]["attention_tflops"] >= ATTENTION_TARGET * bf16_peak if "attention_tflops" in alone[t]
            else None)
        row("encoder flash attention in the transcription (kernel time)",
            [of_peak(model[t].get("attention_in_model_tflops")) for t in tracks], "-", lambda t: None)
        row("decode step with lm_head (median replay: ms, GB/s, % of copy)",
            [f"{model[t]['step_ms']:.2f} ms, {model[t]['step_gbps']:,.0f} GB/s, {model[t]['step_pct_copy']:.0f} %"
             if model[t] else "-" for t in tracks], "≥ 85 % of copy",
            lambda t: model[t]["step_pct_copy"] >= 85 if model[t] else None)
        row("graph launches a token; kernels outside graphs",
            [f"{model[t]['launches_per_token']:.2f}; {model[t]['kernels_outside_graphs']}"
             if "launches_per_token" in model[t] else "-" for t in tracks], "1; 0",
            lambda t: (model[t]["launches_per_token"] == 1 and model[t]["kernels_outside_graphs"] == 0)
            if "launches_per_token" in model[t] else None)

    ieee = read_json(detail / "ieee.json")
    if ieee:
        lines += ["", f"Where the Triton fast path's time goes in IEEE fp32: {ieee['end_to_end']['median_ms']:.1f} ms "
                  f"median, {ieee['kernel_time_ms']:.1f} ms of kernels in the profiled run; the largest:", "",
                  "| phase | class | kernel | calls | ms | % | TFLOP/s |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for o in ieee["operators"][:8]:
            lines.append(f"| {o['phase']} | {o['class']} | {o['kernel']} | {o['calls']} | {o['total_ms']:.1f} | "
                         f"{o['pct']:.0f} | {cell(o['tflops'], '.2f')} |")
    return lines + [""]


def long_clips_tables(out: Path, largest: int = 8) -> list[str]:
    """The long_clips part: per clip, each fast path's components in kernel ms of the profiled run (the encoder
    runs inside the replayed prompt graph, where no region has a wall time of its own) and, when a second path
    ran (cuTile's), the kernel classes where it spends most beyond the first. benchmark_detailed.py --compare
    writes the second path's report under "others" and the class table under "comparison"."""
    lines = []
    for report in map(read_json, sorted((out / "long_clips").glob("*.json"))):
        paths = [report, *report.get("others", [])]
        labels = [path["label"] for path in paths]
        pair = len(paths) == 2
        kernel_ms = [{c["key"]: c["kernel_ms"] for c in path["components"]} for path in paths]
        windows = f"{report['windows']} window" + ("s" if report["windows"] != 1 else "")
        lines += [f"Long clip, {report['audio_seconds']:.1f} s ({windows}, prompt {report['prompt_len']}, "
                  f"{report['tokens']} tokens), {report['precision']}, kernel ms of the profiled run: "
                  f"{' / '.join(labels)}", "",
                  "| component | " + " | ".join(labels) + (" | ratio |" if pair else " |"),
                  "| --- |" + " --- |" * (len(labels) + pair)]
        rows = [(f"{'· ' * c['level']}{c['name']}", [ms[c["key"]] for ms in kernel_ms])
                for c in report["components"] if c["level"] <= 1]
        rows.append(("end to end (median wall ms)", [path["end_to_end"]["median_ms"] for path in paths]))
        for name, values in rows:
            ratio = ""
            if pair:
                first, second = values
                ratio = f" {second / first:.2f}× |" if first and second else " - |"
            lines.append(f"| {name} | " + " | ".join(cell(ms, ".2f") for ms in values) + " |" + ratio)
        cmp = report.get("comparison")
        if pair and cmp:
            slower = [row for row in cmp["classes"] if row["ms"][1] > row["ms"][0]]
            gaps = sorted(slower, key=lambda row: row["ms"][0] - row["ms"][1])[:largest]
            lines += ["", f"Kernel classes where {labels[1]} spends most beyond {labels[0]} (kernel ms, profiled run):",
                      "", "| phase | class | " + " | ".join(labels) + " | extra ms |",
                      "| --- | --- |" + " --- |" * (len(labels) + 1)]
            lines += [f"| {row['phase']} | {row['class']} | " + " | ".join(f"{ms:.2f}" for ms in row["ms"])
                      + f" | {row['ms'][1] - row['ms'][0]:+.2f} |" for row in gaps]
        lines.append("")
    return lines


def main(out_dir: str):
    out = Path(out_dir)
    parity = read_lines(out / "parity.jsonl")
    lines = (steps_table(out / "log.txt") + parity_table(parity) + clips_table(read_lines(out / "clips.jsonl"))
             + bench_table(read_lines(out / "bench.jsonl"), parity) + fastpath_tables(out) + long_clips_tables(out))
    text = "\n".join(lines) if lines else "(no results recorded)"
    (out / "summary.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
