"""The cuTile example's course path (glm_asr_cutile_example/model.py) beyond token parity (which
tests/test_parity.py and tests/test_awkward_shapes.py check for every track) and torch's part in the
forward (tests/test_forward_ops.py):

* every kernel signature a transcription launches — the course kernels at the model's shapes (4-d
  strided views, GQA's 0-stride kv heads, the real model's widths) and the provided glue — compiles
  for sm_90 with the real compiler, in tf32, IEEE fp32 and bf16;
* the three attention kernels at the encoder's window lengths and past them (1500, 1501, 3000 keys)
  with a head size that is not a power of two.

Without a GPU the kernels run in the cuTile emulator.
"""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glm_asr_course.model.audio import load_audio
from glm_asr_course.runtimes.cutile import MODE, recorded_signatures, write_signatures
from parity import inputs_for, track_model
from glm_asr_lab.cutile_compile_check import toolchain_missing

# Its sm_90 compile test compiles what this file launched, whatever ran before it (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("own_cutile_launch_record")

REPO = Path(__file__).resolve().parent.parent
COURSE = "glm_asr_cutile_example:course"
DEV = "cuda" if MODE == "gpu" else "cpu"
COURSE_MODULES = tuple(f"glm_asr_cutile_example.{m}" for m in ("layers", "attention", "rope", "glue", "conv"))


def full_width_model(precision: str):
    """The course model at the real checkpoint's widths (transformers' default GlmAsrConfig: hidden
    1280 / 2048, 20 / 16+4 heads, vocabulary 59 264), one encoder and one decoder layer, random weights."""
    from glm_asr_course.model.checkpoint import default_config_dict, random_weights
    from glm_asr_course.model.config import ModelConfig
    from glm_asr_course.model.precision import get_precision
    from glm_asr_cutile_example.model import load_model

    cfg = ModelConfig.from_dict(default_config_dict())
    cfg = dataclasses.replace(cfg, encoder=dataclasses.replace(cfg.encoder, num_layers=1),
                              decoder=dataclasses.replace(cfg.decoder, num_layers=1))
    dtype = get_precision(precision).dtype
    return load_model(cfg, random_weights(cfg, dtype), "cpu", precision), cfg


def test_course_path_signatures_compile_for_sm_90(tiny_ckpt, clips, tmp_path, monkeypatch):
    """Every signature the course path launches compiles for sm_90 with the real compiler: at the
    model's own widths (tile constants such as the 4096-lane vocabulary tiles of the greedy head,
    where a kernel once kept the compiler busy for minutes), in tf32 and bf16; and on the tiny
    checkpoint in IEEE fp32 with a left-padded batch of two. At full width each launch emulates one
    block only: the signatures are the point, not the values."""
    if MODE != "emulate":
        pytest.skip("on a GPU every launch compiles its signature already")
    missing = toolchain_missing()
    if missing:
        pytest.skip(missing)
    import cutile_emulator.emulator as cutile_emulator
    from glm_asr_course.model.frontend import prepare_inputs

    emulate_grid = cutile_emulator.launch
    with monkeypatch.context() as patch:
        patch.setattr(cutile_emulator, "launch",
                      lambda stream, grid, kern, args, **options: emulate_grid(stream, (1,) * len(grid), kern, args,
                                                                               **options))
        for precision in ("tf32", "bf16"):
            model, cfg = full_width_model(precision)
            model.generate(prepare_inputs([load_audio(clips["short"])], cfg, None), 2, 2)
    model, ckpt = track_model(COURSE, tiny_ckpt, "fp32")
    model.generate(inputs_for(ckpt, [load_audio(clips["short"]), load_audio(clips["other"])]), 2, 2)
    signatures = [s for s in recorded_signatures() if s["kernel"].rsplit(".", 1)[0] in COURSE_MODULES]
    record = tmp_path / "signatures.json"
    write_signatures(record, signatures)
    result = subprocess.run([sys.executable, "-m", "glm_asr_lab.cutile_compile_check", "--signatures",
                             str(record)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    compiled = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("PASS")}
    launched = {s["kernel"] for s in signatures}
    assert compiled == launched, f"not compiled: {sorted(launched - compiled)}"
    assert {name.rsplit(".", 1)[0] for name in compiled} == set(COURSE_MODULES)
    widths = {tuple(p["shape"]) for s in signatures for p in s["params"] if p["kind"] == "array"}
    assert (1, 59264) in widths, "the full-width run did not reach the greedy head"


def test_self_check_records_carry_the_module_name_of_a_file_run_as_a_script(tmp_path):
    """The compile check's default route records each file's self-check run as a script: conv.py defines its
    kernel in __main__, and the record must name it glm_asr_cutile_example.conv (how the compiler imports it)."""
    from glm_asr_lab.cutile_compile_check import record_self_checks

    record = tmp_path / "signatures.json"
    assert record_self_checks(["glm_asr_cutile_example.conv"], record) == []
    kernels = {s["kernel"] for s in json.loads(record.read_text())}
    assert "glm_asr_cutile_example.conv.conv_unfold_kernel" in kernels
    assert not any(k.startswith("__main__.") for k in kernels), kernels


@pytest.mark.parametrize("keys", [1500, 1501, 3000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_cutile_attention_at_window_lengths(keys, dtype):
    from glm_asr_cutile_example.attention import attention_output, attention_scores, softmax_inplace

    gen = torch.Generator().manual_seed(keys)
    # A few queries over the whole window, head size 24 (padded to 32 lanes).
    q, k, v = (torch.randn(1, 2, n, 24, generator=gen).to(DEV, dtype) for n in (5, keys, keys))
    scale = 24 ** -0.5
    probs = softmax_inplace(attention_scores(q, k, scale, precision="ieee"))
    out = attention_output(probs, v, precision="ieee")
    expected_probs = torch.softmax(q.double() @ k.double().transpose(-1, -2) * scale, -1)
    torch.testing.assert_close(probs.double(), expected_probs, rtol=1e-5, atol=1e-7)
    # transformers casts the probabilities to v's dtype before the product.
    expected = probs.to(dtype).double() @ v.double()
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(out.double(), expected, rtol=tol, atol=tol)
