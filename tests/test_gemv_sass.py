"""glm_asr_lab/measure/gemv_sass.py: both tracks' decode GEMVs compiled for sm_90 on the CPU, and the machine code
facts docs/performance.md (2026-11-28 a) states from it. When a compiler upgrade changes them, this fails and the
record needs a new look."""

import json
import os
import subprocess
import sys

import pytest

from glm_asr_course.tracks import REPO_ROOT
from glm_asr_lab.cutile_compile_check import toolchain_missing
from glm_asr_lab.measure.occupancy import blocks_an_sm


@pytest.mark.parametrize("registers, threads, shared, blocks", [
    (246, 128, 1152, 2),  # registers: 31 units of 256 a warp, 4 warps: 31,744 of 65,536
    (170, 128, 0, 2),  # 5,440 registers a warp take 22 units (5,632): three blocks would need 67,584
    (32, 128, 100 * 1024, 2),  # shared memory: 228 KiB hold two blocks of 100
    (16, 1024, 0, 2),  # threads: 2,048 an SM
    (16, 32, 0, 32),  # the 32 blocks an SM holds at most
])
def test_blocks_an_sm_takes_the_tightest_limit(registers, threads, shared, blocks):
    assert blocks_an_sm(registers, threads, shared) == blocks


def test_the_gemvs_machine_code_as_the_record_states_it(tmp_path):
    missing = toolchain_missing()
    if missing:
        pytest.skip(missing)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "GLM_ASR_CUTILE")}
    out = tmp_path / "gemv_sass.json"
    run = subprocess.run([sys.executable, "-m", "glm_asr_lab.measure.gemv_sass", "--json", str(out)], cwd=REPO_ROOT,
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {(row["launch"], row["track"]): row for row in json.loads(out.read_text())}
    assert set(rows) == {(launch, track) for launch in ("o", "gate_up", "down") for track in ("triton", "cutile")}
    for launch in ("o", "gate_up", "down"):
        triton_code, cutile_code = rows[launch, "triton"], rows[launch, "cutile"]
        # Triton: 16-byte loads from global memory straight into registers, no TMA, about no shared memory.
        assert triton_code["loads"]["LDG"] > 0 and triton_code["loads"]["UTMALDG"] == 0
        assert triton_code["shared_bytes"] <= 4096
        # cuTile: every weight tile through TMA into shared memory, then read into registers; no global loads.
        assert cutile_code["loads"]["UTMALDG"] > 0 and cutile_code["loads"]["LDG"] == 0
        assert cutile_code["loads"]["LDS"] > 0 and cutile_code["shared_bytes"] > 32 * 1024
    # Occupancy as the record gives it (H100 tiles and hints).
    assert [rows["o", t]["blocks_an_sm"] for t in ("triton", "cutile")] == [2, 1]
    assert [rows["gate_up", t]["blocks_an_sm"] for t in ("triton", "cutile")] == [4, 2]
    assert [rows["down", t]["blocks_an_sm"] for t in ("triton", "cutile")] == [1, 1]


def test_under_the_interpreter_it_says_so_in_one_line():
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-m", "glm_asr_lab.measure.gemv_sass"], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == ["gemv_sass compiles for the GPU: run it without TRITON_INTERPRET=1"]
