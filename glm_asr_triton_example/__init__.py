"""GLM-ASR-Nano-2512 with every forward op a Triton kernel: the complete Triton track.

``STUDENT_KERNELS`` lists the course kernels a student writes in glm_asr_triton_template/ (generated
from this folder by utils/make_template.py): in this folder each sits between
``# >>> STUDENT KERNEL name`` and ``# <<< STUDENT KERNEL`` markers.
"""

STUDENT_KERNELS = (
    "attention_scores_kernel", "softmax_inplace_kernel", "attention_output_kernel",  # attention.py
    "rmsnorm_kernel", "layernorm_kernel", "gelu_kernel", "silu_kernel", "linear_kernel_tf32",  # layers.py
    "softmax_kernel",  # layers.py
    "compute_freqs_kernel",  # rope.py
)
