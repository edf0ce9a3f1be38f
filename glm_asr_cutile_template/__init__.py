# Generated from glm_asr_cutile_example/ by utils/make_template.py. Your copy: fill in the TODO kernels.
"""GLM-ASR-Nano-2512 with every forward op a cuTile kernel (the cuTile track).

model.py is the course path: the model on the eleven course kernels below plus the provided glue
(glue.py, conv.py), nothing else. glm_asr_common.tools.tracks picks a path by its file (fast_model.py,
model.py, cupy_model.py where present); the generated template copies the course path only.

``STUDENT_KERNELS`` lists the course kernels students write, the one list every tool reads
(utils/make_template.py, the tests, the compile check, ``--allow-reference``). In the example each
of them sits between ``# >>> STUDENT KERNEL name`` and ``# <<< STUDENT KERNEL`` markers; in the
template each is a TODO. Kernel files use ``ct`` and ``launch`` from glm_asr_common.cutile.runtime:
the real cuda.tile on a GPU, a CPU emulator elsewhere.
"""

STUDENT_KERNELS = (
    "attention_scores_kernel", "softmax_inplace_kernel", "attention_output_kernel",  # attention.py
    "rmsnorm_kernel", "layernorm_kernel", "gelu_kernel", "silu_kernel", "linear_kernel_tf32",  # layers.py
    "softmax_kernel",  # layers.py
    "compute_freqs_kernel", "apply_rope_kernel",  # rope.py
)
