# Generated from glm_asr_triton_example/ by utils/make_template.py. Your copy: fill in the TODO kernels.
"""GLM-ASR-Nano-2512 with every forward op a Triton kernel (the Triton track).

model.py is the course path: the model on the ten course kernels below plus the provided glue,
nothing else. The example also has a fast path, fast_model.py on fused production kernels (fast_*.py),
which the generated template does not copy. glm_asr_common.tools.tracks picks a path by its file.

``STUDENT_KERNELS`` lists the course kernels students write, the one list every tool reads
(utils/make_template.py, ``--allow-reference``, the tests). In the example each of them sits between
``# >>> STUDENT KERNEL name`` and ``# <<< STUDENT KERNEL`` markers; in the template each is a TODO.
"""

STUDENT_KERNELS = (
    "attention_scores_kernel", "softmax_inplace_kernel", "attention_output_kernel",  # attention.py
    "rmsnorm_kernel", "layernorm_kernel", "gelu_kernel", "silu_kernel", "linear_kernel_tf32",  # layers.py
    "softmax_kernel",  # layers.py
    "compute_freqs_kernel",  # rope.py
)
