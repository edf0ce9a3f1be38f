"""What every kernel track's model needs besides its arithmetic: device buffers, the KV cache, CUDA
graphs and the greedy loop.

A track's model subclasses ``GreedyModel`` and writes the forward pass in a handful of methods:

    encode_audio(features)              (windows, mels, frames) -> (windows, frames/2, hidden)
    project_audio(encoded)              -> (windows, frames/2/merge, decoder hidden)
    embed(ids, audio_rows, audio_index) token embeddings, audio placeholders replaced by audio rows
    decoder_layers(x, state, tokens, decode)
                                        the decoder over ``tokens`` new positions per row, reading and
                                        writing state's KV cache at slots cache_pos ... (device counters)
    logits(hidden)                      final norm + lm_head, (rows, vocab)
    greedy_head(last_hidden, state)     the next id of every row into state.token_ids (eos banned
                                        while state.ban_eos is set)

and this class does the rest: inputs to the device, a KV cache sized in granules, the prompt phase
(encoder -> first token) and the decode step each captured once as a CUDA graph and replayed, the
stopping rules (glm_asr_course.model.generation) and streaming each new token to a callback. Everything a
graph reads lives on the device, so a replay needs only a few bytes copied in: the inputs of the
prompt, or the decode step's counters.
On a GPU each decode step is queued before the host reads the token of the step before (``launch_ahead``;
docs/performance.md, 2026-11-27 h). A transcription that stops at an eos wastes the step queued ahead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.frontend import ASRInputs
from glm_asr_course.model.generation import GreedyStopper
from glm_asr_course.model.precision import Precision, get_precision
from glm_asr_course.model.regions import region

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
        # Zeros, not garbage: attention that reads every slot up to cache_len and masks the dead ones
        # multiplies their values by a probability of 0, and 0 * NaN would still be NaN.
        self.k_cache = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(d.num_layers)]
        self.v_cache = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(d.num_layers)]
        self.batch, self.cache_len = batch, cache_len
        self.token_ids = torch.zeros(batch, dtype=torch.int64, device=device)  # the head writes, embed reads
        self.no_audio = torch.full((batch,), -1, dtype=torch.int64, device=device)
        self.kv_start = torch.zeros(batch, dtype=torch.int32, device=device)  # left padding of each row
        # [cache slot of the first new token, valid cache length, ban eos]: one host→device copy per step.
        self.counters = torch.zeros(3, dtype=torch.int32, device=device)
        self.cache_pos, self.valid_len, self.ban_eos = (self.counters[i:i + 1] for i in range(3))
        self.graph = None  # the decode step
        self.prompt_graphs = {}  # (features shape, ids shape) → (PromptBuffers, graph) of the prompt phase
        cuda = torch.device(device).type == "cuda"
        # Each step's ids land on the host in one of two pinned buffers, in turn, with an event (launch_ahead).
        self.host_ids = [torch.empty(batch, dtype=torch.int64, pin_memory=cuda) for _ in range(2)]
        self.ids_landed = [torch.cuda.Event() if cuda else None for _ in range(2)]

    def set_counters(self, cache_pos: int, valid_len: int, ban_eos: bool):
        self.counters.copy_(torch.tensor([cache_pos, valid_len, int(ban_eos)], dtype=torch.int32))


def capture_graph(work) -> torch.cuda.CUDAGraph:
    """Run ``work`` once on a side stream (kernels compile there, outside capture), then record it."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        work()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    return graph


class GreedyModel:
    """Greedy transcription around a track's forward pass (see the module docstring)."""

    def __init__(self, cfg: ModelConfig, device, precision: Precision | str):
        self.cfg, self.device = cfg, torch.device(device)
        self.precision = get_precision(precision)
        self.dtype = self.precision.dtype
        self.eos_ids = torch.tensor(cfg.eos_token_ids, dtype=torch.int64, device=self.device)
        self.no_audio_rows = torch.empty((0, cfg.decoder.hidden_size), dtype=self.dtype, device=self.device)
        self.state: DecodeState | None = None
        # Profilers switch graphs off to see each kernel in its region; a track whose launches cannot
        # be captured switches them off for good.
        self.use_cuda_graph = True
        # Off on a CPU, where a step runs as it is called: a wasted step would cost its whole time.
        self.launch_ahead = self.device.type == "cuda"

    # ---- the forward pass: a track's model.py defines these -----------------------------------
    def encode_audio(self, features: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def project_audio(self, encoded: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def embed(self, ids: torch.Tensor, audio_rows: torch.Tensor, audio_index: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def decoder_layers(self, x: torch.Tensor, state: DecodeState, tokens: int, decode: bool) -> torch.Tensor:
        raise NotImplementedError

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def greedy_head(self, last_hidden: torch.Tensor, state: DecodeState) -> None:
        raise NotImplementedError

    # ---- the prompt phase and the decode step, as device work only (capturable) ---------------
    def _graphs_on(self) -> bool:
        return self.use_cuda_graph and self.device.type == "cuda"

    def _upload(self, inputs: ASRInputs) -> PromptBuffers:
        return PromptBuffers(
            features=torch.from_numpy(inputs.input_features).to(self.device, self.dtype),
            ids=torch.from_numpy(inputs.input_ids.reshape(-1)).to(self.device),
            audio_index=torch.from_numpy(inputs.audio_index.reshape(-1)).to(self.device),
        )

    def _prompt_forward(self, prompt: PromptBuffers, state: DecodeState, batch: int, prompt_len: int):
        """Audio → embeddings → decoder over the prompt: (batch, prompt_len, hidden)."""
        audio = self.project_audio(self.encode_audio(prompt.features))
        with region("decoder.embed"):
            x = self.embed(prompt.ids, audio.reshape(-1, audio.shape[-1]), prompt.audio_index)
        return self.decoder_layers(x, state, prompt_len, decode=False).view(batch, prompt_len, -1)

    def _first_token(self, prompt: PromptBuffers, state: DecodeState, batch: int, prompt_len: int):
        last = self._prompt_forward(prompt, state, batch, prompt_len)[:, -1]
        with region("decoder.head"):
            self.greedy_head(last, state)

    def _decode_step(self, state: DecodeState):
        """One new token for every row: reads state.token_ids and the counters, overwrites token_ids."""
        with region("decoder.embed"):
            x = self.embed(state.token_ids, self.no_audio_rows, state.no_audio)
        x = self.decoder_layers(x, state, 1, decode=True)
        with region("decoder.head"):
            self.greedy_head(x, state)

    def _state_for(self, batch: int, length: int) -> DecodeState:
        cache_len = -(-length // CACHE_GRANULE) * CACHE_GRANULE
        if self.state is None or self.state.batch != batch or self.state.cache_len < cache_len:
            if self.state is not None and self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # a step queued ahead may still run in the old state's graph
            self.state = DecodeState(self.cfg, batch, cache_len, self.device, self.dtype)
        return self.state

    @staticmethod
    def _set_prompt(inputs: ASRInputs, state: DecodeState, ban_eos: bool):
        state.kv_start.copy_(torch.from_numpy(inputs.pad_lengths.astype(np.int32)))
        state.set_counters(0, inputs.input_ids.shape[1], ban_eos)

    def _run_prompt(self, inputs: ASRInputs, state: DecodeState, ban_eos: bool):
        """The prompt phase, eagerly or (CUDA) as one graph per input shape: launched from Python one
        by one, its hundreds of kernels would keep the GPU waiting on the host."""
        batch, prompt_len = inputs.input_ids.shape
        self._set_prompt(inputs, state, ban_eos)
        if not self._graphs_on():
            self._first_token(self._upload(inputs), state, batch, prompt_len)
            return
        key = (inputs.input_features.shape, inputs.input_ids.shape)
        if key not in state.prompt_graphs:
            prompt = self._upload(inputs)
            graph = capture_graph(lambda: self._first_token(prompt, state, batch, prompt_len))
            state.prompt_graphs[key] = (prompt, graph)
        prompt, graph = state.prompt_graphs[key]
        prompt.features.copy_(torch.from_numpy(inputs.input_features))
        prompt.ids.copy_(torch.from_numpy(inputs.input_ids.reshape(-1)))
        prompt.audio_index.copy_(torch.from_numpy(inputs.audio_index.reshape(-1)))
        graph.replay()

    # ---- the public interface --------------------------------------------------------------------
    @torch.inference_mode()
    def prefill_logits(self, inputs: ASRInputs) -> torch.Tensor:
        """Logits at every prompt position (batch, prompt_len, vocab)."""
        batch, prompt_len = inputs.input_ids.shape
        state = self._state_for(batch, prompt_len)
        self._set_prompt(inputs, state, ban_eos=False)
        x = self._prompt_forward(self._upload(inputs), state, batch, prompt_len)
        with region("decoder.head"):
            return self.logits(x.reshape(batch * prompt_len, -1)).view(batch, prompt_len, -1)

    @torch.inference_mode()
    def generate(self, inputs: ASRInputs, max_new_tokens: int, min_new_tokens: int = 0,
                 on_token=None) -> list[list[int]]:
        """Greedy ids per row, as transformers' generate(do_sample=False) picks them.

        on_token: called after every step with the list of new ids (one per row), e.g. to show a
        transcript as it grows.
        """
        stop = GreedyStopper(inputs.batch_size, self.cfg.eos_token_ids, max_new_tokens, min_new_tokens)
        batch, prompt_len = inputs.input_ids.shape
        state = self._state_for(batch, prompt_len + max_new_tokens)
        if self._graphs_on() and state.graph is None:
            # Scratch counters: the step writes cache slot 0, which the prompt phase below overwrites.
            state.set_counters(0, 1, False)
            state.graph = capture_graph(lambda: self._decode_step(state))
        # Row n - 1: the counters of the step that makes token n from token n - 1, at slot prompt_len + n - 1.
        n = np.arange(1, max_new_tokens)
        counters = torch.from_numpy(np.stack([prompt_len + n - 1, prompt_len + n, n < stop.min_new_tokens], 1)
                                    .astype(np.int32)).to(self.device)
        with region("decoder.prefill"):
            self._run_prompt(inputs, state, stop.ban_eos())
        self._queue_ids(state, 0)
        queued = 1  # tokens whose computation is queued
        while True:
            if self.launch_ahead and queued < max_new_tokens:
                self._queue_step(state, counters, queued)
                queued += 1
            if state.ids_landed[stop.steps_taken % 2] is not None:
                state.ids_landed[stop.steps_taken % 2].synchronize()
            new_ids = state.host_ids[stop.steps_taken % 2].tolist()
            if on_token is not None:
                on_token(new_ids)
            if stop.add(new_ids):
                return stop.tokens
            if queued == stop.steps_taken:
                self._queue_step(state, counters, queued)
                queued += 1

    def _queue_step(self, state: DecodeState, counters: torch.Tensor, n: int):
        """Queue the decode step that computes token n, and the copy of that token to the host."""
        with region("decoder.step"):
            state.counters.copy_(counters[n - 1])
            if self._graphs_on() and state.graph is not None:
                state.graph.replay()
            else:
                self._decode_step(state)
        self._queue_ids(state, n)

    @staticmethod
    def _queue_ids(state: DecodeState, n: int):
        state.host_ids[n % 2].copy_(state.token_ids, non_blocking=True)
        if state.ids_landed[n % 2] is not None:
            state.ids_landed[n % 2].record()
