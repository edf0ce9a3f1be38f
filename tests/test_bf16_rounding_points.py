"""Each course operation of both tracks in bf16 against transformers' own module for it, on the same bf16
inputs: a kernel that rounds to bf16 where transformers keeps fp32, or the reverse, leaves a large share
of the elements one step off, where rounding at the same points agrees bit for bit bar rare
accumulation-order flips (the Faithful judge, ≤ 1 %). kernel_cases.py holds the course's own bf16
references; this file ties the rounding points to transformers' modules themselves (GlmAsr's encoder:
LayerNorm, GELU, partial RoPE; its Llama decoder: RMSNorm, SiLU, SwiGLU's product, full RoPE; the
residual add and nn.Linear of both). Attention is left to kernel_cases.py: on a GPU transformers runs
sdpa's fused kernels, whose rounding a CPU run of transformers does not show.

This is the CPU half of the hunt for the Triton course path's bf16 regret (docs/performance.md): every
operation here matched in both tracks, so no rounding point differs from transformers'.
"""

import os
import zlib

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from transformers import GlmAsrEncoderConfig, LlamaConfig  # noqa: E402
from transformers.activations import ACT2FN  # noqa: E402
from transformers.models.glmasr import modeling_glmasr  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

from glm_asr_course.kernels.kernel_cases import BF16_FAITHFUL  # noqa: E402
from glm_asr_course.model import course_model  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BF16 = torch.bfloat16
TRACKS = ("glm_asr_triton_example", "glm_asr_cutile_example")
ROWS, WIDTH = 48, 96  # a width that is not a power of two: padded lanes in every row kernel


@pytest.fixture(scope="module", params=TRACKS)
def ops(request):
    return course_model.track_ops(request.param)


@pytest.fixture
def gen(request):
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def rand(gen, *shape, scale=1.0, shift=0.0):
    return (torch.randn(*shape, generator=gen) * scale + shift).to(DEVICE, BF16)


def assert_same_rounding(out, ref):
    verdict = BF16_FAITHFUL(out, ref)
    assert verdict.passed, f"{verdict.error:.4f} of the elements differ from transformers' {verdict.reason}"


@torch.no_grad()
def test_layernorm(ops, gen):
    norm = torch.nn.LayerNorm(WIDTH, eps=1e-5).to(DEVICE, BF16)
    norm.weight.copy_(rand(gen, WIDTH, scale=0.5, shift=1.0))
    norm.bias.copy_(rand(gen, WIDTH, scale=0.5))
    x = rand(gen, ROWS, WIDTH, scale=3.0, shift=0.5)
    assert_same_rounding(ops.layernorm(x, norm.weight, norm.bias, norm.eps), norm(x))


@torch.no_grad()
def test_rmsnorm(ops, gen):
    norm = modeling_llama.LlamaRMSNorm(WIDTH, eps=1e-6).to(DEVICE, BF16)
    norm.weight.copy_(rand(gen, WIDTH, scale=0.5, shift=1.0))
    x = rand(gen, ROWS, WIDTH, scale=3.0)
    assert_same_rounding(ops.rmsnorm(x, norm.weight, norm.variance_epsilon), norm(x))


@pytest.mark.parametrize("name", ["gelu", "silu"])
@torch.no_grad()
def test_activation(ops, gen, name):
    x = rand(gen, ROWS, WIDTH, scale=3.0)
    assert_same_rounding(getattr(ops, name)(x), ACT2FN[name](x))


@torch.no_grad()
def test_swiglu_product_and_residual_add(ops, gen):
    act, up, residual = (rand(gen, ROWS, WIDTH, scale=2.0) for _ in range(3))
    assert_same_rounding(ops.mul(act, up), act * up)
    assert_same_rounding(ops.residual_add(residual.clone(), up), residual + up)


@pytest.mark.parametrize("bias", [True, False])
@torch.no_grad()
def test_linear(ops, gen, bias):
    linear = torch.nn.Linear(WIDTH, 80, bias=bias).to(DEVICE, BF16)
    linear.weight.copy_(rand(gen, 80, WIDTH, scale=WIDTH ** -0.5))
    if bias:
        linear.bias.copy_(rand(gen, 80, scale=0.5))
    x = rand(gen, ROWS, WIDTH)
    assert_same_rounding(ops.linear_tf32(x, linear.weight, linear.bias, precision="ieee"), linear(x))


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder_partial", "decoder_full"])
@torch.no_grad()
def test_rope(ops, gen, decoder):
    """transformers' rotary embedding and apply_rotary_pos_emb: GlmAsr's encoder rotates half of each
    head, its Llama decoder the whole head."""
    T, H, D = 40, 3, 32
    if decoder:
        config = LlamaConfig(hidden_size=H * D, num_attention_heads=H, head_dim=D, max_position_embeddings=T,
                             rope_parameters={"rope_type": "default", "rope_theta": 5000.0})
        rotary, apply = modeling_llama.LlamaRotaryEmbedding(config), modeling_llama.apply_rotary_pos_emb
    else:
        config = GlmAsrEncoderConfig(hidden_size=H * D, num_attention_heads=H, max_position_embeddings=T)
        rotary, apply = modeling_glmasr.GlmAsrRotaryEmbedding(config), modeling_glmasr.apply_rotary_pos_emb
    rotary_dim = rotary.inv_freq.numel() * 2
    theta = config.rope_parameters["rope_theta"]
    q, k = rand(gen, 1, T, H, D, scale=2.0), rand(gen, 1, T, H, D, scale=2.0)
    cos, sin = rotary.to(DEVICE)(q, torch.arange(T, device=DEVICE)[None])
    ref_q, ref_k = apply(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    cos_table, sin_table = ops.rope_tables(T, rotary_dim, theta, DEVICE)
    qk = torch.cat([q, k], dim=2)
    ops.apply_rope(qk, cos_table, sin_table, torch.arange(T, dtype=torch.int32, device=DEVICE)[None], rotary_dim)
    assert_same_rounding(qk[:, :, :H], ref_q.transpose(1, 2))
    assert_same_rounding(qk[:, :, H:], ref_k.transpose(1, 2))
