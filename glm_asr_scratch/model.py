"""GLM-ASR in plain PyTorch: the reference every kernel track is checked against.

Read top to bottom: audio encoder (conv stem + pre-norm transformer with partial RoPE), 4-frame merge
+ projector, Llama decoder with a static KV cache, and the greedy generation loop.

  features (windows, mels, 3000) ─ conv1+GELU ─ conv2(stride 2)+GELU ─ 32 × [LN → attn → LN → MLP] ─ LN
      → (windows, 1500, 1280) ─ merge 4 frames → (windows, 375, 5120) ─ Linear·GELU·Linear → (…, 2048)
  prompt ids ─ embed, audio placeholders replaced by those rows ─ 28 × [RMSNorm → GQA attn → RMSNorm → SwiGLU]
      ─ RMSNorm ─ lm_head ─ argmax → next id, appended to a static KV cache, repeated until eos.

compiled_model.py (``--path compiled``) runs these same layers compiled by torch.compile, each decode
step one CUDA graph: the best PyTorch without hand-written kernels, the fast paths' yardstick.
"""

import torch
import torch.nn.functional as F
from torch import nn

from glm_asr_course.model.config import DecoderConfig, EncoderConfig, ModelConfig
from glm_asr_course.model.frontend import ASRInputs
from glm_asr_course.model.generation import GreedyStopper
from glm_asr_course.model.precision import Precision, get_precision, torch_matmul_precision
from glm_asr_course.model.regions import region


def rope_tables(positions: int, rotary_dim: int, theta: float, device="cpu"):
    """cos/sin of shape (positions, rotary_dim), in fp32, laid out for rotate-half (each angle twice)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=device) / rotary_dim))
    angles = torch.arange(positions, dtype=torch.float32, device=device)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate the first cos.shape[-1] channels of every head (rotate-half pairing); leave the rest."""
    rot, rest = x[..., : cos.shape[-1]], x[..., cos.shape[-1]:]
    half = rot.shape[-1] // 2
    rotated_half = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    return torch.cat([rot * cos + rotated_half * sin, rest], dim=-1)


class EncoderLayer(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.c = c
        width = c.num_heads * c.head_dim
        self.input_layernorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.q_proj = nn.Linear(c.hidden_size, width)
        self.k_proj = nn.Linear(c.hidden_size, width, bias=False)  # Whisper's k_proj has no bias
        self.v_proj = nn.Linear(c.hidden_size, width)
        self.o_proj = nn.Linear(width, c.hidden_size)
        self.post_attention_layernorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.fc1 = nn.Linear(c.hidden_size, c.intermediate_size)
        self.fc2 = nn.Linear(c.intermediate_size, c.hidden_size)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        heads = lambda y: y.view(b, t, self.c.num_heads, self.c.head_dim).transpose(1, 2)
        q = apply_rope(heads(self.q_proj(h)), cos, sin)
        k = apply_rope(heads(self.k_proj(h)), cos, sin)
        # No mask: the encoder attends over the whole zero-padded 30 s window, as the model was trained.
        attn = F.scaled_dot_product_attention(q, k, heads(self.v_proj(h)))
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, t, -1))
        return x + self.fc2(F.gelu(self.fc1(self.post_attention_layernorm(x))))


class AudioEncoder(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.conv1 = nn.Conv1d(c.num_mel_bins, c.hidden_size, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(c.hidden_size, c.hidden_size, kernel_size=3, stride=2, padding=1)
        self.layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.num_layers))
        self.norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        # fp32 tables kept outside the module's buffers so .to(dtype) never rounds them; load_model moves them.
        self.cos, self.sin = rope_tables(c.max_positions, c.rotary_dim, c.rope_theta)

    def forward(self, features, run_layer=EncoderLayer.__call__):
        """(windows, mels, frames) → (windows, frames/2, hidden); run_layer(layer, x, cos, sin) runs each
        layer (compiled_model.py passes it compiled)."""
        with region("encoder.conv"):
            x = F.gelu(self.conv2(F.gelu(self.conv1(features)))).transpose(1, 2)
        cos, sin = self.cos[: x.shape[1]].to(x.dtype), self.sin[: x.shape[1]].to(x.dtype)
        for layer in self.layers:
            with region("encoder.layer"):
                x = run_layer(layer, x, cos, sin)
        with region("encoder.norm"):
            return self.norm(x)


class Projector(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.linear_1 = nn.Linear(cfg.encoder.intermediate_size, cfg.projector_hidden_size)
        self.linear_2 = nn.Linear(cfg.projector_hidden_size, cfg.decoder.hidden_size)

    def forward(self, x):
        with region("projector"):
            return self.linear_2(F.gelu(self.linear_1(x)))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # Normalise in fp32, round back to the input dtype, then scale (Llama's order of rounding).
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class DecoderLayer(nn.Module):
    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.c = c
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.q_proj = nn.Linear(c.hidden_size, c.num_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=False)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x, cos, sin, key_mask, slots, k_cache, v_cache):
        """x (B, T, H) holds the cache slots ``slots`` (T,): its keys and values are written there, then
        attended over the whole of k_cache / v_cache (B, Hkv, keys, D) as key_mask (B, 1, T, keys) allows."""
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        heads = lambda y: y.view(b, t, -1, self.c.head_dim).transpose(1, 2)
        q = apply_rope(heads(self.q_proj(h)), cos, sin)
        # Slots as a device tensor: the same launches whichever step it is (one CUDA graph serves all).
        k_cache[:, :, slots] = apply_rope(heads(self.k_proj(h)), cos, sin)
        v_cache[:, :, slots] = heads(self.v_proj(h))
        attn = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=key_mask, enable_gqa=True)
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, t, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class TextDecoder(nn.Module):
    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        # fp32 tables kept outside the module's buffers so .to(dtype) never rounds them; load_model moves them.
        self.cos, self.sin = rope_tables(c.max_positions, c.rotary_dim, c.rope_theta)

    def new_cache(self, batch: int, length: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Zeroed keys and values of every layer, (batch, kv heads, length, head_dim) each."""
        c, p = self.c, self.embed_tokens.weight
        shape = (batch, c.num_kv_heads, length, c.head_dim)
        zeros = lambda: [torch.zeros(shape, dtype=p.dtype, device=p.device) for _ in self.layers]
        return zeros(), zeros()

    def rope_and_mask(self, slots, pad, keys: int, dtype):
        """cos, sin (B, 1, T, rotary) of the new tokens in cache slots ``slots`` (T,) of left-padded rows
        (pad (B,)), and the mask (B, 1, T, keys) of the cache slots each one sees."""
        positions = (slots[None, :] - pad[:, None]).clamp(min=0)  # real tokens count from 0
        cos, sin = self.cos[positions][:, None].to(dtype), self.sin[positions][:, None].to(dtype)
        key = torch.arange(keys, device=slots.device)[None, None, :]
        query = slots[None, :, None]
        visible = (key <= query) & (key >= pad[:, None, None])
        visible |= key == query  # a pad row sees itself: no empty softmax
        return cos, sin, visible[:, None]

    def forward(self, x, slots, pad, cache, run_layer=DecoderLayer.__call__):
        """Run the T new positions x (B, T, H), cache slots ``slots`` (T,), of rows left-padded by pad
        (B,) over cache = (keys, values) of new_cache; returns the normed hidden states.
        run_layer(layer, x, cos, sin, mask, slots, k, v) runs each layer (compiled_model.py: compiled)."""
        k_caches, v_caches = cache
        cos, sin, visible = self.rope_and_mask(slots, pad, k_caches[0].shape[2], x.dtype)
        for layer, k_cache, v_cache in zip(self.layers, k_caches, v_caches):
            with region("decoder.layer"):
                x = run_layer(layer, x, cos, sin, visible, slots, k_cache, v_cache)
        with region("decoder.head"):
            return self.norm(x)


class GlmAsr(nn.Module):
    def __init__(self, cfg: ModelConfig, precision: Precision):
        super().__init__()
        self.cfg, self.precision = cfg, precision
        self.encoder = AudioEncoder(cfg.encoder)
        self.projector = Projector(cfg)
        self.decoder = TextDecoder(cfg.decoder)

    @property
    def device(self):
        return self.decoder.embed_tokens.weight.device

    def slots(self, first: int, count: int) -> torch.Tensor:
        """Cache slots first … first + count − 1, on the device."""
        return torch.arange(first, first + count, device=self.device)

    @region("encoder")
    def encode_audio(self, features: torch.Tensor, run_layer=EncoderLayer.__call__) -> torch.Tensor:
        with torch_matmul_precision(self.precision):
            return self.encoder(features.to(self.device, self.precision.dtype), run_layer)

    def project_audio(self, encoded: torch.Tensor) -> torch.Tensor:
        windows, frames, _ = encoded.shape
        merged = encoded.reshape(windows, frames // self.cfg.merge_factor, self.cfg.encoder.intermediate_size)
        return self.projector(merged)

    def embed_prompt(self, inputs: ASRInputs) -> torch.Tensor:
        """Token embeddings with every audio placeholder replaced by its projected audio row."""
        audio = self.project_audio(self.encode_audio(torch.from_numpy(inputs.input_features)))
        audio = audio.reshape(-1, audio.shape[-1])
        ids = torch.from_numpy(inputs.input_ids).to(self.device)
        index = torch.from_numpy(inputs.audio_index).to(self.device)
        with region("decoder.embed"):
            x = self.decoder.embed_tokens(ids)
            x[index >= 0] = audio[index[index >= 0]]
        return x

    def prefill_logits(self, inputs: ASRInputs) -> torch.Tensor:
        """Logits at every prompt position (B, T, vocab): what the parity tests compare."""
        with torch_matmul_precision(self.precision):
            x = self.embed_prompt(inputs)
            cache = self.decoder.new_cache(x.shape[0], x.shape[1])
            pad = torch.from_numpy(inputs.pad_lengths).to(self.device)
            return self.decoder.lm_head(self.decoder(x, self.slots(0, x.shape[1]), pad, cache))

    def _next_ids(self, hidden, ban_eos: bool):
        with region("decoder.head"):
            logits = self.decoder.lm_head(hidden).float()
            if ban_eos:
                logits[:, list(self.cfg.eos_token_ids)] = float("-inf")
            return logits.argmax(-1)

    @torch.inference_mode()
    def generate(self, inputs: ASRInputs, max_new_tokens: int, min_new_tokens: int = 0,
                 on_token=None) -> list[list[int]]:
        """Greedy ids per row; on_token(new ids, one per row) after every step."""
        stop = GreedyStopper(inputs.batch_size, self.cfg.eos_token_ids, max_new_tokens, min_new_tokens)
        with torch_matmul_precision(self.precision):
            x = self.embed_prompt(inputs)
            batch, prompt_len = x.shape[:2]
            cache = self.decoder.new_cache(batch, prompt_len + max_new_tokens)
            pad = torch.from_numpy(inputs.pad_lengths).to(self.device)
            with region("decoder.prefill"):
                next_ids = self._next_ids(self.decoder(x, self.slots(0, prompt_len), pad, cache)[:, -1],
                                          stop.ban_eos())
            while True:
                new_ids = next_ids.tolist()
                if on_token is not None:
                    on_token(new_ids)
                if stop.add(new_ids):
                    return stop.tokens
                with region("decoder.step"):
                    with region("decoder.embed"):
                        x = self.decoder.embed_tokens(next_ids)[:, None]
                    hidden = self.decoder(x, self.slots(prompt_len + stop.steps_taken - 1, 1), pad, cache)
                    next_ids = self._next_ids(hidden[:, -1], stop.ban_eos())


def load_model(cfg: ModelConfig, weights: dict[str, torch.Tensor], device: str, precision: Precision | str) -> GlmAsr:
    from .weight_loader import state_dict_for

    precision = get_precision(precision)
    with torch.device("meta"):
        model = GlmAsr(cfg, precision)
    model.load_state_dict(state_dict_for(weights), assign=True, strict=True)
    model = model.to(device=device, dtype=precision.dtype)
    for module in (model.encoder, model.decoder):
        module.cos, module.sin = module.cos.to(device), module.sin.to(device)
    return model.eval()
