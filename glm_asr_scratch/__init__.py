"""GLM-ASR in plain PyTorch: the reference implementation every kernel track is checked against.

``KERNEL_LANGUAGE``: read by glm_asr_course.tracks.kernel_language; plain PyTorch, no kernels of its own.
"""

KERNEL_LANGUAGE = "torch"
