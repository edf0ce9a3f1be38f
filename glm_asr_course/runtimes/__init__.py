"""How the tracks' kernels run: cuTile through the real cuda.tile on a GPU or a CPU emulator of it
elsewhere (cutile, cutile_emulator); Triton on a GPU as it is, and in its CPU interpreter with the
fixes the course's kernels need (triton_interpreter).
"""

import functools

import torch


@functools.lru_cache(maxsize=None)
def gpu_name(device) -> str:
    """The name CUDA gives the GPU of ``device`` ("NVIDIA H200"): the key of the fast paths' per-GPU
    tuning tables. Empty off a GPU."""
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else ""
