"""Every plot the tools write: benchmark_detailed.py --plot (roofline.png: a point per operator class;
components.png: where a transcription's time goes) and the grader's report (roofline.png: a point per
end-to-end run). matplotlib is optional: ``pyplot`` says whether it is there.
"""

import math
from pathlib import Path

from glm_asr_course.errors import UserError

PHASE_MARKERS = {"encoder": "o", "projector": "s", "prefill": "^", "decode": "D", "outside": "x"}
CLASS_COLORS = {"conv": "#8c564b", "gemm": "#1f77b4", "attention": "#d62728", "norm": "#2ca02c",
                "rope": "#bcbd22", "pointwise": "#ff7f0e", "embedding": "#9467bd", "lm_head": "#17becf",
                "argmax": "#7f7f7f", "copy": "#c7c7c7", "other": "#e377c2", "host": "#000000"}
COMPONENT_COLORS = (("encoder", "encoder", "#1f77b4"), ("projector", "projector", "#9467bd"),
                    ("prefill", "prefill", "#2ca02c"), ("decode", "decode steps", "#d62728"),
                    ("outside", "outside regions", "#7f7f7f"))


def fmt_ms(x: float | None) -> str:
    """Milliseconds as the reports print them: one decimal from 100 ms, two from 1 ms, three below."""
    if x is None:
        return "-"
    return f"{x:.1f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) >= 1 else f"{x:.3f}"


def pyplot(required_by: str | None = None):
    """matplotlib's pyplot (Agg), or None where it is not installed; ``required_by`` makes that an error."""
    try:
        import matplotlib
    except ImportError:
        if required_by:
            raise UserError(f"{required_by} needs matplotlib, which is not installed "
                            "(pip install matplotlib)") from None
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _roofs(ax, roofs, bandwidth: float, lo: float, hi: float):
    """One attainable-performance line min(peak, AI × bandwidth) per (label, FLOP/s, style, width), in TFLOP/s,
    with its ridge point marked."""
    xs = [10 ** (math.log10(lo) + (math.log10(hi) - math.log10(lo)) * i / 199) for i in range(200)]
    for label, peak, style, width in roofs:
        ax.plot(xs, [min(peak, x * bandwidth) / 1e12 for x in xs], style, color="0.25", lw=width, label=label)
        ax.axvline(peak / bandwidth, color="0.55", lw=0.7, ls=":")


def _save(plt, fig, ax, path: Path, dpi: int, xlabel: str, ylabel: str, title: str, log: bool = True) -> str:
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return str(path)


def prompt_graph(report: dict) -> bool:
    return bool((report.get("cuda_graph") or {}).get("prompt_graph"))


def bar_values(report: dict) -> dict[str, float]:
    """Wall ms per top-level component for the stacked bar. A replayed prompt graph times encoder,
    projector and prefill as one (the prefill row); its wall time is shared out in proportion to the
    kernel time of each, so the bar still shows where the prompt phase goes."""
    comps = {c["key"]: c for c in report["components"]}
    values = {key: max(0.0, comps[key]["wall_ms"]) for key in ("encoder", "projector", "prefill", "decode", "outside")}
    if prompt_graph(report):
        phase = ("encoder", "projector", "prefill")
        kernel = {key: max(0.0, comps[key]["kernel_ms"] or 0.0) for key in phase}
        total = sum(kernel.values())
        if total > 0:
            wall = sum(values[key] for key in phase)
            values.update({key: wall * kernel[key] / total for key in phase})
    return values


def operator_roofline(plt, path: Path, reports: list[dict], peaks) -> str:
    """One point per (phase, class) of every report with a FLOP model, under the device's measured roofs."""
    from matplotlib.lines import Line2D

    precision = reports[0]["precision"]
    fig, ax = plt.subplots(figsize=(10.5, 6.5))
    points = [(rep, c) for rep in reports for c in rep["operator_classes"]
              if c["kernels"] and c["tflops"] and c["intensity"] and c["tflops"] > 0]
    ais = [c["intensity"] for _, c in points] or [1.0]
    bw, main_peak = peaks.bandwidth, peaks.flops_for(precision)
    lo, hi = min(min(ais) / 3, 0.05), max(max(ais) * 8, main_peak / bw * 10)
    # The precision's roof solid; on a GPU the other measured matmul roofs as thin dashed lines.
    roofs = [(f"{precision} roof", main_peak, "-", 1.6)]
    if peaks.kind == "cuda":
        names = {"bfloat16": "bfloat16 roof", "tf32": "tf32 roof", "float32": "float32 IEEE roof (CUDA cores)"}
        roofs += [(names.get(k, f"{k} roof"), v, "--", 0.9) for k, v in peaks.matmul.items()
                  if abs(v - main_peak) > 1e-6 * v]
    _roofs(ax, [(f"{name}: {peak / 1e12:,.3g} TFLOP/s, ridge {peak / bw:.0f} FLOP/B", peak, style, width)
                for name, peak, style, width in roofs], bw, lo, hi)
    x_bw = math.sqrt(lo * main_peak / bw)
    ax.text(x_bw, x_bw * bw / 1e12 * 1.25, f"{bw / 1e9:,.0f} GB/s", fontsize=8, color="0.25", rotation=0, ha="center")
    fills, placed = ["full", "none", "left"], []
    for ri, rep in enumerate(reports):
        for c in (c for r, c in points if r is rep):
            ax.plot(c["intensity"], c["tflops"], marker=PHASE_MARKERS.get(c["phase"], "o"), ms=9,
                    color=CLASS_COLORS.get(c["class"], "#333333"), fillstyle=fills[ri % 3], ls="none", alpha=0.9)
            if ri == 0:  # label the first report's points; nudge labels that would overlap
                lx, ly = math.log10(c["intensity"]), math.log10(c["tflops"])
                dy = 4
                while any(abs(lx - px) < 0.45 and abs(ly + dy / 60 - py) < 0.12 for px, py in placed):
                    dy -= 9
                placed.append((lx, ly + dy / 60))
                ax.annotate(f"{c['phase']}·{c['class']}", (c["intensity"], c["tflops"]), fontsize=7,
                            xytext=(6, dy), textcoords="offset points")
    ax.set_xlim(lo, hi)
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
    where = "CPU measurements" if peaks.kind == "cpu" else "measured"
    return _save(plt, fig, ax, path, 130, "arithmetic intensity (FLOP / byte of minimum memory traffic)",
                 "achieved TFLOP/s", f"Roofline per operator class: {', '.join(r['label'] for r in reports)}\n"
                 f"{precision}, {peaks.device}; peaks {where}")


def components_bar(plt, path: Path, reports: list[dict], peaks) -> str:
    """A stacked bar per report: its end-to-end time split into components."""
    fig, ax = plt.subplots(figsize=(max(6.5, 2.2 * len(reports) + 4), 5.5))
    labels = [r["label"] for r in reports]
    bottoms = [0.0] * len(reports)
    bar_values_of = [bar_values(r) for r in reports]
    for key, name, color in COMPONENT_COLORS:
        vals = [values[key] for values in bar_values_of]
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
    split_note = ("\n* one CUDA graph from encoder to first token: its wall time split by kernel time"
                  if any(prompt_graph(r) for r in reports) else "")
    ax.set_xticks(range(len(reports)), [r["label"] + (" *" if prompt_graph(r) else "") for r in reports])
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_ylim(0, max(max(bottoms), max(r["component_totals"]["end_to_end_ms"] for r in reports)) * 1.15)
    return _save(plt, fig, ax, path, 130, "", "ms (median over runs, region timers)",
                 f"Where one transcription's time goes\n{reports[0]['precision']}, {peaks.device}{split_note}",
                 log=False)


def write_plots(out_dir: str, reports: list[dict], peaks) -> list[str]:
    """benchmark_detailed.py --plot: roofline.png and components.png into ``out_dir`` (created)."""
    plt = pyplot(required_by="--plot")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [operator_roofline(plt, out / "roofline.png", reports, peaks),
            components_bar(plt, out / "components.png", reports, peaks)]


def run_roofline(report: dict, path: Path) -> bool:
    """The grader's report: each end-to-end run as a point (FLOP per byte, TFLOP/s) under the device's
    roofline; False where matplotlib is missing or the peaks are unknown."""
    plt = pyplot()
    peak, bandwidth = report["peaks"]["matmul_tflops"] * 1e12, report["peaks"]["copy_gbps"] * 1e9
    if plt is None or not peak:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    _roofs(ax, [("roofline (measured peaks)", peak, "-", 1.2)], bandwidth, 1e-2, 1e4)
    for r in report["end_to_end"]:
        ax.scatter([r["flops"] / r["bytes"]], [r["tflops"]], s=40, zorder=3,
                   label=f"{r['label']}: {r['mean_ms']:.1f} ms")
    ax.legend(fontsize=7)
    _save(plt, fig, ax, path, 120, "arithmetic intensity (FLOP / byte, whole transcription)", "TFLOP/s",
          f"{report['folder']} vs {report['solution']} ({report['precision']}, {report['device']})")
    return True
