"""Read an audio file as 16 kHz mono float32, whatever its format, rate, channels or sample type."""

import re
from dataclasses import dataclass
from math import gcd
from pathlib import Path
from typing import BinaryIO

import numpy as np

from glm_asr_course.errors import UserError

SAMPLE_RATE = 16000
# The formats uploads are offered in and errors name (libsndfile, through soundfile, reads these and more).
AUDIO_EXTENSIONS = ("wav", "flac", "ogg", "mp3")
# soundfile's name of a sample type → what a person calls it.
_SAMPLE_TYPES = {"PCM_U8": "8-bit", "PCM_S8": "8-bit", "PCM_16": "16-bit", "PCM_24": "24-bit", "PCM_32": "32-bit",
                 "FLOAT": "32-bit float", "DOUBLE": "64-bit float", "ULAW": "8-bit µ-law", "ALAW": "8-bit A-law",
                 "MPEG_LAYER_III": "", "VORBIS": "", "OPUS": ""}  # compressed: no sample width to speak of
# libsndfile's code for "not a format I know" (soundfile.LibsndfileError.code).
_UNRECOGNISED_FORMAT = 1


@dataclass(frozen=True)
class Audio:
    """An audio file as read: the model's samples and what the file held."""

    samples: np.ndarray  # 16 kHz mono float32
    name: str  # what messages call it
    rate: int
    channels: int
    sample_type: str  # "16-bit", "8-bit", "32-bit float", ...; "" for compressed formats
    format: str  # "WAV", "FLAC", "OGG", "MP3", ...

    @property
    def seconds(self) -> float:
        return len(self.samples) / SAMPLE_RATE

    def description(self) -> str:
        """E.g. "8-bit WAV, 44.1 kHz, 2 channels, 3.5 s"."""
        channels = "mono" if self.channels == 1 else f"{self.channels} channels"
        kind = f"{self.sample_type} {self.format}" if self.sample_type else self.format
        return f"{kind}, {self.rate / 1000:g} kHz, {channels}, {self.seconds:.1f} s"

    def conversion(self) -> str | None:
        """What reading did to make the model's input (16 kHz mono), or None when nothing was needed."""
        changes = []
        if self.channels != 1:
            changes.append("mixed down to mono")
        if self.rate != SAMPLE_RATE:
            changes.append(f"resampled to {SAMPLE_RATE / 1000:g} kHz")
        return " and ".join(changes) or None


def read_audio(source: str | Path | BinaryIO, name: str | None = None) -> Audio:
    """``source`` is a path or an open binary file (an upload, a recording); ``name`` is what errors
    call it (default: "audio file PATH"). Every failure is a one-line UserError that names the file."""
    import soundfile as sf

    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            raise UserError(f"{path} is a directory, not an audio file (expected one of: {', '.join(AUDIO_EXTENSIONS)})")
        if not path.is_file():
            raise UserError(f"audio file not found: {path}")
        name = name or f"audio file {path}"
        size = path.stat().st_size
        source = str(path)
    else:
        name = name or "the audio"
        size = source.seek(0, 2)
        source.seek(0)
    if size == 0:
        raise UserError(f"{name} is empty (0 bytes)")
    try:
        with sf.SoundFile(source) as f:
            data = f.read(dtype="float32", always_2d=True)
            rate, channels, subtype, container = f.samplerate, f.channels, f.subtype, f.format
    except Exception as e:  # soundfile raises LibsndfileError/RuntimeError/TypeError by format
        raise UserError(f"cannot read {name}: {_reason(e, name)}") from None
    if data.size == 0:
        raise UserError(f"{name} holds no samples")
    mono = data.mean(axis=1)
    if rate != SAMPLE_RATE:
        from scipy.signal import resample_poly  # 2 s to import: only where a clip needs it

        g = gcd(int(rate), SAMPLE_RATE)
        mono = resample_poly(mono, SAMPLE_RATE // g, int(rate) // g).astype(np.float32)
    if not np.isfinite(mono).all():
        raise UserError(f"{name} contains NaN or infinite samples")
    return Audio(np.ascontiguousarray(mono, dtype=np.float32), name, int(rate), channels,
                 _SAMPLE_TYPES.get(subtype, subtype), container)


def load_audio(source: str | Path | BinaryIO, name: str | None = None) -> np.ndarray:
    """The samples of ``read_audio``: 16 kHz mono float32."""
    return read_audio(source, name).samples


def _reason(error: Exception, name: str) -> str:
    """Why soundfile could not read a file, in words that hold no internal object: its messages
    embed the repr of the file object they were given (``<_io.BytesIO object at 0x...>``)."""
    if getattr(error, "code", None) == _UNRECOGNISED_FORMAT:
        return f"not a recognised audio format (expected one of: {', '.join(AUDIO_EXTENSIONS)})"
    message = getattr(error, "error_string", None) or (str(error).splitlines() or [""])[0]
    message = re.sub(r"^Error opening .*?: ", "", message)
    return re.sub(r"<[^<>]* at 0x[0-9a-fA-F]+>", name, message).rstrip(".") or type(error).__name__
