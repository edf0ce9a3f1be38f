#!/usr/bin/env python3
"""The short tables that end utils/gpu_check.sh (parity, clips, benchmarks), also written to OUT_DIR/summary.md."""

import json
import sys
from pathlib import Path


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


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


def main(out_dir: str):
    out = Path(out_dir)
    parity = read_lines(out / "parity.jsonl")
    lines = parity_table(parity) + clips_table(read_lines(out / "clips.jsonl")) + bench_table(
        read_lines(out / "bench.jsonl"), parity)
    text = "\n".join(lines) if lines else "(no results recorded)"
    (out / "summary.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
