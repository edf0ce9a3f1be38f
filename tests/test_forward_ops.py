"""Neither track computes anything with torch, on any kernel path: every aten op its forward calls must
be an allocation, a view or a copy. Records the ops with a TorchDispatchMode during a whole
transcription. (In the cuTile emulator a kernel's own tile work is plain torch: it runs unrecorded.)"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from glm_asr_course.runtimes import cutile as cutile_runtime
from glm_asr_course.model.audio import load_audio
from parity import inputs_for, track_model

# What "allocate, view, copy in and launch" may call. Anything else is arithmetic done by torch.
ALLOWED = {
    # allocation
    "empty", "empty_strided", "empty_like", "zeros", "full", "scalar_tensor", "lift_fresh",
    # views
    "view", "_unsafe_view", "as_strided", "reshape", "flatten", "alias", "detach", "t", "transpose", "permute", "slice",
    "select", "unsqueeze", "squeeze", "expand", "unbind", "split", "split_with_sizes", "chunk",
    # copies (host↔device transfers, inputs cast once to the model dtype)
    "copy_", "_to_copy", "clone", "contiguous", "_local_scalar_dense",
    # reading results back to the host
    "tolist",
    # metadata-only calls the Triton interpreter makes when it hands tensors to NumPy on a CPU
    "set_", "detach_", "new_empty", "resolve_conj", "resolve_neg", "to",
    # profiler ranges (glm_asr_course.model.regions.region), not arithmetic
    "_record_function_enter_new", "_record_function_exit",
}

KERNEL_TRACKS = ["glm_asr_triton_example:course", "glm_asr_triton_example:fast", "glm_asr_cutile_example:course",
                 "glm_asr_cutile_example:fast"]


class OpRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("track", KERNEL_TRACKS)
def test_forward_uses_torch_only_to_allocate_view_and_copy(track, tiny_ckpt, clips, monkeypatch):
    model, ckpt = track_model(track, tiny_ckpt)
    inputs = inputs_for(ckpt, [load_audio(clips["short"]), load_audio(clips["other"])])
    if cutile_runtime.MODE == "emulate":
        emulated_launch = cutile_runtime.ct.launch

        def launch_outside_the_record(*args, **options):
            with _disable_current_modes():
                emulated_launch(*args, **options)

        monkeypatch.setattr(cutile_runtime.ct, "launch", launch_outside_the_record)
    with OpRecorder() as recorder:
        model.generate(inputs, 4, 4)
        model.prefill_logits(inputs)
    computed = sorted(recorder.ops - ALLOWED)
    assert not computed, f"torch computed {computed} in the forward pass; these must be kernels"
    assert "copy_" in recorder.ops or "_to_copy" in recorder.ops  # the recorder did see the forward


def test_recorder_catches_torch_arithmetic():
    """The check above can fail: a torch matmul inside the mode is recorded as a compute op."""
    a = torch.randn(4, 4)
    with OpRecorder() as recorder:
        torch.matmul(a, a)
    assert recorder.ops - ALLOWED
