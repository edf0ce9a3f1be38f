# Generated from glm_asr_triton_example/ by utils/make_template.py. Your copy: fill in the TODO kernels.
"""Lets a kernel file run as a script (``python glm_asr_triton_template/layers.py``) for its self-check.

Imported by absolute name from the file's own folder, before triton: it puts the repository on
sys.path so the file's relative imports work, and without a GPU selects Triton's CPU interpreter,
which must be chosen before triton is imported. Returns the package name for ``__package__``.
"""

import os
import sys

import torch


def package_of(script: str) -> str:
    here = os.path.dirname(os.path.abspath(script))
    sys.path.insert(0, os.path.dirname(here))
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return os.path.basename(here)
