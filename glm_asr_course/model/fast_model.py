"""The fast paths' model: what both tracks' fast_model.py share around their fused kernels.

A track's ``FastGlmAsr`` subclasses ``FastPathModel`` and writes the launches that are its own, in
its kernels' conventions:

    conv_gelu(x, weight, bias, stride)      conv1d (kernel 3, padding 1) with the exact GELU fused,
                                            time-major out (B, T_out, C_out)
    fused_linear                            the track's GEMM launcher, the same keywords on both tracks:
                                            fused_linear(x, weight, bias, *, gelu, precision)
    _encoder_layer(layer, x, attn)          one encoder layer over the residual stream x, in place
    decoder_layers(x, state, tokens, decode)
    greedy_head(last_hidden, state)         (engine.GreedyModel's: the decoder and the fused head)

and this class does the rest, the same on both tracks: the packed weights and RoPE tables, the
encoder (conv stem → layers → LayerNorm), the projector, the embedding and the logits. The launchers
the fast paths share with the course path (LayerNorm, RMSNorm, RoPE tables, embedding, weight
packing) come from the track by name, as the course model takes them (course_model.TrackOps).
"""

import torch

from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.course_model import TrackOps
from glm_asr_course.model.engine import GreedyModel
from glm_asr_course.model.precision import Precision
from glm_asr_course.model.regions import region


class FastPathModel(GreedyModel):
    """GLM-ASR around a track's fused launches (see the module docstring)."""

    fused_linear = None  # the track's fast_linear.linear, as staticmethod(linear)

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str,
                 ops: TrackOps):
        super().__init__(cfg, device, precision)
        self.ops, self.dot = ops, self.precision.dot
        self.w = ops.load_weights(cfg, weights, self.device, self.dtype)
        e, d = cfg.encoder, cfg.decoder
        self.enc_cos, self.enc_sin = ops.rope_tables(e.max_positions, e.rotary_dim, e.rope_theta, self.device)
        self.dec_cos, self.dec_sin = ops.rope_tables(d.max_positions, d.rotary_dim, d.rope_theta, self.device)
        # Every window numbers its frames 0, 1, ...: one row of positions that all windows share.
        self.enc_positions = torch.arange(e.max_positions, dtype=torch.int32, device=self.device)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
               gelu: bool = False) -> torch.Tensor:
        """x @ weight^T (+ bias) (GELU) in the track's fused GEMM."""
        if self.fused_linear is None:
            raise NotImplementedError(f"{type(self).__name__} names no fused_linear")
        return self.fused_linear(x, weight, bias, gelu=gelu, precision=self.dot)

    # ---- the track's launches ------------------------------------------------------------------
    def conv_gelu(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, stride: int) -> torch.Tensor:
        raise NotImplementedError

    def _encoder_layer(self, layer, x: torch.Tensor, attn: torch.Tensor) -> None:
        raise NotImplementedError

    # ---- audio encoder ------------------------------------------------------------------------
    @torch.inference_mode()
    @region("encoder")
    def encode_audio(self, features: torch.Tensor) -> torch.Tensor:
        """(windows, mels, frames) log-mel → (windows, frames/2, hidden) after the final LayerNorm."""
        w, e = self.w, self.cfg.encoder
        features = features.to(self.device, self.dtype)
        with region("encoder.conv"):
            h = self.conv_gelu(features, w.conv1_weight, w.conv1_bias, 1)
            x = self.conv_gelu(h.transpose(1, 2), w.conv2_weight, w.conv2_bias, 2)
        windows, frames, hidden = x.shape
        x = x.view(windows * frames, hidden)
        # One attention output for all layers: each layer's o GEMM has read it before the next writes it.
        attn = torch.empty((windows, frames, e.num_heads, e.head_dim), dtype=self.dtype, device=self.device)
        for layer in w.encoder_layers:
            with region("encoder.layer"):
                self._encoder_layer(layer, x, attn)
        with region("encoder.norm"):
            normed = self.ops.layernorm(x, w.encoder_norm_weight, w.encoder_norm_bias, e.layer_norm_eps)
        return normed.view(windows, frames, hidden)

    @torch.inference_mode()
    def project_audio(self, encoded: torch.Tensor) -> torch.Tensor:
        """Concatenate each merge_factor consecutive frames (a free view), then Linear·GELU·Linear."""
        windows, frames, _ = encoded.shape
        merge = self.cfg.merge_factor
        merged = encoded.reshape(windows * frames // merge, self.cfg.encoder.intermediate_size)
        with region("projector"):
            h = self.linear(merged, self.w.projector_1_weight, self.w.projector_1_bias, gelu=True)
            projected = self.linear(h, self.w.projector_2_weight, self.w.projector_2_bias)
        return projected.view(windows, frames // merge, -1)

    # ---- text decoder -------------------------------------------------------------------------
    def embed(self, ids, audio_rows, audio_index):
        return self.ops.embed_tokens(ids, self.w.embed_tokens, audio_rows, audio_index)

    def logits(self, hidden):
        normed = self.ops.rmsnorm(hidden, self.w.decoder_norm_weight, self.cfg.decoder.rms_norm_eps)
        return self.linear(normed, self.w.lm_head)
