"""glm_asr_lab/gpu/clips.py --write (utils/gpu_check.sh long_clips takes its files): only the named clips, at
their lengths, one name<TAB>path line each; an unknown name is one line, exit 2, and nothing written (in
glm_asr_lab/tuning/ab_hints.py too, before any weights are made)."""

import subprocess
import sys

import pytest

from glm_asr_course.errors import UserError
from glm_asr_course.model.audio import SAMPLE_RATE, load_audio
from glm_asr_lab.gpu import clips
from glm_asr_lab.tuning import ab_hints


def test_write_names_only_the_chosen_clips_at_their_lengths(tmp_path, capsys):
    listing = tmp_path / "clips.tsv"
    assert clips.main(["--write", str(tmp_path / "out"), "--clips", "5 min, 0.3 s", "--list", str(listing)]) == 0
    printed = capsys.readouterr().out
    assert listing.read_text() == printed
    listed = dict(line.split("\t") for line in printed.splitlines())
    assert list(listed) == ["0.3 s", "5 min"]  # clips.py's order, not the argument's
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.rsplit("/", 1)[1] for p in listed.values())
    assert len(load_audio(listed["0.3 s"])) == int(0.3 * SAMPLE_RATE)
    assert len(load_audio(listed["5 min"])) == 300 * SAMPLE_RATE


def test_an_unknown_clip_is_one_line_exit_2_and_nothing_written(tmp_path):
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "glm_asr_lab.gpu.clips", "--write", str(out), "--clips", "45 s,6 min"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().count("\n") == 0 and "unknown '6 min'" in run.stderr and "Traceback" not in run.stderr
    assert not out.exists()


def test_every_clip_is_made(tmp_path):
    written = clips.write_clips(tmp_path)
    assert list(written) == list(clips.CLIP_NAMES) and all(path.stat().st_size > 0 for path in written.values())


@pytest.mark.parametrize("names", ["", "45 s,", "6 min"])
def test_empty_or_unknown_names_are_refused(names):
    with pytest.raises(UserError, match="unknown"):
        clips.clip_names(names)


def test_ab_hints_refuses_an_unknown_clip_before_making_weights(monkeypatch, capsys):
    def no_weights(*args, **kwargs):
        raise AssertionError("weights made before the clips were checked")

    monkeypatch.setattr(ab_hints, "random_weights", no_weights)
    assert ab_hints.main(["--clips", "6 min", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown '6 min'" in err
