# Generated from glm_asr_cutile_example/ by utils/make_template.py. Your copy: fill in the TODO kernels.
"""Lets a kernel file run as a script (``python glm_asr_cutile_template/layers.py``) for its self-check.

Imported by absolute name from the file's own folder: it puts the repository on sys.path so the
file's relative imports work, and returns the package name for ``__package__``. Which cuTile runs
(the GPU's, or the CPU emulator when torch sees no GPU) is glm_asr_common.runtimes.cutile's choice.
"""

import os
import sys


def package_of(script: str) -> str:
    here = os.path.dirname(os.path.abspath(script))
    sys.path.insert(0, os.path.dirname(here))
    return os.path.basename(here)
