"""The fast paths' greedy head in their self-checks: one random problem and how its answer is judged,
the same for both tracks' fast_head.py (each launches its own greedy_head on it).
"""

import zlib
from dataclasses import dataclass

import torch


@dataclass
class GreedyHeadCase:
    """Two bf16 hidden states, an RMSNorm weight and an lm_head, with the last two ids banned."""

    x: torch.Tensor  # (2, H)
    norm_weight: torch.Tensor  # (H,)
    eps: float
    lm_head: torch.Tensor  # (V, H)
    banned: torch.Tensor  # int64 (2,)
    suppress: torch.Tensor  # int32 (1,), set: the banned ids are skipped
    out_ids: torch.Tensor  # int64 (2,), for the launch to write
    shape: str

    def reference_logits(self) -> torch.Tensor:
        """rmsnorm(x) @ lm_head^T in fp32, the banned ids at -inf."""
        x = self.x.float()
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm_weight.float()
        logits = normed @ self.lm_head.float().T
        logits[:, self.banned] = float("-inf")
        return logits


def greedy_head_case(on_gpu: bool, device, cpu_vocab: int) -> GreedyHeadCase:
    """The model's sizes on a GPU; on a CPU a 96-wide hidden state and ``cpu_vocab`` ids (a few of the
    track's vocabulary blocks there). The values are seeded by the problem's sizes, as kernel_cases seeds a
    case by its id: every run of a check draws the same ones, so a failure can be run again."""
    H, V = (2048, 59264) if on_gpu else (96, cpu_vocab)
    gen = torch.Generator().manual_seed(zlib.crc32(f"greedy_head H={H} V={V}".encode()))

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=torch.bfloat16)

    norm_weight, lm_head, x = rand(H), rand(V, H, scale=H ** -0.5), rand(2, H)
    return GreedyHeadCase(x=x, norm_weight=norm_weight, eps=1e-5, lm_head=lm_head,
                          banned=torch.tensor([V - 2, V - 1], device=device),
                          suppress=torch.ones(1, dtype=torch.int32, device=device),
                          out_ids=torch.empty(2, dtype=torch.int64, device=device), shape=f"2x{H}->{V} bf16")


def chosen_logit_gap(chosen: torch.Tensor, logits: torch.Tensor) -> tuple[float, float]:
    """The chosen ids judged by their reference logits, so that near-ties in bf16 still pass: how far
    the worst falls below its row's maximum, absolute and relative to the largest |logit|."""
    logits = logits.double()
    finite = logits.masked_fill(~torch.isfinite(logits), 0.0)
    gap = (logits.max(-1).values - logits.gather(1, chosen[:, None].to(logits.device))[:, 0]).max().item()
    return gap, gap / finite.abs().max().item()
