"""glm_asr_lab/tuning/sweep_step.py off the GPU: the launches' shapes, the table put back, the winners' rule and the
row it prints. The timing itself needs CUDA graphs (gpu_check.sh sweep_step)."""

import subprocess
import sys

import pytest
import torch

from glm_asr_course.errors import UserError
from glm_asr_course.model.checkpoint import default_config_dict
from glm_asr_course.model.config import ModelConfig
from glm_asr_course.tracks import REPO_ROOT
from glm_asr_lab.tuning import ab_hints, sweep_step


def test_the_launch_shapes_are_the_decoders_gemvs():
    # GLM-ASR-Nano's decoder: 2048 wide, 16 query and 4 kv heads of 128, 6144 intermediate.
    shapes = sweep_step.launch_shapes(ModelConfig.from_dict(default_config_dict()))
    assert shapes == {"qkv": (3072, 2048), "o": (2048, 2048), "gate_up": (12288, 2048), "down": (2048, 6144)}


@pytest.mark.parametrize("had_row", [False, True])
def test_the_table_is_put_back_even_after_a_failure(had_row):
    table = {"other GPU": {(1, 2, torch.bfloat16): (8, 2048, 4, 2)}}
    if had_row:
        table["GPU"] = {(3, 4, torch.bfloat16): (4, 1024, 4, 2)}
    before = {gpu: dict(row) for gpu, row in table.items()}
    with pytest.raises(RuntimeError):
        with ab_hints.row_added(table, "GPU", {(3, 4, torch.bfloat16): (16, 4096, 8, 2)}):
            assert table["GPU"][(3, 4, torch.bfloat16)] == (16, 4096, 8, 2)
            raise RuntimeError("a launch failed")
    assert table == before


def rows(launch, table, tiles):
    return ([dict(launch=launch, tile=None, us=us) for us in table]
            + [dict(launch=launch, tile=list(tile), us=us) for tile, runs in tiles.items() for us in runs])


def test_a_tile_wins_only_beyond_the_tables_spread():
    found = sweep_step.best_tiles(
        rows("qkv", [1300, 1302, 1298, 1300], {(16, 2048, 4, 2): [1270, 1268], (8, 1024, 4, 2): [1290, 1296]})
        + rows("o", [1300, 1304, 1296, 1300], {(4, 1024, 4, 2): [1295, 1297]})  # 4 µs better, spread 8
        + rows("down", [1300, 1300, 1300, 1300], {(8, 2048, 8, 2): [1310, 1320]}))
    assert found["qkv"] == {"tile": (16, 2048, 4, 2), "us": 1269, "table_us": 1300, "spread_us": 4}
    assert found["o"] == {"tile": None, "us": 1300, "table_us": 1300, "spread_us": 8}
    assert found["down"]["tile"] is None and found["down"]["us"] == 1300


def test_the_printed_row_is_the_tables_python():
    shapes = {"qkv": (3072, 2048), "o": (2048, 2048)}
    winners = {"qkv": {"tile": (16, 2048, 4, 2)}, "o": {"tile": None}}
    text = sweep_step.table_row_text("NVIDIA H100 80GB HBM3", shapes, "bfloat16", winners)
    assert eval("{" + text + "}", {"torch": torch}) == {
        "NVIDIA H100 80GB HBM3": {(3072, 2048, torch.bfloat16): (16, 2048, 4, 2)}}
    assert sweep_step.table_row_text("GPU", shapes, "bfloat16", {"o": {"tile": None}}) == ""


def test_unknown_launches_and_a_cpu_are_refused_in_one_line():
    with pytest.raises(UserError, match="unknown gate"):
        sweep_step.chosen_launches("qkv,gate", "cuda")
    with pytest.raises(UserError, match="needs a GPU"):
        sweep_step.chosen_launches("qkv", "cpu")
    done = subprocess.run([sys.executable, "-m", "glm_asr_lab.tuning.sweep_step", "--launches", "qkv,x"],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == ["--launches: unknown x (known: qkv, o, gate_up, down)"]
