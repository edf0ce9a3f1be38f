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
from glm_asr_common import profiling, roofline  # noqa: E402
from glm_asr_common.config import ModelConfig  # noqa: E402
from glm_asr_common.errors import run_cli  # noqa: E402

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
                    "unexplained remainder", "COMPARISON: glm_asr_scratch vs transformers"]:
        assert section in r.out, section
    data = r.data
    assert set(data) >= {"folder", "model", "dtype", "device", "device_name", "prompt_len", "tokens", "decode_steps",
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
    assert data["comparison"]["labels"] == ["glm_asr_scratch", "transformers"]
    assert data["others"][0]["tokens"] == TOKENS
    assert r.csv[0] == benchmark_detailed.CSV_COLUMNS
    assert len(r.csv) - 1 == len(data["operators"]) + len(data["others"][0]["operators"])
    assert {row[0] for row in r.csv[1:]} == {"glm_asr_scratch", "transformers"}


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
    from glm_asr_common.checkpoint import default_config_dict

    cfg = ModelConfig.from_dict(default_config_dict())
    e, d = cfg.encoder, cfg.decoder
    assert (e.hidden_size, e.intermediate_size, e.num_layers, e.num_heads, e.head_dim, e.num_mel_bins) == \
        (REAL["enc_h"], REAL["enc_i"], REAL["enc_layers"], REAL["enc_heads"], REAL["enc_d"], REAL["mels"])
    assert (d.hidden_size, d.intermediate_size, d.num_layers, d.num_heads, d.num_kv_heads, d.head_dim,
            d.vocab_size) == (REAL["dec_h"], REAL["dec_i"], REAL["dec_layers"], REAL["q_heads"], REAL["kv_heads"],
                              REAL["dec_d"], REAL["vocab"])
    return cfg


def test_decode_step_weight_bytes_bf16(real_cfg):
    h, i, d = REAL["dec_h"], REAL["dec_i"], REAL["dec_d"]
    q, kv = REAL["q_heads"] * d, REAL["kv_heads"] * d
    per_layer = h * q + 2 * h * kv + q * h + 2 * h * i + i * h  # q, k, v, o, gate+up, down
    weights = REAL["dec_layers"] * per_layer + REAL["vocab"] * h  # + lm_head
    hand_bytes = 2 * weights
    assert hand_bytes == pytest.approx(2.94e9, rel=0.01)
    ops = roofline.decode_step_ops(real_cfg, batch=1, cache_len=80, e=2)
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


def test_prefill_projector_and_shape_formulas(real_cfg):
    p = 60
    ops = roofline.prefill_ops(real_cfg, batch=1, prompt_len=p, e=2)
    attn_flops, _ = roofline.totals(ops, classes={"attention"})
    pairs = p * (p + 1) // 2  # causal
    assert attn_flops == pytest.approx(REAL["dec_layers"] * 4 * REAL["dec_d"] * REAL["q_heads"] * pairs)
    proj = roofline.projector_ops(real_cfg, windows=1, mel_frames=3000, e=2)
    proj_flops, _ = roofline.totals(proj, classes={"gemm"})
    rows = 1500 // 4
    assert proj_flops == pytest.approx(2 * rows * 5120 * 4096 + 2 * rows * 4096 * 2048, rel=1e-3)
    # Shapes recorded by the profiler give the same GEMM formula.
    flops, nbytes = roofline.shape_cost("aten::linear", [[1500, 1280], [3840, 1280], [3840]], ["c10::BFloat16"] * 3)
    ref = roofline.gemm("encoder", "qkv", 1500, 3840, 1280, 2, bias=True)
    assert (flops, nbytes) == (ref.flops, ref.bytes)
    flops, _ = roofline.shape_cost("aten::scaled_dot_product_attention",
                                   [[1, 20, 1500, 64], [1, 20, 1500, 64], [1, 20, 1500, 64]], ["float"] * 3)
    assert flops == 4 * 64 * 20 * 1500 * 1500
    # A whole transcription = encoder + projector + prefill + every step (cache grows by one each).
    whole = roofline.transcription_ops(real_cfg, windows=1, mel_frames=3000, prompt_len=p, decode_steps=3,
                                       dtype="bfloat16")
    steps = sum(roofline.totals(roofline.decode_step_ops(real_cfg, batch=1, cache_len=p + s, e=2))[1]
                for s in (1, 2, 3))
    assert roofline.totals(whole, phase="decode")[1] == pytest.approx(steps)


def test_verdicts_from_intensity_and_achieved_fraction():
    peaks = roofline.Peaks("test GPU", "cuda", 3e12, {"bfloat16": 700e12, "tf32": 350e12, "float32": 50e12},
                           "now", "test")
    assert peaks.ridge("bfloat16") == pytest.approx(700e12 / 3e12)
    # Decode GEMV: 2.9 GB in 1.2 ms is 2.4 TB/s, AI ≈ 1: memory-bound near the roof.
    v = roofline.assess(2.9e9, 2.9e9, 1.2e-3, 196, peaks, "bfloat16")
    assert v.verdict == "memory-bound" and 70 < v.pct_roof < 90
    # Encoder GEMMs: 1.9 TFLOP at AI ≈ 550 in 4 ms: compute-bound.
    v = roofline.assess(1.9e12, 3.47e9, 4e-3, 128, peaks, "bfloat16")
    assert v.verdict == "compute-bound" and v.pct_flops > 50
    # A 3 µs norm reaching 1% of the bandwidth: latency-bound.
    v = roofline.assess(1e5, 1e5, 3e-6, 1, peaks, "bfloat16")
    assert v.verdict == "latency-bound"
    # Long but slow: the roof side with a low-utilisation mark.
    assert roofline.assess(1e9, 1e9, 1.0, 1, peaks, "bfloat16").verdict == "memory-bound, low"
    assert roofline.floor_seconds(2.9e9, 2.9e9, peaks, "bfloat16") == pytest.approx(2.9e9 / 3e12)


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
# Region attribution (the GPU path, on synthetic profiler events)
# ---------------------------------------------------------------------------------------------


class Ev:
    """A torch.profiler FunctionEvent stand-in: CPU ops carry torch's correlation ids, device events
    and launch calls CUPTI's (``cid``); a kernel links to a torch op through linked_correlation_id."""

    _next = [1]

    def __init__(self, name, start, end, *, device="CPU", annotation=False, link=0, shapes=None, dtypes=None,
                 activity=None, cid=None):
        if cid is None:
            cid = Ev._next[0]
            Ev._next[0] += 1
        self.id, self.name, self.thread, self.is_async = cid, name, 1, False
        self.time_range = SimpleNamespace(start=start, end=end)
        self.device_type = f"DeviceType.{device}"
        self.is_user_annotation = annotation
        self.activity_type = activity or ("user_annotation" if annotation else
                                          "cpu_op" if device == "CPU" else "kernel")
        self.linked_correlation_id = link
        self.input_shapes, self.input_dtypes, self.concrete_inputs = shapes or [], dtypes or [], []


def test_kernels_go_to_their_innermost_region():
    enc = Ev("encoder", 0, 100, annotation=True)
    layer = Ev("encoder.layer", 10, 90, annotation=True)
    linear = Ev("aten::linear", 20, 40, shapes=[[1500, 64], [192, 64], [192]], dtypes=["float"] * 3)
    addmm = Ev("aten::addmm", 21, 39, shapes=[[192], [1500, 64], [64, 192]], dtypes=["float"] * 3)
    prefill = Ev("decoder.prefill", 100, 200, annotation=True)
    dec_layer = Ev("decoder.layer", 110, 190, annotation=True)
    step = Ev("decoder.step", 200, 300, annotation=True)
    copy_op = Ev("aten::copy_", 310, 320)
    cpu = [enc, layer, linear, addmm, prefill, dec_layer, step, copy_op]
    # Launch calls (CUPTI ids 9001...). A Triton launch has no torch op around it: not linked (0).
    # The Triton launch's CUPTI id equals a torch op's id on purpose: the two id spaces must not mix.
    launches = [
        Ev("cudaLaunchKernel", 25, 26, link=addmm.id, activity="cuda_runtime", cid=9001),
        Ev("cudaLaunchKernel", 27, 28, link=addmm.id, activity="cuda_runtime", cid=9002),
        Ev("cuLaunchKernelEx", 120, 121, activity="cuda_driver", cid=enc.id),
        Ev("cudaGraphLaunch", 210, 212, activity="cuda_runtime", cid=9004),
        Ev("cudaMemcpyAsync", 312, 314, link=copy_op.id, activity="cuda_runtime", cid=9005),
    ]
    kernels = [
        Ev("ampere_sgemm_128x64_tn", 50, 70, device="CUDA", link=addmm.id, cid=9001),   # cuBLAS under torch linear
        Ev("splitKreduce_kernel", 70, 72, device="CUDA", link=addmm.id, cid=9002),      # its helper launch
        Ev("flash_attention_kernel", 122, 150, device="CUDA", cid=enc.id),              # Triton, unlinked
        Ev("fused_linear_kernel", 214, 230, device="CUDA", cid=9004),                   # two kernels replayed
        Ev("rmsnorm_kernel", 230, 232, device="CUDA", cid=9004),                        # by one CUDA graph
        Ev("Memcpy HtoD (Pageable -> Device)", 330, 331, device="CUDA", link=copy_op.id, activity="gpu_memcpy",
           cid=9005),
        Ev("decoder.step", 205, 290, device="CUDA", activity="gpu_user_annotation"),    # must be ignored
        Ev("cudaStreamSynchronize", 300, 305, device="CUDA", activity="cuda_sync"),     # not a kernel
    ]
    res = profiling.parse_profile(cpu + launches + kernels, "cuda", wall_ms=0.4)
    by_name = {k.name: k for k in res.kernels}
    assert len(res.kernels) == 6
    assert res.regions.names == ["encoder", "encoder.layer", "decoder.prefill", "decoder.layer", "decoder.step"]
    chain = lambda k: res.regions.chain(k.region) if k.region >= 0 else []
    assert chain(by_name["ampere_sgemm_128x64_tn"]) == ["encoder.layer", "encoder"]
    assert by_name["ampere_sgemm_128x64_tn"].torch_op == "aten::linear"
    assert chain(by_name["flash_attention_kernel"]) == ["decoder.layer", "decoder.prefill"]
    assert by_name["flash_attention_kernel"].torch_op is None
    assert chain(by_name["fused_linear_kernel"]) == chain(by_name["rmsnorm_kernel"]) == ["decoder.step"]
    assert by_name["Memcpy HtoD (Pageable -> Device)"].region == -1
    # The linear's FLOPs are shared by its two kernels in proportion to their time.
    shared = by_name["ampere_sgemm_128x64_tn"].cost[0] + by_name["splitKreduce_kernel"].cost[0]
    assert shared == pytest.approx(2 * 1500 * 192 * 64 + 1500 * 192)
    summary = profiling.summarize(res.regions, res.wall_ms)
    assert summary["encoder.layers"] == pytest.approx(0.022)
    assert summary["prefill.layers"] == pytest.approx(0.028)
    assert summary["decode.other"] == pytest.approx(0.018) and summary["decode.steps"] == 1
    # Classes: torch op ancestry first, then the kernel name, then the region (lm_head in a head region).
    classes = {k.name: benchmark_detailed.classify(k, chain(k))[2] for k in res.kernels}
    assert classes["ampere_sgemm_128x64_tn"] == "gemm" and classes["flash_attention_kernel"] == "attention"
    assert classes["fused_linear_kernel"] == "gemm" and classes["Memcpy HtoD (Pageable -> Device)"] == "copy"
    assert classes["rmsnorm_kernel"] == "norm"
    assert roofline.is_aux_kernel("splitKreduce_kernel") and roofline.is_aux_kernel("decode_attention_combine_kernel")
    head = profiling.KernelRecord("lm_head_argmax_kernel", 1.0, 0, None, None)
    assert benchmark_detailed.classify(head, ["decoder.head", "decoder.step"])[2] == "lm_head"
    gemv = profiling.KernelRecord("gemv2T_kernel", 1.0, 0, "aten::linear", None)
    assert benchmark_detailed.classify(gemv, ["decoder.head", "decoder.step"])[2] == "lm_head"


@pytest.mark.parametrize("name, cls, aux", [
    # The Triton example's kernels.
    ("conv1d_gelu_kernel", "conv", False), ("layernorm_kernel", "norm", False), ("rmsnorm_kernel", "norm", False),
    ("fused_linear_kernel", "gemm", False), ("splitk_epilogue_kernel", "gemm", True), ("rope_kernel", "rope", False),
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
    assert roofline.kernel_class(name) == cls and roofline.is_aux_kernel(name) == aux


def test_component_mapping_of_nested_regions():
    c = profiling.component_of
    assert c(["encoder.layer", "encoder", "decoder.prefill"]) == ("encoder", "layers")  # Triton: encoder in prefill
    assert c(["projector", "decoder.prefill"]) == ("projector", "")
    assert c(["decoder.embed"]) == ("prefill", "embed")                                  # scratch: prompt embedding
    assert c(["decoder.layer", "decoder.step"]) == ("decode", "layers")
    assert c(["decoder.head", "decoder.prefill"]) == ("prefill", "head")
    assert c(["decoder.step"]) == ("decode", "other")
    assert c(["encoder"]) == ("encoder", "other")


def test_region_timer_splits_a_run():
    from glm_asr_common.profiling import RegionTimer, region, summarize

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
    assert profiling._TIMER is None


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


def test_micro_benchmark_calls_the_triton_launchers():
    """The Triton example's public launchers at reduced shapes (the interpreter is slow): same results as torch."""
    launchers = benchmark_detailed.folder_launchers("glm_asr_triton_example")
    assert set(launchers) == {"flash_attention", "decode_attention", "linear", "swiglu_linear"}
    tiny = {"audio_config": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                                 max_position_embeddings=32),
            "text_config": dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                                eos_token_id=[0]),
            "audio_token_id": 5}
    cfg = ModelConfig.from_dict(tiny)
    args = SimpleNamespace(dtype="float32", max_new_tokens=4)
    for make in (benchmark_detailed.attention_cases, benchmark_detailed.linear_cases):
        for name, shape, op, torch_fn, builders, to_torch in make(cfg, 8, args, "cpu", torch.float32):
            launcher = next(n for n in builders if n in launchers)
            out = to_torch(builders[launcher](launchers[launcher])())
            assert benchmark_detailed.max_rel_error(out, torch_fn()) < 1e-4, name


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
