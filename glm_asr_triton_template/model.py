# Generated from glm_asr_triton_example/ by utils/make_template.py. Your copy: fill in the TODO kernels.
"""GLM-ASR with every numeric operation of the forward pass a Triton kernel.

Torch only allocates, views, copies inputs in and launches (tests/test_triton_forward_ops.py checks it).
Read top to bottom:

  encode_audio    conv1d+GELU ×2 (implicit GEMM, time-major out) → 32 × [LayerNorm → fused QKV GEMM
                  (+bias) → RoPE on q,k (first half of each head) → flash attention (non-causal, the
                  whole 30 s window) → O GEMM (+bias +residual) → LayerNorm → FC1 (+bias, GELU) →
                  FC2 (+bias +residual)] → LayerNorm
  project_audio   merge 4 frames (a view) → GEMM (+bias, GELU) → GEMM (+bias)
  decoder         embedding gather with audio rows replacing the placeholders → 28 × [RMSNorm → fused
                  QKV GEMM → RoPE + KV-cache write → attention (causal flash for the prompt, split-K
                  flash-decoding for one new token) → O GEMM (+residual) → RMSNorm → fused gate/up
                  GEMM with SwiGLU → down GEMM (+residual)] → RMSNorm + lm_head + argmax fused.
                  For one token (decode, batch 1) a layer is 5 kernels: RMSNorm → q|k|v GEMV → RoPE
                  → cache write in one, attention, O (+residual), RMSNorm → gate|up, and SwiGLU →
                  down (+residual): each RMSNorm and the SwiGLU run in the next GEMV's prologue.
  generate        the prompt phase (encoder → first token) once, then one decode step per token. On
                  CUDA both are CUDA graphs, captured on first use and replayed: the prompt phase
                  per input shape, the decode step per batch and cache size, its inputs (token,
                  cache position, eos ban) living on the device. Launched from Python one by one,
                  the ~300 kernels of the prompt phase would keep the GPU waiting on the host.
"""

from dataclasses import dataclass

import numpy as np
import torch

from glm_asr_common.config import ModelConfig
from glm_asr_common.frontend import ASRInputs
from glm_asr_common.generation import GreedyStopper
from glm_asr_common.profiling import region

from .attention import decode_attention, flash_attention
from .conv import conv1d_gelu
from .layers import embed_tokens, greedy_head, layernorm, linear, llama_mlp, lm_head_logits, rmsnorm
from .rope import apply_rope, project_qkv_into_cache, rope_tables
from .weight_loader import load_weights

# Cache lengths are rounded up to this so repeated transcriptions reuse one cache and one CUDA graph.
CACHE_GRANULE = 256


@dataclass
class PromptBuffers:
    """One batch's inputs on the device: fresh each eager call, static inside a captured prompt graph."""

    features: torch.Tensor  # (windows, mels, frames) in the model dtype
    ids: torch.Tensor  # (batch · prompt_len,) int64
    audio_index: torch.Tensor  # (batch · prompt_len,) int64, −1 for text tokens


class DecodeState:
    """Static buffers of one (batch, cache length): the KV cache and the decode step's inputs/outputs."""

    def __init__(self, cfg: ModelConfig, batch: int, cache_len: int, device, dtype):
        d = cfg.decoder
        shape = (batch, d.num_kv_heads, cache_len, d.head_dim)
        self.k_cache = [torch.empty(shape, device=device, dtype=dtype) for _ in range(d.num_layers)]
        self.v_cache = [torch.empty(shape, device=device, dtype=dtype) for _ in range(d.num_layers)]
        self.batch, self.cache_len = batch, cache_len
        self.token_ids = torch.zeros(batch, dtype=torch.int64, device=device)  # argmax writes, embed reads
        self.no_audio = torch.full((batch,), -1, dtype=torch.int64, device=device)
        self.kv_start = torch.zeros(batch, dtype=torch.int32, device=device)
        # [cache slot of the new token, valid cache length, ban eos]: one host→device copy per step.
        self.counters = torch.zeros(3, dtype=torch.int32, device=device)
        self.cache_pos, self.valid_len, self.ban_eos = (self.counters[i:i + 1] for i in range(3))
        self.graph = None  # the decode step
        self.prompt_graphs = {}  # (features shape, ids shape) → (PromptBuffers, graph) of the prompt phase

    def set_counters(self, cache_pos: int, valid_len: int, ban_eos: bool):
        self.counters.copy_(torch.tensor([cache_pos, valid_len, int(ban_eos)], dtype=torch.int32))


class TritonGlmAsr:
    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device, dtype):
        self.cfg, self.device, self.dtype = cfg, torch.device(device), dtype
        self.w = load_weights(cfg, weights, self.device, dtype)
        e, d = cfg.encoder, cfg.decoder
        self.enc_cos, self.enc_sin = rope_tables(e.max_positions, e.rotary_dim, e.rope_theta, self.device)
        self.dec_cos, self.dec_sin = rope_tables(d.max_positions, d.rotary_dim, d.rope_theta, self.device)
        self.enc_positions = torch.arange(e.max_positions, dtype=torch.int32, device=self.device)
        self.eos_ids = torch.tensor(cfg.eos_token_ids, dtype=torch.int64, device=self.device)
        self.no_audio_rows = torch.empty((0, d.hidden_size), dtype=dtype, device=self.device)
        self.state: DecodeState | None = None
        self.use_cuda_graph = True  # profilers switch it off to see per-layer kernels of a decode step

    # ---- audio encoder ------------------------------------------------------------------------
    @torch.inference_mode()
    @region("encoder")
    def encode_audio(self, features: torch.Tensor) -> torch.Tensor:
        """(windows, mels, frames) log-mel → (windows, frames/2, hidden) after the final LayerNorm."""
        w = self.w
        features = features.to(self.device, self.dtype)
        with region("encoder.conv"):
            h = conv1d_gelu(features, w.conv1_weight, w.conv1_bias, stride=1)
            x = conv1d_gelu(h.transpose(1, 2), w.conv2_weight, w.conv2_bias, stride=2)
        windows, frames, hidden = x.shape
        x = x.view(windows * frames, hidden)
        for layer in w.encoder_layers:
            with region("encoder.layer"):
                x = self._encoder_layer(layer, x, windows, frames)
        with region("encoder.norm"):
            x = layernorm(x, w.encoder_norm_weight, w.encoder_norm_bias, self.cfg.encoder.layer_norm_eps)
        return x.view(windows, frames, hidden)

    def _encoder_layer(self, layer, x, windows: int, frames: int):
        e = self.cfg.encoder
        heads, head_dim = e.num_heads, e.head_dim
        h = layernorm(x, layer.ln1_weight, layer.ln1_bias, e.layer_norm_eps)
        qkv = linear(h, layer.qkv_weight, layer.qkv_bias).view(windows, frames, 3 * heads, head_dim)
        apply_rope(qkv[:, :, : 2 * heads], self.enc_cos, self.enc_sin, self.enc_positions[:frames], e.rotary_dim)
        q, k, v = qkv[:, :, :heads], qkv[:, :, heads:2 * heads], qkv[:, :, 2 * heads:]
        attn = flash_attention(q, k, v, head_dim ** -0.5, causal=False)
        x = linear(attn.view(windows * frames, -1), layer.o_weight, layer.o_bias, residual=x, out=x)
        h = layernorm(x, layer.ln2_weight, layer.ln2_bias, e.layer_norm_eps)
        h = linear(h, layer.fc1_weight, layer.fc1_bias, activation="gelu")
        return linear(h, layer.fc2_weight, layer.fc2_bias, residual=x, out=x)

    @torch.inference_mode()
    def project_audio(self, encoded: torch.Tensor) -> torch.Tensor:
        """Concatenate each 4 consecutive frames (a free view), then Linear·GELU·Linear."""
        windows, frames, _ = encoded.shape
        merged = encoded.reshape(windows * frames // self.cfg.merge_factor, self.cfg.encoder.intermediate_size)
        with region("projector"):
            h = linear(merged, self.w.projector_1_weight, self.w.projector_1_bias, activation="gelu")
            out = linear(h, self.w.projector_2_weight, self.w.projector_2_bias)
        return out.view(windows, frames // self.cfg.merge_factor, -1)

    # ---- text decoder -------------------------------------------------------------------------
    def _decoder_layers(self, x, state: DecodeState, tokens: int, decode: bool):
        """x (batch·tokens, hidden) holds cache slots cache_pos … cache_pos + tokens − 1."""
        d = self.cfg.decoder
        q = torch.empty((state.batch, tokens, d.num_heads, d.head_dim), dtype=self.dtype, device=self.device)
        for layer, k_cache, v_cache in zip(self.w.decoder_layers, state.k_cache, state.v_cache):
            with region("decoder.layer"):
                project_qkv_into_cache(x, layer.qkv_weight, layer.ln1_weight, d.rms_norm_eps, d.num_heads,
                                       d.num_kv_heads, d.head_dim, self.dec_cos, self.dec_sin, d.rotary_dim,
                                       q, k_cache, v_cache, state.cache_pos, state.kv_start)
                if decode:
                    attn = decode_attention(q, k_cache, v_cache, state.valid_len, state.kv_start, d.head_dim ** -0.5)
                else:
                    attn = flash_attention(q, k_cache, v_cache, d.head_dim ** -0.5, causal=True,
                                           kv_start=state.kv_start, kv_layout="bhtd")
                x = linear(attn.view(state.batch * tokens, -1), layer.o_weight, residual=x, out=x)
                x = llama_mlp(x, layer.ln2_weight, d.rms_norm_eps, layer.gate_up_weight, layer.down_weight)
        return x

    def _upload(self, inputs: ASRInputs) -> PromptBuffers:
        return PromptBuffers(
            features=torch.from_numpy(inputs.input_features).to(self.device, self.dtype),
            ids=torch.from_numpy(inputs.input_ids.reshape(-1)).to(self.device),
            audio_index=torch.from_numpy(inputs.audio_index.reshape(-1)).to(self.device),
        )

    def _prompt_forward(self, prompt: PromptBuffers, state: DecodeState, batch: int, prompt_len: int):
        """Device work only (so it can be captured): audio → embeddings → decoder over the prompt."""
        audio = self.project_audio(self.encode_audio(prompt.features))
        with region("decoder.embed"):
            x = embed_tokens(prompt.ids, self.w.embed_tokens, audio.view(-1, audio.shape[-1]), prompt.audio_index)
        return self._decoder_layers(x, state, prompt_len, decode=False).view(batch, prompt_len, -1)

    def _state_for(self, batch: int, length: int) -> DecodeState:
        cache_len = -(-length // CACHE_GRANULE) * CACHE_GRANULE
        if self.state is None or self.state.batch != batch or self.state.cache_len < cache_len:
            self.state = DecodeState(self.cfg, batch, cache_len, self.device, self.dtype)
        return self.state

    @staticmethod
    def _set_prompt(inputs: ASRInputs, state: DecodeState, ban_eos: bool):
        state.kv_start.copy_(torch.from_numpy(inputs.pad_lengths.astype(np.int32)))
        state.set_counters(0, inputs.input_ids.shape[1], ban_eos)

    @torch.inference_mode()
    def prefill_logits(self, inputs: ASRInputs) -> torch.Tensor:
        """Logits at every prompt position (batch, prompt_len, vocab)."""
        batch, prompt_len = inputs.input_ids.shape
        state = self._state_for(batch, prompt_len)
        self._set_prompt(inputs, state, ban_eos=False)
        x = self._prompt_forward(self._upload(inputs), state, batch, prompt_len)
        with region("decoder.head"):
            normed = rmsnorm(x.view(batch * prompt_len, -1), self.w.decoder_norm_weight, self.cfg.decoder.rms_norm_eps)
            return lm_head_logits(normed, self.w.lm_head).view(batch, prompt_len, -1)

    def _first_token(self, prompt: PromptBuffers, state: DecodeState, batch: int, prompt_len: int):
        """The whole prompt phase: encoder, projector, prefill, and the first greedy id into state.token_ids."""
        self._greedy_head(self._prompt_forward(prompt, state, batch, prompt_len)[:, -1], state)

    def _decode_step(self, state: DecodeState):
        """One new token for every row: reads state.token_ids and the counters, overwrites token_ids."""
        with region("decoder.embed"):
            x = embed_tokens(state.token_ids, self.w.embed_tokens, self.no_audio_rows, state.no_audio)
        x = self._decoder_layers(x, state, 1, decode=True)
        self._greedy_head(x, state)

    def _greedy_head(self, last_hidden, state: DecodeState):
        with region("decoder.head"):
            greedy_head(last_hidden, self.w.decoder_norm_weight, self.cfg.decoder.rms_norm_eps, self.w.lm_head,
                        self.eos_ids, state.ban_eos, state.token_ids)

    @staticmethod
    def _capture(work) -> torch.cuda.CUDAGraph:
        """Run ``work`` once on a side stream (Triton compiles there, outside capture), then record it."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            work()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            work()
        return graph

    def _run_prompt(self, inputs: ASRInputs, state: DecodeState, ban_eos: bool):
        """Prompt phase, eagerly or (CUDA) as one graph per input shape: Python launches ~300 kernels
        here, and at tens of microseconds each the GPU would otherwise wait on the host."""
        batch, prompt_len = inputs.input_ids.shape
        self._set_prompt(inputs, state, ban_eos)
        if not (self.use_cuda_graph and self.device.type == "cuda"):
            self._first_token(self._upload(inputs), state, batch, prompt_len)
            return
        key = (inputs.input_features.shape, inputs.input_ids.shape)
        if key not in state.prompt_graphs:
            prompt = self._upload(inputs)
            graph = self._capture(lambda: self._first_token(prompt, state, batch, prompt_len))
            state.prompt_graphs[key] = (prompt, graph)
        prompt, graph = state.prompt_graphs[key]
        prompt.features.copy_(torch.from_numpy(inputs.input_features))
        prompt.ids.copy_(torch.from_numpy(inputs.input_ids.reshape(-1)))
        prompt.audio_index.copy_(torch.from_numpy(inputs.audio_index.reshape(-1)))
        graph.replay()

    @torch.inference_mode()
    def generate(self, inputs: ASRInputs, max_new_tokens: int, min_new_tokens: int = 0) -> list[list[int]]:
        stop = GreedyStopper(inputs.batch_size, self.cfg.eos_token_ids, max_new_tokens, min_new_tokens)
        batch, prompt_len = inputs.input_ids.shape
        state = self._state_for(batch, prompt_len + max_new_tokens)
        if self.use_cuda_graph and self.device.type == "cuda" and state.graph is None:
            # Scratch counters: the step writes cache slot 0, which the prefill below overwrites.
            state.set_counters(0, 1, False)
            state.graph = self._capture(lambda: self._decode_step(state))
        with region("decoder.prefill"):
            self._run_prompt(inputs, state, stop.ban_eos())
        while not stop.add(state.token_ids.tolist()):
            slot = prompt_len + stop.steps_taken - 1
            with region("decoder.step"):
                state.set_counters(slot, slot + 1, stop.ban_eos())
                if self.use_cuda_graph and state.graph is not None:
                    state.graph.replay()
                else:
                    self._decode_step(state)
        return stop.tokens


def load_model(cfg: ModelConfig, weights: dict[str, torch.Tensor], device, dtype) -> TritonGlmAsr:
    return TritonGlmAsr(cfg, weights, device, dtype)
