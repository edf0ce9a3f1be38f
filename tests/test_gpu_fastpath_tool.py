"""utils/gpu_check.sh's fastpath part on a CPU: transformers' anchors (measure.transformers_anchor.time_generate),
glm_asr_lab/gpu/fastpath.py at a tiny checkpoint's size, and the summary's tables (glm_asr_lab/gpu/summary.py) from it, from
a stored H100 report and from made-up micro-benchmarks."""

import gzip
import json
import os
import subprocess
import sys

import pytest

from glm_asr_course.model.audio import load_audio
from glm_asr_course.model.precision import PRECISIONS
from glm_asr_lab.measure.transformers_anchor import time_generate
from parity import hf_generate, hf_model, inputs_for, track_model

from glm_asr_lab.gpu import summary as gpu_summary

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100_CUTILE_RUN = os.path.join(REPO, "docs", "gpu_runs", "2026-11-23-h100-cutile-fast", "run3_detailed_bf16.json.gz")


def test_static_cache_and_compiled_decode_give_transformers_eager_ids(tiny_ckpt, clips):
    """The anchors' settings: the static cache, and torch.compile of the decode step (dynamo with the eager
    backend here: the same tracing, no code generation), decode what transformers' eager generate does."""
    _, ckpt = track_model("glm_asr_scratch", tiny_ckpt)
    inputs = inputs_for(ckpt, [load_audio(clips["short"])])
    hf = hf_model(tiny_ckpt)
    expected = hf_generate(hf, inputs, 6, 6, [])[0]
    assert len(set(expected)) > 2
    fp32 = PRECISIONS["fp32"]
    settings = ({}, {"static_cache": True}, {"static_cache": True, "compile_mode": "reduce-overhead",
                                             "compile_backend": "eager"})
    for setting in settings:
        row = time_generate(hf, inputs, 6, (), fp32, "cpu", warmup=0, runs=2, **setting)
        assert row["ids"] == expected, row["setting"]
        assert len(row["runs_ms"]) == 2 and row["mean_ms"] > 0 and row["first_call_ms"] > 0
    assert "torch.compile(mode='reduce-overhead'" in row["setting"]
    with pytest.raises(ValueError, match="static cache"):
        time_generate(hf, inputs, 6, (), fp32, "cpu", warmup=0, runs=1, compile_mode="default")


def test_fastpath_tool_and_its_table_at_tiny_size(tiny_ckpt, tmp_path):
    """The part's end-to-end and anchor steps as gpu_check.sh runs them, on the tiny checkpoint's sizes: one
    JSON line per result, a failing track reported without stopping the rest, then the summary's table."""
    out = tmp_path / "out"
    (out / "fastpath").mkdir(parents=True)
    env = dict(os.environ, GLM_ASR_CACHE_DIR=str(tmp_path / "cache"))
    common = [sys.executable, "-m", "glm_asr_lab.gpu.fastpath", "--device", "cpu", "--config",
              str(tiny_ckpt), "--tokens", "3", "--warmup", "0", "--runs", "2", "--ieee-runs", "1",
              "--jsonl", str(out / "fastpath.jsonl")]
    timings = ("glm_asr_triton_example:fast@bf16,glm_asr_cutile_example:fast@bf16,glm_asr_triton_example:fast@fp32,"
               "glm_asr_triton_example:course@fp32,glm_asr_nowhere:fast@tf32")
    run = subprocess.run(common + ["--peaks", "--timings", timings], env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 1 and "FAILED: glm_asr_nowhere:fast tf32" in run.stdout, run.stdout + run.stderr
    run = subprocess.run(common + ["--anchors", "eager,compiled", "--compile-backend", "eager"], env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [json.loads(line) for line in (out / "fastpath.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["peaks"] + ["timing"] * 5 + ["anchor"] * 2
    peaks, timings = rows[0], {(r["track"], r["precision"]): r for r in rows if r["kind"] == "timing"}
    assert set(peaks["floors"]) == {"bf16", "tf32", "fp32"} and peaks["floors"]["bf16"]["floor_ms"] > 0
    fast = timings[("glm_asr_triton_example:fast", "fp32")]
    assert len(fast["runs_ms"]) == 1 and len(fast["ids"]) == 3 and 0 < fast["floor_fraction"] < 1
    # IEEE fp32 on both Triton paths: the same kernels' arithmetic, the same ids.
    assert fast["ids"] == timings[("glm_asr_triton_example:course", "fp32")]["ids"]
    assert "error" in timings[("glm_asr_nowhere:fast", "tf32")]
    anchors = [r for r in rows if r["kind"] == "anchor"]
    assert anchors[0]["ids"] == anchors[1]["ids"] and "torch.compile" in anchors[1]["setting"]

    gpu_summary.main(str(out))
    table = (out / "summary.md").read_text()
    assert "| glm_asr_triton_example:fast | bf16 |" in table and "≤ 1.2 × floor" in table
    assert "≤ 1.10 × Triton fast (" in table and "≤ Triton course (" in table and "ids = course's" in table
    assert "Triton fast" in table.split("transformers: eager")[1] and "Failed (see log.txt): glm_asr_nowhere" in table


def test_component_rates_of_an_h100_run():
    """The components table read from benchmark_detailed.py's report of the H100 (2026-11-23, both fast paths
    in bf16): decode steps against the copy bandwidth, the encoder's GEMMs as they ran."""
    report = json.load(gzip.open(H100_CUTILE_RUN))
    peaks = gpu_summary.Peaks(**report["peaks"])
    reports = {r["label"]: r for r in [report] + report["others"]}
    triton = gpu_summary.transcription_rates(reports[gpu_summary.TRITON_FAST], peaks)
    cutile = gpu_summary.transcription_rates(reports[gpu_summary.CUTILE_FAST], peaks)
    assert triton["step_ms"] == pytest.approx(1.396, abs=1e-3) and 70 < triton["step_pct_copy"] < 72
    assert 51 < cutile["step_pct_copy"] < 53
    assert 320 < triton["gemm_in_model_tflops"] < 330 and 410 < cutile["gemm_in_model_tflops"] < 415
    assert "launches_per_token" not in triton  # counted since this part exists


def test_tables_from_stored_reports_and_micro_benchmarks(tmp_path):
    report = json.load(gzip.open(H100_CUTILE_RUN))
    detail = tmp_path / "fastpath"
    detail.mkdir()
    for label, name in ((gpu_summary.TRITON_FAST, "triton"), (gpu_summary.CUTILE_FAST, "cutile")):
        one = next(r for r in [report] + report["others"] if r["label"] == label)
        one = dict(one, peaks=report["peaks"], cuda_graph=dict(one["cuda_graph"], graph_launches=13,
                                                                kernels_outside_graphs=0))
        (detail / f"components_{name}.json").write_text(json.dumps(one))

    def case(op, flops, us):  # a micro row: torch, then the two folders' launchers
        return {"op": op, "flops": flops, "impls": [{"launcher": "linear", "us": us[0]},
                                                    {"launcher": "linear" if us[1] else None, "us": us[1]}]}

    gemms = [case(name, 1e12, (2000.0, 1800.0)) for name in gpu_summary.ENCODER_GEMMS]
    micro = {"folders": ["glm_asr_triton_example", "glm_asr_cutile_example"], "precision": "bf16",
             "peaks": report["peaks"], "sections": [{"kind": "linear", "rows": gemms},
                                                    {"kind": "attention",
                                                     "rows": [case("encoder self-attention", 1e12, (2725.0, None))]}]}
    (detail / "micro.json").write_text(json.dumps(micro))
    (tmp_path / "fastpath.jsonl").write_text(json.dumps({"kind": "timing", "track": gpu_summary.TRITON_FAST,
                                                         "precision": "bf16", "mean_ms": 20.0, "std_ms": 0.5,
                                                         "runs_ms": [20.0], "floor_ms": 15.8}) + "\n")
    lines = gpu_summary.fastpath_tables(tmp_path)
    text = "\n".join(lines)
    assert "| glm_asr_triton_example:fast | bf16 | 20.0 ± 0.5 (1) | 15.8 | 1.27× | ≤ 1.2 × floor | **no** |" in text
    gemm_row = next(line for line in lines if line.startswith("| encoder GEMMs q"))
    assert "| 500 (64 %) | 556 (71 %) | ≥ 600 TFLOP/s | **no** / **no** |" in gemm_row
    # 47 % of the peak meets the 45 %.
    attention_row = next(line for line in lines if line.startswith("| encoder flash attention, alone"))
    assert "| 367 (47 %) | - | ≥ 45 % of peak | **yes** / - |" in attention_row
    in_model = next(line for line in lines if line.startswith("| encoder flash attention in the transcription"))
    assert "| 300 (38 %) | 217 (28 %) | - |" in in_model  # the stored reports' kernel time
    assert "| 1.00; 0 | 1.00; 0 | 1; 0 | **yes** / **yes** |" in text
    assert gpu_summary.micro_rates(micro, "glm_asr_nowhere") == {}
