"""Read an audio file as 16 kHz mono float32, whatever its format, rate, channels or sample type."""

from math import gcd
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .errors import UserError

SAMPLE_RATE = 16000


def load_audio(source: str | Path | BinaryIO, name: str | None = None) -> np.ndarray:
    """``source`` is a path or an open binary file (an upload, a recording); ``name`` labels errors."""
    import soundfile as sf
    from scipy.signal import resample_poly

    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise UserError(f"audio file not found: {path}")
        source = str(path)
    else:
        path = name or "the audio"
    try:
        data, rate = sf.read(source, dtype="float32", always_2d=True)
    except Exception as e:  # soundfile raises LibsndfileError/RuntimeError/TypeError by format
        raise UserError(f"cannot read audio {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if data.size == 0:
        raise UserError(f"audio file {path} holds no samples")
    mono = data.mean(axis=1)
    if rate != SAMPLE_RATE:
        g = gcd(int(rate), SAMPLE_RATE)
        mono = resample_poly(mono, SAMPLE_RATE // g, int(rate) // g).astype(np.float32)
    if not np.isfinite(mono).all():
        raise UserError(f"audio file {path} contains NaN or infinite samples")
    return np.ascontiguousarray(mono, dtype=np.float32)
