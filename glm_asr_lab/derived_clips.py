"""Test clips derived from the repository's test_audio.wav, in other rates, channel counts and lengths:
what the tests and the lab feed the tiny checkpoint (glm_asr_course/reference/tiny_checkpoint.py).

    python -m glm_asr_lab.derived_clips OUT_DIR     # writes the clips, prints their paths
"""

import math
import pathlib
import sys

import numpy as np

from glm_asr_course.reference.tiny_checkpoint import TEST_AUDIO



def _load_reference():
    import soundfile as sf

    x, sr = sf.read(str(TEST_AUDIO), dtype="float32", always_2d=False)
    if x.ndim > 1:
        x = x.mean(axis=1)
    if sr != 16000:
        raise RuntimeError(f"{TEST_AUDIO} is {sr} Hz, expected 16000")
    return x.astype(np.float32)


def make_clips(out_dir) -> dict[str, pathlib.Path]:
    """Write test clips derived from the repo's test_audio.wav.

    - ``short``:  the clip at 22050 Hz, stereo (two different gains), PCM_16.
    - ``long45``: 45.0 s at 16 kHz mono float32: the speech repeated with gaps, gain
      changes and light seeded noise (needs two 30 s processor windows).
    - ``other``:  ~5 s at 16 kHz mono PCM_16: the speech slowed down by 1.3x (lower
      pitch), time-reversed, with light seeded noise; for batching with ``short``.
    """
    import soundfile as sf
    from scipy.signal import resample, resample_poly

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    x = _load_reference()
    rng = np.random.default_rng(1234)
    paths: dict[str, pathlib.Path] = {}

    # short: 16 kHz -> 22050 Hz (= 16000 * 441 / 320), stereo with unequal channels.
    y = resample_poly(x.astype(np.float64), 441, 320)
    stereo = np.stack([y, 0.6 * y + 0.002 * rng.standard_normal(y.shape)], axis=1)
    stereo = np.clip(stereo, -1.0, 1.0)
    paths["short"] = out / "short_22k_stereo.wav"
    sf.write(str(paths["short"]), stereo, 22050, subtype="PCM_16")

    # long45: exactly 45 s at 16 kHz.
    sr = 16000
    total = 45 * sr
    buf = np.zeros(total, np.float64)
    pos = int(0.3 * sr)
    gains = [1.0, 0.7, 1.3, 0.5, 1.1, 0.85, 1.2, 0.6, 0.95, 1.0, 0.75, 1.15]
    i = 0
    while pos < total:
        seg = x * gains[i % len(gains)]
        n = min(len(seg), total - pos)
        buf[pos:pos + n] += seg[:n]
        pos += n + int(rng.uniform(0.2, 0.8) * sr)
        i += 1
    buf += 0.003 * rng.standard_normal(total)
    buf = np.clip(buf, -1.0, 1.0).astype(np.float32)
    paths["long45"] = out / "long45_16k.wav"
    sf.write(str(paths["long45"]), buf, sr, subtype="FLOAT")

    # other: slowed down 1.3x via FFT resampling, time-reversed, padded to 5 s.
    slow = resample(x.astype(np.float64), int(len(x) * 1.3))[::-1]
    o = np.zeros(5 * sr, np.float64)
    start = int(0.2 * sr)
    n = min(len(slow), len(o) - start)
    o[start:start + n] = 0.9 * slow[:n]
    o += 0.004 * rng.standard_normal(len(o))
    o = np.clip(o, -1.0, 1.0)
    paths["other"] = out / "other_16k.wav"
    sf.write(str(paths["other"]), o, sr, subtype="PCM_16")
    return paths


def load_clip_16k(path) -> np.ndarray:
    """Read a clip as 16 kHz mono float32 (downmix by mean, polyphase resampling)."""
    import soundfile as sf
    from scipy.signal import resample_poly

    x, sr = sf.read(str(path), dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    if sr != 16000:
        g = math.gcd(int(sr), 16000)
        x = resample_poly(x.astype(np.float64), 16000 // g, int(sr) // g)
    return np.asarray(x, dtype=np.float32)


def main(argv=None) -> int:
    if len(argv if argv is not None else sys.argv[1:]) != 1:
        print("usage: python -m glm_asr_lab.derived_clips OUT_DIR", file=sys.stderr)
        return 2
    for name, path in make_clips((argv or sys.argv[1:])[0]).items():
        print(name, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
