"""glm_asr_lab/tuning/ab_hints.py on a CPU: the hint table an arm runs under, the arms' order, the verdicts, and
one whole A/B at a tiny checkpoint's size in the cuTile emulator."""

import json
import sys

import torch

from glm_asr_course.model.config import ModelConfig
from glm_asr_cutile_example import fast_attention, fast_linear
from glm_asr_lab.tuning import ab_hints

from cutile_launches import record_launches


def test_an_arms_rows_added_inside_and_the_tables_restored_after(monkeypatch):
    entry = {("gemm", (1, 2, 3)): ((1, {"occupancy": 2}),)}
    wide = {(40, 64, torch.bfloat16): 80}
    before = {gpu: dict(row) for gpu, row in fast_linear.KERNEL_HINTS_BY_GPU.items()}
    wide_before = {gpu: dict(row) for gpu, row in fast_linear.WIDE_TILES_BY_GPU.items()}
    gpu = next(iter(before))
    with ab_hints.tables_added(gpu, entry, wide):
        assert fast_linear.KERNEL_HINTS_BY_GPU[gpu] == before[gpu] | entry
        assert fast_linear.WIDE_TILES_BY_GPU[gpu] == wide_before.get(gpu, {}) | wide
    with ab_hints.tables_added("made-up GPU", entry, wide):
        assert fast_linear.KERNEL_HINTS_BY_GPU["made-up GPU"] == entry
        assert fast_linear.WIDE_TILES_BY_GPU["made-up GPU"] == wide
    assert fast_linear.KERNEL_HINTS_BY_GPU == before and fast_linear.WIDE_TILES_BY_GPU == wide_before
    assert ab_hints.arm_entries("table") == ({}, {})
    first = {("flash", (1, 2, 3)): ((1, {"occupancy": 2}),)}
    second = {("gated gemm", (4, 5, 6)): ((9, {"num_worker_warps": 8}),)}
    monkeypatch.setitem(ab_hints.CANDIDATES, "first", first)
    monkeypatch.setitem(ab_hints.CANDIDATES, "second", second)
    monkeypatch.setitem(ab_hints.WIDE_TILE_CANDIDATES, "third", wide)
    assert ab_hints.arm_entries("first+second+third") == (first | second, wide)


def test_a_wide_tile_arm_moves_its_shape_to_the_wide_tile_from_its_rows(monkeypatch):
    """Each WIDE_TILE_CANDIDATES arm, inside its tables, gives its shapes the 128 x 256 tile from its rows on, where
    the table does not already (else the arm would time nothing new)."""
    monkeypatch.setattr(fast_linear, "EMULATED", False)
    monkeypatch.setitem(ab_hints.WIDE_TILE_CANDIDATES, "fc1-wide-one-window", {(5120, 1280, torch.bfloat16): 1500})
    for gpu in fast_linear.WIDE_TILES_BY_GPU:
        for arm in ab_hints.WIDE_TILE_CANDIDATES:
            hints, wide = ab_hints.arm_entries(arm)
            for (N, K, dtype), rows in wide.items():
                assert fast_linear.linear_tiles(rows, N, K, dtype, gpu=gpu)[1][:2] != (128, 256), (gpu, arm)
                with ab_hints.tables_added(gpu, hints, wide):
                    assert fast_linear.linear_tiles(rows, N, K, dtype, gpu=gpu)[1][:2] == (128, 256), (gpu, arm)


def test_verdicts_take_medians_over_rounds_and_flag_other_ids():
    rows = [dict(clip="c", arm="table", runs_ms=[10.0, 12.0], ids=[1, 2]),
            dict(clip="c", arm="fast", runs_ms=[8.0, 9.0], ids=[1, 2]),
            dict(clip="c", arm="fast", runs_ms=[9.5, 30.0], ids=[1, 2]),
            dict(clip="c", arm="table", runs_ms=[11.0, 13.0], ids=[1, 2]),
            dict(clip="c", arm="wrong", runs_ms=[5.0], ids=[1, 3]),
            dict(clip="c", arm="failed", error="Traceback ..."), dict(error="a process that wrote no row")]
    table = {v["arm"]: v for v in ab_hints.verdicts(rows)}
    assert set(table) == {"table", "fast", "wrong"}
    assert table["table"]["median_ms"] == 11.5 and table["table"]["change"] == 0
    assert table["fast"]["median_ms"] == 9.25 and abs(table["fast"]["change"] - (9.25 / 11.5 - 1)) < 1e-12
    assert table["fast"]["ids_equal"] and not table["wrong"]["ids_equal"]


def test_only_a_hint_arm_fails_on_other_ids(monkeypatch):
    """A wide tile may round sums differently (regret judges its ids); a hint must not change them."""
    monkeypatch.setitem(ab_hints.CANDIDATES, "hint", {("flash", (1, 2, 3)): ((1, {"occupancy": 2}),)})
    monkeypatch.setitem(ab_hints.WIDE_TILE_CANDIDATES, "wide", {(40, 64, torch.bfloat16): 80})
    table = [dict(clip="c", arm=arm, ids_equal=equal) for arm, equal in
             (("table", True), ("hint", False), ("wide", False), ("hint+wide", False), ("hint", True))]
    assert ab_hints.unequal_ids(table) == (["c / wide", "c / hint+wide"], ["c / hint"])


def test_unknown_arm_is_one_line_and_exit_2(capsys):
    assert ab_hints.main(["--arms", "table,nonsense", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown nonsense" in err


def test_an_ab_at_tiny_size_runs_its_arm_under_its_hints(tiny_ckpt, tmp_path, monkeypatch):
    """Rounds run A B, then B A, each on a fresh model; the arm's flash attention launches carry its
    hint (an arm made for the emulator's tiles), the table's do not, and the ids agree."""
    launched = record_launches(monkeypatch, fast_attention)
    encoder = ModelConfig.from_dict(json.loads((tiny_ckpt / "config.json").read_text())).encoder
    frames = encoder.max_positions
    tiles = fast_attention._flash_tiles(frames, frames, encoder.head_dim, torch.bfloat16)
    monkeypatch.setitem(ab_hints.CANDIDATES, "emulated", {("flash", tiles): ((1, {"occupancy": 2}),)})
    jsonl = tmp_path / "ab.jsonl"
    code = ab_hints.main(["--device", "cpu", "--config", str(tiny_ckpt), "--tokens", "3", "--warmup", "0",
                          "--runs", "1", "--rounds", "2", "--clips", "test clip 3.5 s", "--arms", "table,emulated",
                          "--jsonl", str(jsonl)])
    assert code == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["arm"] for r in rows] == ["table", "emulated", "emulated", "table"]
    assert all(len(r["ids"]) == 3 and r["ids"] == rows[0]["ids"] for r in rows)
    flash_hints = [k.compiler_options for k in launched
                   if getattr(k, "_pyfunc", None) is fast_attention.flash_attention_kernel._pyfunc]
    assert {"occupancy": 2} in flash_hints and {} in flash_hints
    assert fast_linear.KERNEL_HINTS_BY_GPU.get("") is None


def test_another_track_takes_the_table_alone(monkeypatch, capsys):
    """The candidates are cuTile's hints: on another track an arm would time nothing new (ab_patch.py times any
    track with the table alone)."""
    monkeypatch.setitem(ab_hints.CANDIDATES, "hint", {("flash", (1, 2, 3)): ((1, {"occupancy": 2}),)})
    assert ab_hints.main(["--track", "glm_asr_triton_example:fast", "--arms", "hint", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pass --arms table" in err


def test_the_table_arm_needs_no_cutile(monkeypatch):
    """The table arm adds no entries, so it imports no cuTile: a Triton-only A/B runs where cuTile is not installed
    (2026-11-27 g, call 2: ab_patch on the Triton track failed in both trees on an H200 without .cutile)."""
    monkeypatch.setitem(sys.modules, "glm_asr_cutile_example", None)  # importing it raises
    with ab_hints.tables_added("any GPU", *ab_hints.arm_entries("table")):
        pass
