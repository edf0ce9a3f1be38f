"""The cuTile example's CuPy baseline (cupy_model.py) on its CPU stand-in, NumPy.

End to end it is one of the tracks of test_parity.py (greedy ids equal to transformers' fp32 on the
test clip, a 45 s clip and a left-padded batch; encoder, projector and prefill logits within 1e-4;
bf16 logits near transformers' bf16). Here: its pieces against torch, the torch ⇄ array bridge, and
what it says about the precisions it cannot give.
"""

import json
import sys

import numpy as np
import pytest
import torch

from glm_asr_course.model.audio import load_audio
from glm_asr_course.errors import UserError
from glm_asr_course.model.frontend import prepare_inputs
from glm_asr_course.tracks import import_track, open_checkpoint
from glm_asr_course.reference.tiny_checkpoint import TEST_AUDIO
from parity import rel_err

cupy_model = import_track("glm_asr_cutile_example", "cupy", "cpu")


@pytest.fixture(scope="module")
def fp32_model(tiny_ckpt):
    ckpt = open_checkpoint(str(tiny_ckpt), torch.float32)
    return cupy_model.load_model(ckpt.config, ckpt.weights, "cpu", "fp32")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_arrays_and_tensors_share_memory(dtype):
    backend = cupy_model.ArrayBackend(torch.device("cpu"), dtype)
    t = torch.arange(6, dtype=dtype).view(2, 3)
    a = backend.array(t)
    a[1, 2] = 40
    assert t[1, 2].item() == 40
    back = backend.tensor(a)
    assert back.dtype == dtype and back.data_ptr() == t.data_ptr()


def test_conv_stem_matches_torch(fp32_model):
    m = fp32_model
    x = torch.randn(2, m.cfg.encoder.num_mel_bins, 31)
    for stride in (1, 2):
        weight = torch.randn(8, x.shape[1], 3)
        bias = torch.randn(8)
        as_matrix = weight.permute(0, 2, 1).reshape(8, -1).contiguous()
        ours = m.conv_gelu(x.numpy(), as_matrix.numpy(), bias.numpy(), stride)
        ref = torch.nn.functional.gelu(torch.nn.functional.conv1d(x, weight, bias, stride=stride, padding=1))
        assert rel_err(torch.from_numpy(ours), ref.transpose(1, 2)) <= 1e-6


def test_masked_attention_matches_torch(fp32_model):
    """GQA by stacking the query heads of a kv head, a causal mask and a fully masked row (zeros)."""
    m = fp32_model
    B, Hkv, G, T, D = 2, 2, 3, 5, 8
    q = np.random.default_rng(0).standard_normal((B, Hkv, G * T, D)).astype(np.float32)
    k, v = (np.random.default_rng(s).standard_normal((B, Hkv, T, D)).astype(np.float32) for s in (1, 2))
    keys, queries = np.arange(T), np.tile(np.arange(T), G)
    hidden = (keys[None, :] > queries[:, None])[None, None] | (keys < np.array([0, 2])[:, None])[:, None, None, :]
    out = m.attention(q, k, v, D ** -0.5, hidden)
    scores = torch.from_numpy(q) @ torch.from_numpy(k).transpose(-1, -2) * D ** -0.5
    probs = torch.softmax(scores.masked_fill(torch.from_numpy(hidden), float("-inf")), -1).nan_to_num(0.0)
    assert rel_err(torch.from_numpy(out), probs @ torch.from_numpy(v)) <= 1e-6
    assert not out[1, :, 0].any()  # query 0 of the padded row sees no key


def test_tf32_on_numpy_says_it_computes_ieee(tiny_ckpt):
    ckpt = open_checkpoint(str(tiny_ckpt), torch.float32)
    model = cupy_model.load_model(ckpt.config, ckpt.weights, "cpu", "tf32")
    assert model.precision_note == "numpy exposes no TF32 switch: fp32 products are IEEE"
    assert not model.use_cuda_graph


def test_bf16_without_ml_dtypes_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(UserError) as error:
        cupy_model.ArrayBackend(torch.device("cpu"), torch.bfloat16)
    assert "ml_dtypes" in str(error.value) and "\n" not in str(error.value)


def test_benchmark_detailed_times_the_baseline_beside_the_kernels(tiny_ckpt, tmp_path, monkeypatch, capsys):
    """--compare repeats: one run measures a folder, the CuPy baseline and the cuTile fast path, on the
    same transcription (IEEE fp32, so all three pick the same ids)."""
    import benchmark_detailed

    monkeypatch.setenv("GLM_ASR_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "report.json"
    argv = ["glm_asr_scratch", "--model", str(tiny_ckpt), "--device", "cpu", "--precision", "fp32", "--runs", "1",
            "--warmup", "0", "--max-new-tokens", "3", "--min-new-tokens", "3", "--json", str(out),
            "--compare", "glm_asr_cutile_example:cupy", "--compare", "glm_asr_cutile_example:fast"]
    assert benchmark_detailed.main(argv) == 0
    printed = capsys.readouterr().out
    assert "COMPARISON: glm_asr_scratch:course vs glm_asr_cutile_example:cupy vs glm_asr_cutile_example:fast" in printed
    data = json.loads(out.read_text())
    assert [r["label"] for r in data["others"]] == ["glm_asr_cutile_example:cupy", "glm_asr_cutile_example:fast"]
    assert all(r["token_ids"] == data["token_ids"] and len(r["token_ids"]) == 3 for r in data["others"])
    assert all(r["end_to_end"]["median_ms"] > 0 for r in data["others"])


def test_benchmark_detailed_refuses_a_track_twice(capsys):
    from glm_asr_course.errors import run_cli

    import benchmark_detailed

    with pytest.raises(SystemExit) as info:
        run_cli(benchmark_detailed.main, ["glm_asr_cutile_example", "--path", "cupy", "--compare",
                                          "glm_asr_cutile_example:fast", "--compare", "glm_asr_cutile_example:cupy"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "glm_asr_cutile_example:cupy names a folder and path already measured" in err
    assert len(err.strip().splitlines()) == 1


def test_bf16_without_a_bf16_matmul_multiplies_widened_copies(tiny_ckpt, monkeypatch):
    """A CuPy with no bfloat16 matmul: the weight matrices become fp32 copies of their bf16 values.
    The same arithmetic as NumPy's bf16 products (fp32 accumulation), so the same logits up to the
    order of the sums."""

    ckpt = open_checkpoint(str(tiny_ckpt), torch.bfloat16)
    inputs = prepare_inputs([load_audio(TEST_AUDIO)], ckpt.config, ckpt.processor)
    native = cupy_model.load_model(ckpt.config, ckpt.weights, "cpu", "bf16")
    monkeypatch.setattr(cupy_model.ArrayBackend, "_multiplies", lambda self, dtype, shape: False)
    widened = cupy_model.load_model(ckpt.config, ckpt.weights, "cpu", "bf16")
    assert native.precision_note == "" and "no bfloat16 matmul" in widened.precision_note
    assert widened.w.decoder_layers[0].qkv_weight.dtype == np.float32
    assert rel_err(widened.prefill_logits(inputs).float(), native.prefill_logits(inputs).float()) <= 5e-3


def test_bf16_batched_products_widen_where_only_matrix_products_exist(tiny_ckpt, monkeypatch):
    """CuPy 14.2 multiplies bf16 matrices but not batches: the weights stay bf16, attention's batched
    products are widened; the logits are those of native bf16 products up to the order of the sums."""

    ckpt = open_checkpoint(str(tiny_ckpt), torch.bfloat16)
    inputs = prepare_inputs([load_audio(TEST_AUDIO)], ckpt.config, ckpt.processor)
    native = cupy_model.load_model(ckpt.config, ckpt.weights, "cpu", "bf16")
    monkeypatch.setattr(cupy_model.ArrayBackend, "_multiplies", lambda self, dtype, shape: len(shape) == 2)
    matrices_only = cupy_model.load_model(ckpt.config, ckpt.weights, "cpu", "bf16")
    assert matrices_only.precision_note == "" and not matrices_only.backend.bf16_batched_matmul
    assert matrices_only.w.decoder_layers[0].qkv_weight.dtype == matrices_only.act
    assert rel_err(matrices_only.prefill_logits(inputs).float(), native.prefill_logits(inputs).float()) <= 5e-3
