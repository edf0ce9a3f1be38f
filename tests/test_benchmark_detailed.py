"""benchmark_detailed.py: report structure, components adding up, FLOP/byte formulas, plots, --nsys.

One profiled CPU run of glm_asr_scratch (+ transformers as --baseline hf) on the tiny checkpoint is
shared by the structural tests; the formula tests use the real model's sizes with hand-written sums.
"""

import contextlib
import csv
import io
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

if not torch.cuda.is_available():  # before anything imports triton: its kernels run in the interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

import benchmark_detailed  # noqa: E402
from glm_asr_lab.measure import breakdown, components, micro, operators, plots, roofline, timeline, trace  # noqa: E402
from glm_asr_course.model.config import ModelConfig  # noqa: E402
from glm_asr_course.model.precision import PRECISIONS  # noqa: E402
from glm_asr_course.errors import run_cli  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TOKENS = 4

try:
    import matplotlib  # noqa: F401

    HAVE_MPL = True
except ImportError:
    HAVE_MPL = False  # pragma: no cover


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory):
    """Device peaks cached in a temporary directory, not ~/.cache."""
    old = os.environ.get("GLM_ASR_CACHE_DIR")
    os.environ["GLM_ASR_CACHE_DIR"] = str(tmp_path_factory.mktemp("peaks_cache"))
    yield
    if old is None:
        os.environ.pop("GLM_ASR_CACHE_DIR", None)
    else:
        os.environ["GLM_ASR_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def scratch_run(tiny_ckpt, tmp_path_factory, cache_env):
    out_dir = tmp_path_factory.mktemp("detailed")
    argv = ["glm_asr_scratch", "--model", str(tiny_ckpt), "--device", "cpu", "--runs", "2", "--warmup", "1",
            "--max-new-tokens", str(TOKENS), "--min-new-tokens", str(TOKENS), "--baseline", "hf",
            "--json", str(out_dir / "report.json"), "--csv", str(out_dir / "ops.csv")]
    if HAVE_MPL:
        argv += ["--plot", str(out_dir / "plots")]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = benchmark_detailed.main(argv)
    with (out_dir / "ops.csv").open() as f:
        rows = list(csv.reader(f))
    return SimpleNamespace(code=code, out=buf.getvalue(), data=json.loads((out_dir / "report.json").read_text()),
                           csv=rows, plots=out_dir / "plots")


def run_error(argv, capsys):
    with pytest.raises(SystemExit) as info:
        run_cli(benchmark_detailed.main, argv)
    out, err = capsys.readouterr()
    return info.value.code, out, err


# ---------------------------------------------------------------------------------------------
# Report structure
# ---------------------------------------------------------------------------------------------


def test_report_sections_json_and_csv(scratch_run):
    r = scratch_run
    assert r.code == 0
    for section in ["DETAILED BENCHMARK: glm_asr_scratch", "== End to end ==", "== Components", "== Per layer",
                    "== Operators", "== Operator classes", "How to read this", "CPU measurements",
                    "unexplained remainder", "COMPARISON: glm_asr_scratch:course vs transformers"]:
        assert section in r.out, section
    data = r.data
    assert set(data) >= {"folder", "model", "precision", "device", "device_name", "prompt_len", "tokens", "decode_steps",
                         "end_to_end", "components", "component_totals", "decode_step", "layers", "operators",
                         "operator_classes", "peaks", "others", "comparison"}
    assert data["folder"] == "glm_asr_scratch" and data["device"] == "cpu"
    assert data["tokens"] == TOKENS and data["decode_steps"] == TOKENS - 1
    assert set(data["end_to_end"]) >= {"median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms", "runs_ms"}
    assert len(data["end_to_end"]["runs_ms"]) == 2
    assert data["peaks"]["kind"] == "cpu" and data["peaks"]["bandwidth"] > 0
    assert set(data["peaks"]["matmul"]) == {"bfloat16", "tf32", "float32"}
    # The tiny checkpoint: 2 encoder layers, 2 decoder layers.
    assert len(data["layers"]["encoder"]) == 2 and len(data["layers"]["prefill"]) == 2
    assert len(data["layers"]["decode"]) == 2
    op_keys = {"phase", "class", "kernel", "calls", "total_ms", "pct", "mean_us", "flops", "bytes", "intensity",
               "tflops", "gbps", "pct_peak_flops", "pct_peak_bw", "pct_roof", "verdict"}
    assert data["operators"] and all(set(o) >= op_keys for o in data["operators"])
    phases = {o["phase"] for o in data["operators"]}
    assert {"encoder", "projector", "prefill", "decode"} <= phases
    classes = {(c["phase"], c["class"]) for c in data["operator_classes"]}
    assert {("encoder", "gemm"), ("encoder", "attention"), ("decode", "gemm"), ("decode", "lm_head")} <= classes
    verdicts = {o["verdict"].split(",")[0] for o in data["operators"]}
    assert verdicts <= {"memory-bound", "compute-bound", "latency-bound", "latency-bound?", "host (Python)",
                        "n/a (no FLOP model)", "-"}
    assert abs(sum(o["pct"] for o in data["operators"]) - 100) < 0.1
    # --baseline hf: transformers measured the same way, compared side by side.
    assert [o["label"] for o in data["others"]] == ["transformers"]
    assert data["comparison"]["labels"] == ["glm_asr_scratch:course", "transformers"]
    assert data["others"][0]["tokens"] == TOKENS
    assert r.csv[0] == benchmark_detailed.CSV_COLUMNS
    assert len(r.csv) - 1 == len(data["operators"]) + len(data["others"][0]["operators"])
    assert {row[0] for row in r.csv[1:]} == {"glm_asr_scratch:course", "transformers"}


def test_components_add_up_to_the_end_to_end_time(scratch_run):
    for rep in [scratch_run.data] + scratch_run.data["others"]:
        rows, t = rep["components"], rep["component_totals"]
        top = [c for c in rows if c["level"] == 0]
        assert [c["key"] for c in top] == ["encoder", "projector", "prefill", "decode", "outside"]
        assert all(c["wall_ms"] >= 0 for c in top[:4]) and top[0]["wall_ms"] > 0
        assert sum(c["wall_ms"] for c in top) == pytest.approx(t["sum_ms"])
        assert t["sum_ms"] + t["remainder_ms"] == pytest.approx(t["end_to_end_ms"])
        # The remainder is stated, and (medians over 2 runs = means) small.
        assert abs(t["remainder_ms"]) <= 0.05 * t["end_to_end_ms"], t
        # Parts add up to their component.
        for comp in ("encoder", "prefill", "decode"):
            parts = [c for c in rows if c["level"] == 1 and c["key"].startswith(comp + ".")]
            total = next(c["wall_ms"] for c in top if c["key"] == comp)
            assert sum(c["wall_ms"] for c in parts) == pytest.approx(total, rel=0.05, abs=0.05)
        # Profiled column: ranges + remainder = the profiled run's wall time.
        assert t["kernel_sum_ms"] + t["kernel_remainder_ms"] == pytest.approx(t["profiled_wall_ms"])
        assert t["kernel_sum_ms"] <= t["profiled_wall_ms"] * 1.01
        assert rep["decode_step"]["steps"] == TOKENS - 1
    assert "Without region timers" in scratch_run.out


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib not installed")
def test_plot_writes_two_pngs(scratch_run):
    for name in ("roofline.png", "components.png"):
        path = scratch_run.plots / name
        assert path.is_file(), name
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


# ---------------------------------------------------------------------------------------------
# FLOP / byte formulas at the real model's sizes, against hand-written sums
# ---------------------------------------------------------------------------------------------

REAL = dict(enc_h=1280, enc_i=5120, enc_layers=32, enc_heads=20, enc_d=64, mels=128,
            dec_h=2048, dec_i=6144, dec_layers=28, q_heads=16, kv_heads=4, dec_d=128, vocab=59264)


@pytest.fixture(scope="module")
def real_cfg():
    from glm_asr_course.model.checkpoint import default_config_dict

    cfg = ModelConfig.from_dict(default_config_dict())
    e, d = cfg.encoder, cfg.decoder
    assert (e.hidden_size, e.intermediate_size, e.num_layers, e.num_heads, e.head_dim, e.num_mel_bins) == \
        (REAL["enc_h"], REAL["enc_i"], REAL["enc_layers"], REAL["enc_heads"], REAL["enc_d"], REAL["mels"])
    assert (d.hidden_size, d.intermediate_size, d.num_layers, d.num_heads, d.num_kv_heads, d.head_dim,
            d.vocab_size) == (REAL["dec_h"], REAL["dec_i"], REAL["dec_layers"], REAL["q_heads"], REAL["kv_heads"],
                              REAL["dec_d"], REAL["vocab"])
    return cfg


def test_bar_shares_a_prompt_graph_by_kernel_time():
    """A replayed prompt graph times encoder, projector and prefill as one: the bar splits that wall
    time by kernel time (the H100 run's numbers); other reports keep their own wall times."""
    def component(key, wall, kernel):
        return {"key": key, "wall_ms": wall, "kernel_ms": kernel}

    graphed = {"cuda_graph": {"prompt_graph": True}, "components": [
        component("encoder", 0.0, 6.29), component("projector", 0.0, 0.075), component("prefill", 8.82, 1.99),
        component("decode", 16.6, 28.0), component("outside", 0.6, 0.02)]}
    values = plots.bar_values(graphed)
    assert values["encoder"] + values["projector"] + values["prefill"] == pytest.approx(8.82)
    assert values["encoder"] == pytest.approx(8.82 * 6.29 / 8.355)
    assert values["decode"] == 16.6 and values["outside"] == 0.6
    eager = {"cuda_graph": None, "components": [
        component("encoder", 29.5, 20.0), component("projector", 0.2, 0.1), component("prefill", 39.9, 30.0),
        component("decode", 458.5, 400.0), component("outside", -0.1, 0.0)]}
    assert plots.bar_values(eager) == {"encoder": 29.5, "projector": 0.2, "prefill": 39.9,
                                                     "decode": 458.5, "outside": 0.0}


def test_decode_step_weight_bytes_bf16(real_cfg):
    h, i, d = REAL["dec_h"], REAL["dec_i"], REAL["dec_d"]
    q, kv = REAL["q_heads"] * d, REAL["kv_heads"] * d
    per_layer = h * q + 2 * h * kv + q * h + 2 * h * i + i * h  # q, k, v, o, gate+up, down
    weights = REAL["dec_layers"] * per_layer + REAL["vocab"] * h  # + lm_head
    hand_bytes = 2 * weights
    assert hand_bytes == pytest.approx(2.94e9, rel=0.01)
    ops = roofline.decoder_ops(real_cfg, "decode", batch=1, tokens=1, cache_len=80, e=2)
    _, gemv_bytes = roofline.totals(ops, classes={"gemm", "lm_head"})
    assert gemv_bytes == pytest.approx(hand_bytes, rel=0.01)
    assert gemv_bytes == pytest.approx(2.94e9, rel=0.01)
    # Decode attention reads the whole K and V cache once per layer: 2 · L · Hkv · D elements.
    _, attn_bytes = roofline.totals(ops, classes={"attention"})
    assert attn_bytes == pytest.approx(REAL["dec_layers"] * 2 * (2 * 80 * kv + 2 * q), rel=1e-9)


def test_encoder_flops_one_window(real_cfg):
    t_mel, t = 3000, 1500
    h, i, heads, d = REAL["enc_h"], REAL["enc_i"], REAL["enc_heads"], REAL["enc_d"]
    gemms = 2 * t * (4 * h * h + 2 * h * i)            # q, k, v, o, fc1, fc2: 2·M·N·K each
    attn = heads * 4 * t * t * d                        # q·k and p·v: 4·T²·D per head
    convs = 2 * t_mel * h * REAL["mels"] * 3 + 2 * t * h * h * 3
    hand = REAL["enc_layers"] * (gemms + attn) + convs
    assert hand == pytest.approx(2.3e12, rel=0.02)
    ops = roofline.encoder_ops(real_cfg, windows=1, mel_frames=t_mel, e=2)
    main_flops, _ = roofline.totals(ops, classes={"gemm", "attention", "conv"})
    assert main_flops == pytest.approx(hand, rel=1e-3)  # only the bias adds differ
    total, _ = roofline.totals(ops)
    assert total == pytest.approx(2.3e12, rel=0.02)


def test_prefill_projector_gemm_and_attention_formulas(real_cfg):
    p = 60
    ops = roofline.decoder_ops(real_cfg, "prefill", batch=1, tokens=p, cache_len=p, e=2)
    attn_flops, _ = roofline.totals(ops, classes={"attention"})
    pairs = p * (p + 1) // 2  # causal
    assert attn_flops == pytest.approx(REAL["dec_layers"] * 4 * REAL["dec_d"] * REAL["q_heads"] * pairs)
    proj = roofline.projector_ops(real_cfg, windows=1, mel_frames=3000, e=2)
    proj_flops, _ = roofline.totals(proj, classes={"gemm"})
    rows = 1500 // 4
    assert proj_flops == pytest.approx(2 * rows * 5120 * 4096 + 2 * rows * 4096 * 2048, rel=1e-3)
    # One GEMM with its bias, one non-causal attention, by hand.
    qkv = roofline.gemm("encoder", "qkv", 1500, 3840, 1280, 2, bias=True)
    assert qkv.flops == 2 * 1500 * 3840 * 1280 + 1500 * 3840
    assert qkv.bytes == 2 * (1500 * 1280 + 3840 * 1280 + 1500 * 3840 + 3840)
    attn = roofline.attention("encoder", "a", batch=1, q_heads=20, kv_heads=20, tq=1500, tk=1500, head_dim=64, e=4,
                              causal=False)
    assert attn.flops == 4 * 64 * 20 * 1500 * 1500 and attn.bytes == 4 * 64 * (2 * 20 * 1500 + 2 * 20 * 1500)
    # A whole transcription = encoder + projector + prefill + every step (cache grows by one each).
    whole = roofline.transcription_ops(real_cfg, windows=1, mel_frames=3000, prompt_len=p, decode_steps=3,
                                       dtype="bfloat16")
    steps = sum(roofline.totals(roofline.decoder_ops(real_cfg, "decode", batch=1, tokens=1, cache_len=p + s, e=2))[1]
                for s in (1, 2, 3))
    assert roofline.totals(whole, phase="decode")[1] == pytest.approx(steps)


def test_verdicts_from_intensity_and_achieved_fraction():
    peaks = roofline.Peaks("test GPU", "cuda", 3e12, {"bfloat16": 700e12, "tf32": 350e12, "float32": 50e12},
                           "now", "test")
    assert peaks.ridge("bfloat16") == pytest.approx(700e12 / 3e12)
    # Decode GEMV: 2.9 GB in 1.2 ms is 2.4 TB/s, AI ≈ 1: memory-bound near the roof.
    v = roofline.assess(2.9e9, 2.9e9, 1.2e-3, 196, peaks, "bfloat16")
    assert v["verdict"] == "memory-bound" and 70 < v["pct_roof"] < 90
    assert v["gbps"] == pytest.approx(2.9e9 / 1.2e-3 / 1e9) and v["intensity"] == 1
    # Encoder GEMMs: 1.9 TFLOP at AI ≈ 550 in 4 ms: compute-bound.
    v = roofline.assess(1.9e12, 3.47e9, 4e-3, 128, peaks, "bfloat16")
    assert v["verdict"] == "compute-bound" and v["pct_peak_flops"] > 50
    assert v["tflops"] == pytest.approx(1.9e12 / 4e-3 / 1e12)
    # A 3 µs norm reaching 1% of the bandwidth: latency-bound.
    v = roofline.assess(1e5, 1e5, 3e-6, 1, peaks, "bfloat16")
    assert v["verdict"] == "latency-bound"
    # Long but slow: the roof side with a low-utilisation mark.
    assert roofline.assess(1e9, 1e9, 1.0, 1, peaks, "bfloat16")["verdict"] == "memory-bound, low"
    assert roofline.floor_seconds(2.9e9, 2.9e9, peaks, "bfloat16") == pytest.approx(2.9e9 / 3e12)


def test_transcription_floor_adds_the_phases(real_cfg):
    """The test clip's transcription (59-token prompt, 13 tokens) at the H100's measured peaks: the
    compute-bound encoder's floor plus the memory-bound prefill's and steps' (docs/performance.md: 15.7 ms
    in bf16, 31.0 ms in tf32), more than the whole work's FLOPs or bytes alone would give."""
    h100 = roofline.Peaks("NVIDIA H100 80GB HBM3", "cuda", 3001e9,
                          {"bfloat16": 793e12, "tf32": 413e12, "float32": 52e12}, "now", "test")
    inputs = SimpleNamespace(input_features=torch.zeros(1, 128, 3000), input_ids=torch.zeros(1, 59), batch_size=1)
    bf16 = roofline.transcription_floor(real_cfg, inputs, 13, "bf16", h100)
    assert bf16["floor_ms"] == pytest.approx(15.8, abs=0.1)
    assert roofline.transcription_floor(real_cfg, inputs, 13, "tf32", h100)["floor_ms"] == pytest.approx(31.3, abs=0.1)
    whole = max(bf16["flops"] / 793e12, bf16["bytes"] / 3001e9) * 1000
    assert whole < bf16["floor_ms"] - 0.5  # the encoder's compute no longer hidden under the bytes


def test_peaks_are_cached_per_device(tmp_path, monkeypatch):
    monkeypatch.setenv("GLM_ASR_CACHE_DIR", str(tmp_path))
    calls = []
    fake = roofline.Peaks(roofline.device_name("cpu"), "cpu", 1e10, {"bfloat16": 1e9, "tf32": 2e9, "float32": 2e9},
                          "now", "fake")
    monkeypatch.setattr(roofline, "measure_peaks", lambda device: calls.append(device) or fake)
    first = roofline.device_peaks("cpu", log=lambda *a: None)
    second = roofline.device_peaks("cpu", log=lambda *a: None)
    assert calls == ["cpu"] and second.bandwidth == first.bandwidth == 1e10
    assert "cached" in second.source
    cache = json.loads((tmp_path / "device_peaks.json").read_text())
    assert roofline.device_name("cpu") in cache
    roofline.device_peaks("cpu", refresh=True, log=lambda *a: None)
    assert calls == ["cpu", "cpu"]


# ---------------------------------------------------------------------------------------------
# Region attribution (the GPU path) on Chrome traces: synthetic, and a real one from an H200
# ---------------------------------------------------------------------------------------------


def X(cat, name, ts, dur, *, pid=1, tid=1, **args):
    """One complete ("X") Chrome-trace event as torch.profiler writes it (ts, dur in µs)."""
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid,
            "args": {k.replace("_", " "): v for k, v in args.items()}}


def gpu(cat, name, ts, dur, **args):
    return X(cat, name, ts, dur, pid=0, tid=7, **args)


def test_kernels_go_to_their_innermost_region():
    ext = lambda n: {"External_id": n}
    host = [
        X("user_annotation", "encoder", 0, 100, **ext(1)),
        X("user_annotation", "encoder.layer", 10, 80, **ext(2)),
        X("cpu_op", "aten::linear", 20, 20, **ext(3)),
        X("cpu_op", "aten::addmm", 21, 18, **ext(4)),
        X("user_annotation", "decoder.prefill", 100, 100, **ext(5)),
        X("user_annotation", "decoder.layer", 110, 80, **ext(6)),
        X("user_annotation", "decoder.step", 200, 100, **ext(7)),
        X("cpu_op", "aten::copy_", 310, 10, **ext(8)),
    ]
    # Launch calls carry CUPTI's correlation ids; "External id" only when a torch op is around them.
    # The Triton launch's correlation id equals a host range's External id on purpose: two id spaces.
    launches = [
        X("cuda_runtime", "cudaLaunchKernel", 25, 1, correlation=9001, **ext(4)),
        X("cuda_runtime", "cudaLaunchKernel", 27, 1, correlation=9002, **ext(4)),
        X("cuda_driver", "cuLaunchKernelEx", 120, 1, correlation=1),
        X("cuda_runtime", "cudaStreamIsCapturing", 209, 0.5, correlation=9003),
        X("cuda_runtime", "cudaGraphLaunch", 210, 2, correlation=9004),
        X("cuda_runtime", "cudaMemcpyAsync", 312, 2, correlation=9005, **ext(8)),
    ]
    device = [
        gpu("kernel", "ampere_sgemm_128x64_tn", 50, 20, correlation=9001, **ext(4)),  # cuBLAS under torch linear
        gpu("kernel", "splitKreduce_kernel", 70, 2, correlation=9002, **ext(4)),      # its helper launch
        gpu("kernel", "flash_attention_kernel", 122, 28, correlation=1),              # Triton: no External id
        gpu("kernel", "fused_linear_kernel", 214, 16, correlation=9004),              # two kernels replayed
        gpu("kernel", "rmsnorm_kernel", 230, 2, correlation=9004),                    # by one CUDA graph
        gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 330, 1, correlation=9005, **ext(8)),
        gpu("gpu_user_annotation", "decoder.step", 205, 85, **ext(7)),                # not device work
        {"ph": "f", "id": 9004, "pid": 0, "tid": 7, "ts": 214, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "python3"}},
    ]
    res = trace.parse_trace({"traceEvents": device + host[::-1] + launches}, "cuda", wall_ms=0.4)
    by_name = {k.name: k for k in res.kernels}
    assert len(res.kernels) == 6
    assert res.regions.names == ["encoder", "encoder.layer", "decoder.prefill", "decoder.layer", "decoder.step"]
    chain = lambda k: res.regions.chain(k.region) if k.region >= 0 else []
    assert chain(by_name["ampere_sgemm_128x64_tn"]) == ["encoder.layer", "encoder"]
    assert by_name["ampere_sgemm_128x64_tn"].torch_op == "aten::linear"
    assert chain(by_name["flash_attention_kernel"]) == ["decoder.layer", "decoder.prefill"]
    assert by_name["flash_attention_kernel"].torch_op is None and by_name["flash_attention_kernel"].replay is None
    assert chain(by_name["fused_linear_kernel"]) == chain(by_name["rmsnorm_kernel"]) == ["decoder.step"]
    assert by_name["fused_linear_kernel"].replay == by_name["rmsnorm_kernel"].replay == 9004
    assert by_name["Memcpy HtoD (Pageable -> Device)"].region == -1
    # The class's logical work goes to its kernel; the split-K helper does part of that kernel's work.
    linear = roofline.gemm("encoder", "enc.q", 1500, 192, 64, 4, bias=True)
    rows = {o["kernel"]: o for o in operators.operator_tables(res, [linear], FAKE_H200, "fp32")[0]}
    assert rows["ampere_sgemm_128x64_tn"]["flops"] == linear.flops == 2 * 1500 * 192 * 64 + 1500 * 192
    assert rows["ampere_sgemm_128x64_tn"]["source"] == "model" and rows["ampere_sgemm_128x64_tn"]["calls"] == 1
    assert rows["splitKreduce_kernel"]["flops"] is None and rows["splitKreduce_kernel"]["source"] == "-"
    summary = components.summarize(res.regions, res.wall_ms)
    assert summary["encoder.layers"] == pytest.approx(0.022)
    assert summary["prefill.layers"] == pytest.approx(0.028)
    assert summary["decode.other"] == pytest.approx(0.018) and summary["decode.steps"] == 1
    # Classes: torch op ancestry first, then the kernel name, then the region (lm_head in a head region).
    classes = {k.name: operators.classify(k, chain(k))[2] for k in res.kernels}
    assert classes["ampere_sgemm_128x64_tn"] == "gemm" and classes["flash_attention_kernel"] == "attention"
    assert classes["fused_linear_kernel"] == "gemm" and classes["Memcpy HtoD (Pageable -> Device)"] == "copy"
    assert classes["rmsnorm_kernel"] == "norm"
    assert operators.is_aux_kernel("splitKreduce_kernel") and operators.is_aux_kernel("decode_attention_combine_kernel")
    head = trace.KernelRecord("lm_head_argmax_kernel", 1.0, 0)
    assert operators.classify(head, ["decoder.head", "decoder.step"])[2] == "lm_head"
    gemv = trace.KernelRecord("gemv2T_kernel", 1.0, 0, "aten::linear")
    assert operators.classify(gemv, ["decoder.head", "decoder.step"])[2] == "lm_head"


def test_cpu_trace_self_times_grouped_by_the_op_called():
    """On a CPU a "kernel" is a torch op's self time, grouped under the op the model called."""
    events = [
        X("user_annotation", "encoder.layer", 0, 100, External_id=1),
        X("cpu_op", "aten::scaled_dot_product_attention", 10, 50, External_id=2),
        X("cpu_op", "aten::_scaled_dot_product_flash_attention_for_cpu", 15, 40, External_id=3),
        X("cpu_op", "aten::add", 70, 10, External_id=4),
    ]
    res = trace.parse_trace(events, "cpu", wall_ms=0.1)
    host = [k for k in res.kernels if k.call[0] == "region"]
    sdpa = [k for k in res.kernels if k.name == "aten::scaled_dot_product_attention"]
    assert len(host) == 1 and host[0].ms == pytest.approx(0.04)
    # Its own self time and its inner op's: one call of one operator, doing the class's logical work.
    assert len(sdpa) == 2 and len({k.call for k in sdpa}) == 1 and sum(k.ms for k in sdpa) == pytest.approx(0.05)
    attention = roofline.attention("encoder", "enc.attention", batch=1, q_heads=2, kv_heads=2, tq=8, tk=8, head_dim=4,
                                   e=4, causal=False)
    rows = {o["kernel"]: o for o in operators.operator_tables(res, [attention], FAKE_H200, "fp32")[0]}
    row = rows["aten::scaled_dot_product_attention"]
    assert (row["class"], row["calls"], row["flops"]) == ("attention", 1, 4 * 4 * 2 * 8 * 8)
    assert row["total_ms"] == pytest.approx(0.05)
    assert res.regions.exclusive == [pytest.approx(0.1)]


TRACE = REPO / "tests" / "data" / "trace_h200_triton_graphs.json.gz"
# Real: glm_asr_triton_example (bf16, random weights, 4 tokens) on an H200, torch 2.11 + CUDA 13:
# one prompt graph replay (encoder → first token, 551 kernels) inside decoder.prefill, then three
# decode-step graph replays (256 kernels each) inside decoder.step; profiler started after capture.
TRITON_KERNELS = {  # name: (calls, components, class)
    "conv1d_gelu_kernel": (2, {"prefill"}, "conv"), "layernorm_kernel": (65, {"prefill"}, "norm"),
    "rope_kernel": (32, {"prefill"}, "rope"), "flash_attention_kernel": (60, {"prefill"}, "attention"),
    "splitk_epilogue_kernel": (62, {"prefill"}, "gemm"), "fused_linear_kernel": (326, {"prefill", "decode"}, "gemm"),
    "gemv_kernel": (252, {"decode"}, "gemm"), "rmsnorm_kernel": (228, {"prefill", "decode"}, "norm"),
    "rope_qkv_to_cache_kernel": (112, {"prefill", "decode"}, "rope"),
    "decode_attention_split_kernel": (84, {"decode"}, "attention"),
    "decode_attention_combine_kernel": (84, {"decode"}, "attention"),
    "embed_tokens_kernel": (4, {"prefill", "decode"}, "embedding"),
    "lm_head_argmax_kernel": (4, {"prefill", "decode"}, "lm_head"),
    "argmax_reduce_kernel": (4, {"prefill", "decode"}, "argmax"),
}


def _by_name(res):
    out = {}
    for k in res.kernels:
        chain = res.regions.chain(k.region) if k.region >= 0 else []
        calls, ms, comps, parts = out.get(k.name, (0, 0.0, set(), set()))
        comp, part = components.component_of(chain) if chain else ("outside", "")
        out[k.name] = (calls + 1, ms + k.ms, comps | {comp}, parts | {part})
    return out


@pytest.fixture(scope="module")
def h200_trace():
    return trace.load_trace(TRACE)


def test_real_h200_trace_triton_kernels_from_graph_replays(h200_trace, real_cfg):
    assert TRACE.stat().st_size < 200_000
    res = trace.parse_trace(h200_trace, "cuda", wall_ms=18.4)
    assert res.regions.names == ["decoder.prefill"] + ["decoder.step"] * 3
    got = _by_name(res)
    for name, (calls, comps, cls) in TRITON_KERNELS.items():
        n, ms, seen, _ = got[name]
        assert (n, seen) == (calls, comps), name
        assert ms > 0, name
        assert operators.kernel_class(name) == cls, name
    # The profiler's own key_averages table of the same run (docs/gpu_runs/2026-11-21-h200-graphs).
    assert got["fused_linear_kernel"][1] == pytest.approx(8.290, abs=1e-3)
    assert got["gemv_kernel"][1] == pytest.approx(1.587, abs=1e-3)
    assert got["flash_attention_kernel"][1] == pytest.approx(1.250, abs=1e-3)
    # Every Triton kernel came from a graph replay; the result copies are outside every region.
    replays = {}
    for k in res.kernels:
        if k.name in TRITON_KERNELS:
            assert k.replay is not None
            replays.setdefault(k.replay, []).append(k)
    assert sorted(len(v) for v in replays.values()) == [256, 256, 256, 551]
    assert got["Memcpy DtoH (Device -> Pageable)"][2] == {"outside"}
    summary = components.summarize(res.regions, res.wall_ms)
    assert summary["decode.steps"] == 3 and summary["encoder"] == 0
    uploads = sum(k.ms for k in res.kernels if k.region == 0 and k.replay is None)  # the prompt's input copies
    assert 0 < uploads < 0.05
    assert summary["prefill"] == pytest.approx(sum(k.ms for k in max(replays.values(), key=len)) + uploads)
    assert 1.0 < summary["decode.step_median"] < 1.6
    # Without the launch calls (not recorded), the regions' spans on the stream still place them.
    bare = [e for e in h200_trace["traceEvents"] if e.get("cat") != "cuda_runtime"]
    assert {n: v[2] for n, v in _by_name(trace.parse_trace(bare, "cuda", wall_ms=18.4)).items()} == \
        {n: v[2] for n, v in got.items()}
    # The per-operator table groups them by name with calls, time and a FLOP/byte share.
    ops = roofline.transcription_ops(real_cfg, windows=1, mel_frames=3000, prompt_len=59, decode_steps=3,
                                     dtype="bfloat16")
    operator_rows, classes = operators.operator_tables(res, ops, FAKE_H200, "bfloat16")
    rows = {(o["phase"], o["kernel"]): o for o in operator_rows}
    assert rows[("decode", "gemv_kernel")]["calls"] == 252 and rows[("decode", "gemv_kernel")]["class"] == "gemm"
    assert rows[("decode", "gemv_kernel")]["flops"] > 0 and rows[("decode", "gemv_kernel")]["bytes"] > 0
    assert rows[("decode", "lm_head_argmax_kernel")]["class"] == "lm_head"
    assert rows[("prefill", "flash_attention_kernel")]["calls"] == 60
    verdicts = {(c["phase"], c["class"]): c["verdict"] for c in classes}
    assert not verdicts[("decode", "gemm")].startswith("no kernel")
    assert not verdicts[("decode", "attention")].startswith("no kernel")


FAKE_H200 = roofline.Peaks("NVIDIA H200", "cuda", 4.2e12, {"bfloat16": 816e12, "tf32": 424e12, "float32": 51e12},
                           "now", "test")


def eager_trace_like(graphed) -> list:
    """A use_cuda_graph=False trace of the same work: every kernel of the real prompt replay and of one
    step replay, launched by cuLaunchKernelEx from inside its region (the example's region layout),
    plus the eager-only input upload (a torch copy) at the start of each phase."""
    replays = {}
    for k in graphed.kernels:
        if k.replay is not None:
            replays.setdefault(k.replay, []).append(k)
    prompt, step = list(replays.values())[:2]
    assert (len(prompt), len(step)) == (551, 256)

    def decoder():  # embed, 28 layers of 9 kernels, head
        return ([(("decoder.embed", 0),)] + [(("decoder.layer", i),) for i in range(28) for _ in range(9)]
                + [(("decoder.head", 0),)] * 3)

    enc = ([(("encoder", 0), ("encoder.conv", 0))] * 2 + [(("encoder", 0), ("encoder.layer", i))
                                                            for i in range(32) for _ in range(9)]
           + [(("encoder", 0), ("encoder.norm", 0))] + [(("projector", 0),)] * 4)
    layout = [((("decoder.prefill", 0),) + p, k) for p, k in zip(enc + decoder(), prompt)]
    layout += [((("decoder.step", 0),) + p, k) for p, k in zip(decoder(), step)]
    events, spans, t, corr = [], {}, 0.0, 1
    for phase in ("decoder.prefill", "decoder.step"):
        first = next(i for i, (path, _) in enumerate(layout) if path[0][0] == phase)
        layout.insert(first, (((phase, 0),), "upload"))
    for path, k in layout:
        t += 2.0
        for depth in range(1, len(path) + 1):
            span = spans.setdefault(path[:depth], [t - 0.5 / depth, 0.0])
            span[1] = t + 1.5 + 0.5 / depth
        if k == "upload":
            events.append(X("cpu_op", "aten::copy_", t, 1.2, External_id=100000 + corr))
            events.append(X("cuda_runtime", "cudaMemcpyAsync", t + 0.1, 1, correlation=corr,
                            External_id=100000 + corr))
            events.append(gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", t + 1, 0.8, correlation=corr,
                              External_id=100000 + corr))
        else:
            events.append(X("cuda_driver", "cuLaunchKernelEx", t, 1, correlation=corr))
            events.append(gpu("kernel", k.name, t + 1, k.ms * 1000, correlation=corr))
        corr += 1
    for path, (start, end) in spans.items():
        events.append(X("user_annotation", path[-1][0], start, end - start))
    return events


def test_eager_launches_go_to_their_regions(h200_trace, real_cfg):
    """With use_cuda_graph=False the replays' kernels are launched one by one (cuLaunchKernelEx, no torch op
    around them), each inside its own region: the per-part and per-layer split the report takes from it."""
    graphed = trace.parse_trace(h200_trace, "cuda", wall_ms=18.4)
    eager = trace.parse_trace(eager_trace_like(graphed), "cuda", wall_ms=20.0)
    got = _by_name(eager)
    assert got["conv1d_gelu_kernel"][2:] == ({"encoder"}, {"conv"})
    assert got["rope_kernel"][2:] == ({"encoder"}, {"layers"})
    assert got["flash_attention_kernel"][2] == {"encoder", "prefill"}
    assert got["splitk_epilogue_kernel"][2] == {"encoder", "projector", "prefill"}
    assert got["gemv_kernel"][2:] == ({"decode"}, {"layers"})
    assert got["lm_head_argmax_kernel"][3] == {"head"}
    assert got["Memcpy HtoD (Pageable -> Device)"][2] == {"prefill", "decode"}
    s = components.summarize(eager.regions, eager.wall_ms)
    assert len(s["layers.encoder"]) == 32 and len(s["layers.prefill"]) == 28 and len(s["layers.decode"]) == 28
    assert s["encoder"] > 5 * s["projector"] > 0 and s["decode.steps"] == 1
    prompt = next(k.replay for k in graphed.kernels if k.replay)
    prompt_ms = sum(k.ms for k in graphed.kernels if k.replay == prompt)
    uploads = sum(k.ms for k in eager.kernels if k.name.startswith("Memcpy")
                  and components.component_of(eager.regions.chain(k.region))[0] == "prefill")
    assert s["encoder"] + s["projector"] + s["prefill"] == pytest.approx(prompt_ms + uploads)
    # The graphed run: one replay a token (the prompt phase's, then one a step), no kernel launched outside them.
    assert trace.graph_launches(graphed) == {"graph_launches": 4, "kernels_outside_graphs": 0}
    assert trace.graph_launches(eager) == {"graph_launches": 0, "kernels_outside_graphs": 551 + 256}


def test_report_of_a_graphed_run_on_the_real_trace(h200_trace, real_cfg, capsys):
    """build_report / print_report with timer runs in which no region but decoder.prefill / decoder.step ran
    (the prompt phase is one graph) and the eager counterpart of the real graphed profile."""
    graphed = trace.parse_trace(h200_trace, "cuda", wall_ms=18.4)
    eager = trace.parse_trace(eager_trace_like(graphed), "cuda", wall_ms=30.0)
    eager.tokens = [1, 2, 3, 4]
    timed = [components.summarize(components.Regions(["decoder.prefill"] + ["decoder.step"] * 3, [-1] * 4,
                                                   [10.8, 1.6, 1.6, 1.6]), 16.0)] * 2
    measured = {"e2e": [15.9, 16.1], "tokens": eager.tokens, "components": components.aggregate(timed),
                "profile": eager,
                "graph": {"components": components.aggregate([components.summarize(eager.regions, 30.0)] * 2)}
                | trace.graph_launches(graphed) | {"decode_launches": timeline.decode_step_launches(graphed)}}
    inputs = SimpleNamespace(input_features=torch.zeros(1, 128, 3000), input_ids=torch.zeros(1, 59), batch_size=1)
    session = SimpleNamespace(device="cuda", inputs=inputs, audio_seconds=3.5, precision=PRECISIONS["bf16"],
                              options=SimpleNamespace(runs=2, warmup=1),
                              checkpoint=SimpleNamespace(config=real_cfg, processor=None, description="random"))
    rep = breakdown.build_report(session, measured, FAKE_H200, "glm_asr_triton_example")
    rows = {r["key"]: r for r in rep["components"]}
    assert rows["encoder"]["in_graph"] and rows["encoder"]["wall_ms"] == 0 and rows["encoder"]["kernel_ms"] > 3
    assert rows["encoder.layers"]["graph_off"] and rows["encoder.layers"]["wall_ms"] > 0
    assert rows["prefill"]["wall_ms"] == pytest.approx(10.8) and rows["decode"]["wall_ms"] == pytest.approx(4.8)
    # A part timed without graphs is a share of those runs' end to end (30 ms), a top-level row of the graphed (16 ms).
    assert rows["encoder.layers"]["pct"] == pytest.approx(100 * rows["encoder.layers"]["wall_ms"] / 30.0)
    assert rows["prefill"]["pct"] == pytest.approx(100 * 10.8 / 16.0)
    assert rep["cuda_graph"]["prompt_graph"] and rep["profiled_run"] == "use_cuda_graph=False"
    assert rep["cuda_graph"]["graph_launches"] == 4 and rep["cuda_graph"]["kernels_outside_graphs"] == 0
    assert len(rep["layers"]["encoder"]) == 32 and rep["layers"]["prompt_source"] == "use_cuda_graph=False runs"
    assert len(rep["layers"]["encoder_kernel_ms"]) == 32 and len(rep["layers"]["decode_kernel_ms"]) == 28
    assert rep["kernel_time_ms"] == pytest.approx(sum(k.ms for k in eager.kernels))
    kernels = {o["kernel"] for o in rep["operators"]}
    assert set(TRITON_KERNELS) <= kernels
    benchmark_detailed.print_report(rep, FAKE_H200)
    out = capsys.readouterr().out
    assert "encoder ‡" in out and "flash_attention_kernel" in out and "4 graph launches" in out
    # The decode steps launch by launch: 256 kernels a replay, the idle gaps of a run without PDL.
    steps = rep["cuda_graph"]["decode_launches"]
    assert steps["replays"] == 3 and sum(r["per_step"] for r in steps["launches"]) == 256
    assert steps["span_us"] == pytest.approx(1418.5, abs=0.1) and steps["idle_us"] == pytest.approx(105.6, abs=0.1)
    assert sum(r["added_us"] for r in steps["launches"]) == pytest.approx(steps["span_us"], rel=0.01)
    top = steps["launches"][0]
    assert (top["kernel"], top["grid"], top["per_step"]) == ("fused_linear_kernel", [192, 1, 1], 28)
    assert "== Decode step, launch by launch" in out and "idle 105.6 us" in out
    for c in rep["operator_classes"]:  # only fused classes (pointwise, rope of the encoder...) lack kernels
        assert c["kernels"] or c["class"] not in ("gemm", "attention", "norm", "conv", "lm_head"), c


def test_replay_breakdown_charges_overlap_once():
    """Kernel B starts inside A (programmatic dependent launch) and ends 4 µs after it; C starts after a 6 µs
    drain. Added times: A its 10 µs, B 4, C 11 (its 5 and the drain before it); they sum to the span."""
    kernels = [trace.KernelRecord(name, dur / 1000, 0, start_us=start)
               for name, start, dur in (("C", 120.0, 5.0), ("A", 100.0, 10.0), ("B", 105.0, 9.0))]
    step = timeline.replay_breakdown(kernels)
    assert [k.name for k in step["kernels"]] == ["A", "B", "C"]
    assert step["added_us"] == pytest.approx([10.0, 4.0, 11.0])
    assert (step["span_us"], step["busy_us"], step["idle_us"], step["kernel_sum_us"]) == pytest.approx((25, 19, 6, 24))


@pytest.mark.parametrize("name, cls, aux", [
    # The Triton example's kernels.
    ("conv1d_gelu_kernel", "conv", False), ("layernorm_kernel", "norm", False), ("rmsnorm_kernel", "norm", False),
    ("fused_linear_kernel", "gemm", False), ("tma_linear_kernel", "gemm", False), ("splitk_epilogue_kernel", "gemm", True),
    ("rope_kernel", "rope", False),
    ("rope_qkv_to_cache_kernel", "rope", False), ("flash_attention_kernel", "attention", False),
    ("decode_attention_split_kernel", "attention", False), ("decode_attention_combine_kernel", "attention", True),
    ("embed_tokens_kernel", "embedding", False), ("lm_head_argmax_kernel", "lm_head", False),
    ("argmax_reduce_kernel", "argmax", True),
    # cuBLAS / cuDNN / flash / PyTorch kernels.
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_cublas", "gemm", False),
    ("gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>", "gemm", False),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float>", "gemm", True),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc", "conv", False),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>", "attention", False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", "pointwise", False),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>>>", "argmax",
     False),
    ("Memcpy HtoD (Pageable -> Device)", "copy", False),
])
def test_kernel_name_classes(name, cls, aux):
    assert operators.kernel_class(name) == cls and operators.is_aux_kernel(name) == aux


def test_component_mapping_of_nested_regions():
    c = components.component_of
    assert c(["encoder.layer", "encoder", "decoder.prefill"]) == ("encoder", "layers")  # Triton: encoder in prefill
    assert c(["projector", "decoder.prefill"]) == ("projector", "")
    assert c(["decoder.embed"]) == ("prefill", "embed")                                  # scratch: prompt embedding
    assert c(["decoder.layer", "decoder.step"]) == ("decode", "layers")
    assert c(["decoder.head", "decoder.prefill"]) == ("prefill", "head")
    assert c(["decoder.step"]) == ("decode", "other")
    assert c(["encoder"]) == ("encoder", "other")


def test_timer_warms_up_repeats_and_returns_the_result():
    from glm_asr_course import timer

    calls = []
    times = timer.time_repeats(lambda: calls.append(1), "cpu", warmup=2, repeats=3, flush=True, graph=True)
    assert len(calls) == 5 and len(times) == 3 and all(t >= 0 for t in times)  # flush, graph: GPU only
    ms, result = timer.time_call(lambda: 42, "cpu")
    assert result == 42 and ms >= 0
    assert timer.quartiles([3.0]) == (3.0, 3.0, 3.0) and timer.quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)


def test_region_timer_splits_a_run():
    from glm_asr_lab.measure.components import RegionTimer, summarize
    from glm_asr_course.model import regions
    from glm_asr_course.model.regions import region

    with RegionTimer("cpu") as timer:
        with region("encoder"):
            for _ in range(2):
                with region("encoder.layer"):
                    torch.ones(10).sum()
        for _ in range(3):
            with region("decoder.step"):
                with region("decoder.layer"):
                    pass
    s = summarize(timer.regions, timer.total_ms)
    assert len(s["layers.encoder"]) == 2 and len(s["steps"]) == 3 and s["decode.steps"] == 3
    assert sum(s[k] for k in ("encoder", "projector", "prefill", "decode", "outside")) == pytest.approx(s["total"])
    assert regions._TIMER.get() is None


# ---------------------------------------------------------------------------------------------
# Micro-benchmarks, --nsys, the shell wrapper, benchmark_student --profile
# ---------------------------------------------------------------------------------------------


def test_micro_benchmarks_scale_with_the_config(tiny_ckpt, tmp_path, cache_env):
    out = tmp_path / "micro.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = benchmark_detailed.main(["glm_asr_scratch", "--model", str(tiny_ckpt), "--device", "cpu",
                                        "--attention-only", "--linear-only", "--seq-len", "8", "--runs", "1",
                                        "--json", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    kinds = {s["kind"]: s["rows"] for s in data["sections"]}
    assert set(kinds) == {"attention", "linear"} and data["seq_len"] == 8
    attn = {r["op"]: r for r in kinds["attention"]}
    assert "T=1500 H=4 D=16" in attn["encoder self-attention"]["shape"]  # tiny config: 4 heads of 16
    assert "T=8 Hq=4 Hkv=2 D=16" in attn["decoder prefill attention"]["shape"]
    lin = {r["op"]: r for r in kinds["linear"]}
    assert lin["lm_head (decode)"]["shape"].startswith("M=1 N=")
    for row in kinds["attention"] + kinds["linear"]:
        assert row["torch_us"] > 0 and row["floor_us"] > 0
        assert row["impls"][0]["note"] == "torch"  # glm_asr_scratch: the kernel is torch itself
        assert row["impls"][0]["max_rel_error"] == 0.0
    assert "MICRO-BENCHMARKS" in buf.getvalue() and "floor us" in buf.getvalue()


@pytest.mark.parametrize("folder, launcher_names", [
    ("glm_asr_triton_example", {"flash_attention", "decode_attention", "linear", "swiglu_linear"}),  # fast path
    ("glm_asr_triton_example", {"encoder_attention", "decoder_attention", "linear_tf32"}),  # course path
    ("glm_asr_cutile_example", {"flash_attention", "decode_attention", "linear"}),  # fast path, its own conventions
])
def test_micro_benchmark_calls_the_fast_and_course_launchers(folder, launcher_names):
    """A track's launchers of one path at reduced shapes (the interpreter and the emulator are slow): the
    same results as torch."""
    launchers = {name: f for name, f in micro.folder_launchers(folder).items() if name in launcher_names}
    assert set(launchers) == launcher_names
    tiny = {"audio_config": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                                 max_position_embeddings=32),
            "text_config": dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                                eos_token_id=[0]),
            "audio_token_id": 5}
    cfg = ModelConfig.from_dict(tiny)
    timed = 0
    for make in micro.MICRO_CASES.values():
        for name, shape, op, torch_fn, builders, to_torch in make(cfg, 8, 4, "fp32", "cpu", torch.float32):
            for launcher in (n for n in builders if n in launchers):
                out = to_torch(builders[launcher](launchers[launcher])())
                assert micro.max_rel_error(out, torch_fn()) < 1e-4, (name, launcher)
                timed += 1
    assert timed >= 3


def test_nsys_missing_is_one_line_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(benchmark_detailed.shutil, "which", lambda name: None)
    code, out, err = run_error(["glm_asr_scratch", "--nsys"], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "nsys" in lines[0]
    assert "Traceback" not in out + err


def test_usage_errors(capsys):
    with pytest.raises(SystemExit) as info:
        run_cli(benchmark_detailed.main, [])
    assert info.value.code == 2 and "glm_asr_scratch" in capsys.readouterr().out
    code, _, err = run_error(["no_such_folder"], capsys)
    assert code == 2 and "unknown folder" in err and len(err.strip().splitlines()) == 1


def test_shell_wrapper_lists_and_rejects_folders():
    res = subprocess.run(["bash", str(REPO / "benchmark_detailed.sh")], capture_output=True, text=True)
    assert res.returncode == 2 and "glm_asr_scratch" in res.stdout
    res = subprocess.run(["bash", str(REPO / "benchmark_detailed.sh"), "no_such_folder"], capture_output=True, text=True)
    assert res.returncode == 2 and "unknown folder" in res.stderr and "glm_asr_scratch" in res.stderr


def test_benchmark_student_profile_prints_components(tiny_ckpt, capsys):
    import benchmark_student

    with pytest.raises(SystemExit):
        run_cli(benchmark_student.main, ["glm_asr_scratch", "--model", str(tiny_ckpt), "--device", "cpu",
                                         "--max-new-tokens", "3", "--runs", "1", "--profile"])
    out = capsys.readouterr().out
    assert "PROFILE" in out
    for line in ("Encoder:", "Projector:", "Prefill:", "Decode:", "Outside regions:", "Total:"):
        assert line in out, line
