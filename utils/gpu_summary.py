#!/usr/bin/env python3
"""The short table that ends utils/gpu_check.sh: parity and timings, also written to OUT_DIR/summary.md."""

import json
import sys
from pathlib import Path


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _regret(row: dict) -> str:
    if "max_regret" not in row:
        return "not recorded"
    return f"{row['max_regret']:.3g} (token {row['max_regret_step']}, top-2 gap {row['max_regret_top2_gap']:.3g})"


def main(out_dir: str):
    out = Path(out_dir)
    lines = ["| parity (full size, random weights) | dtype | logits rel err (norm / max) | greedy tokens agreeing "
             "| distinct ids (transformers) | teacher-forced regret max |", "| --- | --- | --- | --- | --- | --- |"]
    hf_ms = {}
    for row in read_lines(out / "parity.jsonl"):
        hf_ms[row["dtype"]] = row["hf_ms_median"]
        lines.append(f"| {row['track']} | {row['dtype']} | {row['rel_err_norm']:.2e} / {row['rel_err_max']:.2e} "
                     f"| {row['tokens_agree']}/{row['tokens']} | {row.get('distinct_ids', 'not recorded')} "
                     f"| {_regret(row)} |")
    lines += ["", "| benchmark.sh (13 tokens, test clip) | dtype | ms per transcription | ms/token | vs transformers sdpa |",
              "| --- | --- | --- | --- | --- |"]
    for dtype, ms in hf_ms.items():
        lines.append(f"| transformers (sdpa) | {dtype} | {ms:.1f} | {ms / 13:.2f} | 1.0× |")
    for row in read_lines(out / "bench.jsonl"):
        ratio = hf_ms.get(row["dtype"], 0) / row["mean_ms"] if row["mean_ms"] else 0
        lines.append(f"| {row['folder']} | {row['dtype']} | {row['mean_ms']:.1f} ± {row['std_ms']:.1f} "
                     f"| {row['ms_per_token']:.2f} | {ratio:.1f}× |")
    text = "\n".join(lines)
    (out / "summary.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
