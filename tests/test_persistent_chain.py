"""glm_asr_lab/measure/persistent_chain.py: the chain is the decode step's weight stream, the persistent kernel
computes it (in the interpreter one phase a launch, as its launcher runs it there; on a GPU one launch with its
barriers), and the kernel compiled for sm_90a keeps the barrier's memory ordering. The timing itself needs a GPU
(gpu_check.sh persistent_chain)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from glm_asr_course.model.checkpoint import default_config_dict
from glm_asr_course.model.config import ModelConfig
from glm_asr_course.tracks import REPO_ROOT
from glm_asr_lab.measure import persistent_chain

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Widths of a small decoder layer in step order (q|k|v, o, gate|up, down): each K is at most the N before it.
SMALL_LAYER = [("qkv", 96, 64), ("o", 64, 64), ("gate_up", 256, 64), ("down", 64, 128)]


def test_the_chain_is_the_decoders_weights_once_a_token():
    cfg = ModelConfig.from_dict(default_config_dict())
    d = cfg.decoder
    order = persistent_chain.chain_order(persistent_chain.decode_chain_shapes(cfg), d.num_layers,
                                         (d.vocab_size, d.hidden_size))
    q, kv = d.num_heads * d.head_dim, d.num_kv_heads * d.head_dim
    per_layer = (q + 2 * kv) * d.hidden_size + d.hidden_size * q + 3 * d.intermediate_size * d.hidden_size
    assert sum(n * k for _, n, k in order) == d.num_layers * per_layer + d.vocab_size * d.hidden_size
    assert [name for name, _, _ in order] == ["qkv", "o", "gate_up", "down"] * d.num_layers + ["lm_head"]
    # Each phase reads the first K outputs of the one before.
    assert all(k <= n_before for (_, n_before, _), (_, _, k) in zip(order, order[1:]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("programs, rows, block_k", [(3, 8, 32), (5, 16, 64)])
def test_the_persistent_kernel_computes_the_chain(dtype, programs, rows, block_k):
    """Several row tiles a program (the next tile's prefetch), several K steps, three layers: every activation
    slot equal to torch's products rounded at the same points (bf16) or to fp32's summation order."""
    chain = persistent_chain.build_chain(SMALL_LAYER, 3, (160, 64), dtype, DEVICE, seed=1)
    expected = persistent_chain.reference_chain(chain, chain.act[:64].clone())
    assert expected.float().std() > 0.3  # the scales keep the activations alive down the chain
    persistent_chain.run_persistent(chain, programs, rows, block_k, num_warps=4)
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(chain.act, expected, **tolerance)


def test_the_launches_arm_computes_the_same_chain():
    chain = persistent_chain.build_chain(SMALL_LAYER, 2, (160, 64), torch.float32, DEVICE, seed=2)
    expected = persistent_chain.reference_chain(chain, chain.act[:64].clone())
    persistent_chain.run_launches(chain)
    torch.testing.assert_close(chain.act, expected, rtol=1e-5, atol=1e-5)


def test_a_matrix_the_tiles_do_not_split_is_refused():
    chain = persistent_chain.build_chain([("a", 24, 64), ("b", 64, 24)], 1, (16, 64), torch.float32, DEVICE)
    with pytest.raises(ValueError, match="does not split"):
        persistent_chain.run_persistent(chain, 2, 16, 32, num_warps=4)


PTX = """
import json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from glm_asr_lab.measure import persistent_chain as pc
signature = dict(w_ptr="*bf16", act_ptr="*bf16", phases_ptr="*i64", counter_ptr="*i32", timeout_ptr="*i32",
                 first_phase="i32", last_phase="i32", ROWS="constexpr", BLOCK_K="constexpr", POLL="constexpr",
                 MAX_SPINS="constexpr")
aligned = {(i,): [["tt.divisibility", 16]] for i in range(5)}  # the pointers, as a launch specialises them
found = {}
for per_sm, rows, block_k, warps, poll in pc.CONFIGS:
    constexprs = dict(ROWS=rows, BLOCK_K=block_k, POLL=poll, MAX_SPINS=pc.MAX_SPINS)
    compiled = triton.compile(ASTSource(pc.persistent_gemv_chain_kernel, signature, constexprs, attrs=aligned),
                              target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))
    ptx = compiled.asm["ptx"]
    found[f"{per_sm}/SM {rows}x{block_k} {warps}w {poll}"] = {
        "arrive": "atom.global.gpu.release.add" in ptx, "acquire": "ld.global.gpu.acquire" in ptx,
        "activations via L2": "ld.global.cg" in ptx, "volatile poll": "ld.volatile.global" in ptx,
        "16-byte weight loads": bool(re.search(r"ld.global(.L1::evict_last)?.v4.b32", ptx))}
print(json.dumps(found))
"""


def test_every_config_compiles_for_sm_90_with_the_barriers_ordering():
    """The barrier never runs in the interpreter; here the compiler sees it. Every configuration's PTX counts in
    with a releasing atomic, reads the count with acquire, reads the activations from L2 and the weights in
    16-byte vectors; the volatile poll is there only where asked for. (A plain global read inside the kernel,
    which the interpreter accepts, fails this.)"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", PTX], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.splitlines()[-1])
    assert len(found) == len(persistent_chain.CONFIGS)
    for config, features in found.items():
        polls_volatile = config.endswith("volatile")
        assert features == {"arrive": True, "acquire": True, "activations via L2": True,
                            "volatile poll": polls_volatile, "16-byte weight loads": True}, config


@pytest.mark.parametrize("option", ["--rounds=0", "--layers=0", "--replays=5"])
def test_an_option_out_of_range_is_refused_in_one_line(option):
    out = subprocess.run([sys.executable, "-m", "glm_asr_lab.measure.persistent_chain", option], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and option.split("=")[0] in out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the tool runs")
def test_without_a_gpu_the_tool_says_so_in_one_line():
    out = subprocess.run([sys.executable, "-m", "glm_asr_lab.measure.persistent_chain"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["persistent_chain times GPU kernels: it needs CUDA (and "
                                               "TRITON_INTERPRET unset)"]
