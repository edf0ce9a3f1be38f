"""GLM-ASR in plain PyTorch at its best: model.py's layers with a static KV cache, CUDA graphs and
torch.compile, no hand-written kernels (``--path compiled``).

What a skilled PyTorch user writes before writing kernels: the yardstick every fast path must beat
(utils/gpu_check.sh fastpath times it beside them), and what students can hold their kernels against
(``TORCH_LOGS=output_code`` prints the Triton kernels the compiler writes). It runs:

  - model.py's modules and weights: its encoder and decoder layers, unchanged;
  - cuBLAS through F.linear and F.scaled_dot_product_attention (the flash backend where it applies: the
    encoder's unmasked bf16 windows);
  - a static, preallocated KV cache (engine.DecodeState), written at slots that a device counter gives,
    so every decode step launches the same kernels;
  - the prompt phase and each decode step captured once as a CUDA graph and replayed (engine.GreedyModel);
  - on a GPU, each encoder and each decoder layer compiled by torch.compile in its default mode (norms,
    RoPE and activations fused; GEMMs stay cuBLAS; the CUDA graphs are the engine's own). The layers of
    one kind share one compiled graph per input shape, so compiling costs one layer of each kind per
    shape. GLM_ASR_COMPILE_MODE=max-autotune-no-cudagraphs also autotunes Triton GEMM templates against
    cuBLAS: on an H100 (2026-11-26, docs/performance.md) that took over 300 s for the fp32 model alone,
    and cuBLAS won the table it finished (decode's 88 x 2048 x 6144: 0.089 ms, the best template 0.263).

On a CPU nothing is compiled and nothing is captured: inductor builds C++ for each shape (3.3 minutes
for the tiny checkpoint's first transcription on 2 cores, against 3 s eager). There the path runs
model.py's layers eagerly around the static cache and the engine's loop, which the tests hold to
transformers' ids (and trace once with dynamo, to show that each layer compiles as one graph). On a
GPU the first call compiles, autotunes and captures the graphs (fastpath.py reports it as
first_call_ms); later calls replay them. That first call is why this is not the folder's default
path, on a GPU either: ``./benchmark.sh glm_asr_scratch`` stays model.py, the reference to read.

Precision: as model.py's (torch_matmul_precision around every call). torch.compile recompiles when the
TF32 setting changes, so a tf32 model never runs an IEEE fp32 model's kernels or the reverse.
"""

import os

import torch

from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.engine import DecodeState, GreedyModel
from glm_asr_course.model.precision import Precision, torch_matmul_precision

from .model import DecoderLayer, EncoderLayer
from .model import load_model as load_modules

# torch.compile's options by device; None: run the layers as they are (see the module docstring).
COMPILE_OPTIONS = {"cuda": {"mode": "default"}, "cpu": None}


class CompiledGlmAsr(GreedyModel):
    """model.py's modules inside the engine's static cache, CUDA graphs and greedy loop."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str,
                 compile_options: dict | None):
        super().__init__(cfg, device, precision)
        self.net = load_modules(cfg, weights, self.device, self.precision)
        if compile_options is None:
            self.encoder_layer, self.decoder_layer = EncoderLayer.__call__, DecoderLayer.__call__
        else:
            # dynamic=False: the prompt and the decode step each get kernels of their own exact shapes.
            self.encoder_layer = torch.compile(EncoderLayer.forward, dynamic=False, **compile_options)
            self.decoder_layer = torch.compile(DecoderLayer.forward, dynamic=False, **compile_options)
        self.eos_columns = torch.zeros(cfg.decoder.vocab_size, dtype=torch.bool, device=self.device)
        self.eos_columns[self.eos_ids] = True

    def encode_audio(self, features: torch.Tensor) -> torch.Tensor:
        return self.net.encode_audio(features, self.encoder_layer)

    def project_audio(self, encoded: torch.Tensor) -> torch.Tensor:
        with torch_matmul_precision(self.precision):
            return self.net.project_audio(encoded)

    def embed(self, ids, audio_rows, audio_index):
        """Token embeddings, each row whose audio_index is ≥ 0 replaced by that audio row: no host sync."""
        rows = self.net.decoder.embed_tokens(ids)
        if audio_rows.shape[0] == 0:  # a decode step: text only
            return rows
        return torch.where((audio_index >= 0)[:, None], audio_rows[audio_index.clamp(min=0)], rows)

    def decoder_layers(self, x, state: DecodeState, tokens: int, decode: bool):
        """x (batch·tokens, hidden) in cache slots cache_pos … cache_pos + tokens − 1 → model.py's decoder,
        its final norm included. A decode step attends over the whole cache (shapes that never change);
        the prompt, in slots 0 … tokens − 1, over those slots alone."""
        if decode:
            cache = state.k_cache, state.v_cache
        else:
            cache = [k[:, :, :tokens] for k in state.k_cache], [v[:, :, :tokens] for v in state.v_cache]
        slots = state.cache_pos.long() + torch.arange(tokens, device=self.device)
        hidden = self.net.decoder(x.view(state.batch, tokens, -1), slots, state.kv_start.long(), cache,
                                  self.decoder_layer)
        return hidden.view(state.batch * tokens, -1)

    def logits(self, hidden):
        return self.net.decoder.lm_head(hidden)  # the final norm is the decoder's

    def greedy_head(self, last_hidden, state: DecodeState):
        banned = self.eos_columns & state.ban_eos.bool()
        state.token_ids.copy_(self.logits(last_hidden).float().masked_fill(banned, float("-inf")).argmax(-1))

    def prefill_logits(self, inputs):
        with torch_matmul_precision(self.precision):
            return super().prefill_logits(inputs)

    def generate(self, inputs, max_new_tokens: int, min_new_tokens: int = 0, on_token=None):
        with torch_matmul_precision(self.precision):
            return super().generate(inputs, max_new_tokens, min_new_tokens, on_token)


def load_model(cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str, *,
               compile_options: dict | None | str = "by device") -> CompiledGlmAsr:
    """compile_options: torch.compile's keywords (e.g. {"backend": "eager"} to trace without inductor),
    None for none, or COMPILE_OPTIONS of the device."""
    if compile_options == "by device":
        compile_options = COMPILE_OPTIONS[torch.device(device).type]
        if compile_options is not None and os.environ.get("GLM_ASR_COMPILE_MODE"):
            compile_options = dict(compile_options, mode=os.environ["GLM_ASR_COMPILE_MODE"])
    return CompiledGlmAsr(cfg, weights, device, precision, compile_options)
