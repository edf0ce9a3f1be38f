"""glm_asr_lab/gpu/summary.py's long_clips tables (utils/gpu_check.sh long_clips), from reports in
benchmark_detailed.py's JSON layout with their comparison made by breakdown.comparison: the components' kernel
ms side by side with their ratio (not their wall ms: the encoder runs inside the prompt graph, where its region has
none), and the kernel classes ordered by the second path's extra time."""

import json

from glm_asr_lab.gpu import summary as gpu_summary
from glm_asr_lab.measure.breakdown import comparison


def report(label: str, encoder_ms: float, decode_ms: float, classes: dict) -> dict:
    return {"label": label, "tokens": 13, "precision": "bf16", "audio_seconds": 45.0, "windows": 2, "prompt_len": 577,
            # Wall ms as a replayed prompt graph leaves them: none for the encoder.
            "components": [{"name": "encoder", "key": "encoder", "level": 0, "wall_ms": 0.0, "kernel_ms": encoder_ms},
                           {"name": "layers (32)", "key": "encoder.layers", "level": 1, "wall_ms": 99.0,
                            "kernel_ms": encoder_ms - 1},
                           {"name": "one layer", "key": "encoder.layer", "level": 2, "wall_ms": 0.3, "kernel_ms": 0.3},
                           {"name": "decode (12 steps)", "key": "decode", "level": 0, "wall_ms": decode_ms + 1,
                            "kernel_ms": decode_ms}],
            "end_to_end": {"median_ms": encoder_ms + decode_ms + 2},
            "operator_classes": [{"phase": phase, "class": cls, "total_ms": ms, "kernels": 1}
                                 for (phase, cls), ms in classes.items()]}


def test_long_clip_tables_side_by_side_and_the_largest_gaps_first(tmp_path):
    triton = report("triton:fast", 10.0, 20.0, {("encoder", "gemm"): 6.0, ("encoder", "attention"): 2.0,
                                                 ("decode", "gemm"): 15.0, ("prefill", "gemm"): 3.0})
    cutile = report("cutile:fast", 14.0, 25.0, {("encoder", "gemm"): 7.0, ("encoder", "attention"): 4.5,
                                                 ("decode", "gemm"): 19.0, ("prefill", "gemm"): 2.0})
    folder = tmp_path / "long_clips"
    folder.mkdir()
    (folder / "45_s.json").write_text(json.dumps(triton | {"others": [cutile], "comparison": comparison([triton, cutile])}))
    gpu_summary.main(str(tmp_path))
    lines = (tmp_path / "summary.md").read_text().splitlines()
    text = "\n".join(lines)
    assert "45.0 s (2 windows, prompt 577, 13 tokens), bf16" in text
    assert "| encoder | 10.00 | 14.00 | 1.40× |" in lines
    assert "| · layers (32) | 9.00 | 13.00 | 1.44× |" in lines
    assert "| end to end (median wall ms) | 32.00 | 41.00 | 1.28× |" in lines
    assert "one layer" not in text  # deeper levels stay in the JSON
    gaps = lines[lines.index(next(line for line in lines if "extra ms" in line)) + 2:]
    assert [line for line in gaps if line] == [
        "| decode | gemm | 15.00 | 19.00 | +4.00 |", "| encoder | attention | 2.00 | 4.50 | +2.50 |",
        "| encoder | gemm | 6.00 | 7.00 | +1.00 |"]  # the prefill, faster in the second, is left out


def test_long_clip_without_a_second_path_lists_its_components(tmp_path):
    alone = report("triton:fast", 10.0, 20.0, {("encoder", "gemm"): 6.0})
    (tmp_path / "long_clips").mkdir()
    (tmp_path / "long_clips" / "5_min.json").write_text(json.dumps(alone | {"comparison": None}))
    lines = gpu_summary.long_clips_tables(tmp_path)
    assert "| encoder | 10.00 |" in lines and "| end to end (median wall ms) | 32.00 |" in lines
    assert not any("extra ms" in line for line in lines)
