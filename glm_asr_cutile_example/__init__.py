"""GLM-ASR-Nano-2512's course kernels in NVIDIA cuTile (the cuTile track; the model path comes later).

``STUDENT_KERNELS`` lists the course kernels students write, the one list every tool reads (the
tests, the compile check, ``--allow-reference``). In the example each of them sits between
``# >>> STUDENT KERNEL name`` and ``# <<< STUDENT KERNEL`` markers. Kernel files use ``ct`` and
``launch`` from glm_asr_common.cutile_runtime: the real cuda.tile on a GPU, a CPU emulator elsewhere.
"""

STUDENT_KERNELS = (
    "attention_scores_kernel", "softmax_inplace_kernel", "attention_output_kernel",  # attention.py
    "rmsnorm_kernel", "layernorm_kernel", "gelu_kernel", "silu_kernel", "linear_kernel_tf32",  # layers.py
    "softmax_kernel",  # layers.py
    "compute_freqs_kernel", "apply_rope_kernel",  # rope.py
)
