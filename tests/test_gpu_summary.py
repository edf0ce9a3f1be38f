"""glm_asr_lab/gpu/summary.py's steps table, read from a recorded GPU run's log (the first run of gpu_check.sh robust,
H200, 2026-11-26): every step with its exit, its seconds and its result line; failures stand out."""

import os
import shutil

from glm_asr_lab.gpu import summary as gpu_summary

RUN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "gpu_runs",
                   "2026-11-26-h200-robust-first")


def test_steps_table_of_a_recorded_run(tmp_path):
    shutil.copy(os.path.join(RUN, "log.txt"), tmp_path / "log.txt")
    gpu_summary.main(str(tmp_path))
    rows = [line for line in (tmp_path / "summary.md").read_text().splitlines() if line.startswith("| ")][2:]
    steps = {row.split(" | ")[0][2:]: row.split(" | ")[1:] for row in rows}
    assert len(steps) == 12 and "summary" not in steps
    assert steps["self-check glm_asr_triton_example/fast_linear.py"] == ["0", "15", "7 passed, 0 failed, 0 TODO |"]
    assert steps["awkward checkpoints end to end"][:2] == ["**1**", "166"]
    assert steps["awkward checkpoints end to end"][2].startswith("2 failed, 16 passed")
    assert steps["bad input"][:2] == ["**124** (time limit)", "201"]  # to the summary step's start
