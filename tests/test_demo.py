"""demo.py driven headless through Streamlit's AppTest, on the tiny random checkpoint the page builds
itself: every track's transcript and token count are transformers' greedy output on the same
checkpoint and audio; the template runs with the reference toggle and names its TODO kernel without
it; compare mode tables two tracks; bad uploads, a bad checkpoint field and an unreachable hub each
give one line in the page's words; 8-bit and stereo uploads transcribe with their conversion shown.
"""

import io
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from glm_asr_course.model.audio import read_audio  # noqa: E402
from glm_asr_course.model.frontend import decode  # noqa: E402
from parity import hf_generate, hf_model, inputs_for  # noqa: E402
from tracks import TRACKS  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO = str(REPO_ROOT / "demo.py")
TEST_CLIP = REPO_ROOT / "test_audio.wav"
TOKENS = 6  # enough to see several ids agree; the course paths run in the interpreter
TINY = "random weights (tiny, CPU-friendly)"
UPLOAD, MICROPHONE = "upload a file", "record from the microphone"
TEMPLATE = "glm_asr_triton_template"


@pytest.fixture(scope="module")
def page_checkpoint(tmp_path_factory):
    """The tiny checkpoint the page builds, in a cache folder of this test session."""
    from glm_asr_course.tracks import open_checkpoint
    from glm_asr_course.reference.tiny_checkpoint import cached_tiny_checkpoint

    mp = pytest.MonkeyPatch()
    mp.setenv("GLM_ASR_CACHE", str(tmp_path_factory.mktemp("glm_asr_cache")))
    path = cached_tiny_checkpoint()
    yield path, open_checkpoint(str(path), torch.float32)
    mp.undo()


def reference(page_checkpoint, samples) -> tuple[list[int], str]:
    """transformers' greedy ids and text for ``samples`` on the page's checkpoint."""
    path, checkpoint = page_checkpoint
    ids = hf_generate(hf_model(path), inputs_for(checkpoint, [samples]), TOKENS, 0, checkpoint.config.eos_token_ids)[0]
    return ids, decode(checkpoint.processor, ids)


def unescape(markdown: str) -> str:
    return re.sub(r"\\(.)", r"\1", markdown)


def open_page(mode="transcribe", **widgets) -> AppTest:
    app = AppTest.from_file(DEMO, default_timeout=240).run()
    app.radio(key="mode").set_value(mode).run()
    widgets = {"checkpoint": TINY, **widgets}  # the default without a GPU; with one, the real model
    app.radio(key="precision").set_value("fp32")  # IEEE fp32: comparable token for token with transformers
    app.slider(key="max_new_tokens").set_value(TOKENS)
    for key, value in widgets.items():
        {"folder": app.selectbox, "checkpoint": app.selectbox, "path": app.radio, "audio_source": app.radio,
         "tracks": app.multiselect, "model": app.text_input}[key](key=key).set_value(value)
        app.run()
    return app.run()


def transcribe(app) -> AppTest:
    app.button(key="transcribe").click().run()
    assert not app.exception, app.exception
    return app


def shown(app) -> list[str]:
    return [unescape(m.value) for m in app.markdown]


def metric(app, label) -> str:
    return next(m.value for m in app.metric if m.label == label)


def one_line_error(app) -> str:
    assert not app.exception, app.exception
    assert len(app.error) == 1, [e.value for e in app.error]
    line = app.error[0].value
    assert "\n" not in line and "--" not in line and "0x" not in line, line  # the page's words, no object
    return line


def test_page_opens_offline_ready_with_the_test_clip():
    app = AppTest.from_file(DEMO, default_timeout=60).run()
    assert not app.exception and not app.error
    if not torch.cuda.is_available():  # the choices that work, and finish, without a download or a GPU
        assert app.selectbox(key="checkpoint").value == TINY and "meaningless" in app.warning[0].value
        assert app.slider(key="max_new_tokens").value == 5 and app.radio(key="precision").value == "fp32"
        assert any("CPU defaults: 5 new tokens, no warm-up; move “Max new tokens” in the sidebar to change." in c.value
                   for c in app.caption)
    assert any(c.value.startswith("test_audio.wav: 16-bit WAV, 16 kHz, mono, 3.5 s, peak ") for c in app.caption)
    assert app.button(key="transcribe").label == "Transcribe"


def test_demo_model_option_picks_the_checkpoint_the_page_starts_on(monkeypatch, page_checkpoint):
    """./demo.sh --model X reaches the page as streamlit's script arguments (after --)."""
    path, _ = page_checkpoint
    monkeypatch.setattr("sys.argv", ["demo.py", "--model", str(path)])
    app = AppTest.from_file(DEMO, default_timeout=60).run()
    assert app.selectbox(key="checkpoint").value == "another hub id or a local directory"
    assert app.text_input(key="model").value == str(path)
    monkeypatch.setattr("sys.argv", ["demo.py", "--model", "tiny"])
    assert AppTest.from_file(DEMO, default_timeout=60).run().selectbox(key="checkpoint").value == TINY


@pytest.mark.parametrize("track", TRACKS)
def test_every_track_transcribes_as_transformers_does(track, page_checkpoint):
    folder, path = track.split(":")
    app = transcribe(open_page(folder=folder, path=path))
    ids, text = reference(page_checkpoint, read_audio(TEST_CLIP).samples)
    assert not app.error, [e.value for e in app.error]
    assert app.subheader[0].value == "Transcript — random weights, meaningless text"
    assert text in shown(app)
    assert metric(app, "tokens") == str(len(ids))
    card = next(m for m in shown(app) if m.startswith("**"))
    assert f"{folder} · {path}" in card and "fp32" in card
    assert ("cuda" if torch.cuda.is_available() else "cpu") in card
    assert float(metric(app, "ms / token")) > 0 and float(metric(app, "real-time factor")) > 0


def test_template_names_its_todo_kernel_then_runs_with_the_reference(page_checkpoint):
    app = open_page(folder=TEMPLATE)
    line = one_line_error(transcribe(app))
    assert re.search(r"\w+_kernel in glm_asr_triton_template/\w+\.py is not written yet", line), line
    assert "Use the reference for unfinished kernels" in line

    app.toggle(key="allow_reference").set_value(True).run()
    transcribe(app)
    ids, text = reference(page_checkpoint, read_audio(TEST_CLIP).samples)
    assert not app.error, [e.value for e in app.error]
    assert text in shown(app) and metric(app, "tokens") == str(len(ids))
    assert any("the example's kernels stood in for: " in c.value and "rmsnorm_kernel" in c.value for c in app.caption)


def test_compare_tables_two_tracks_with_equal_ids(page_checkpoint):
    tracks = ["glm_asr_scratch:course", "glm_asr_triton_example:fast"]
    app = open_page("compare", tracks=tracks)
    app.button(key="compare").click().run()
    assert not app.exception and not app.error
    ids, text = reference(page_checkpoint, read_audio(TEST_CLIP).samples)
    table = app.dataframe[0].value
    assert list(table["track"]) == ["glm_asr_scratch · course", "glm_asr_triton_example · fast"]
    assert list(table["tokens"]) == [len(ids), len(ids)]
    assert list(table["ids equal to the first"]) == ["(first)", "yes"]
    assert list(table["transcript"]) == [text, text]
    assert (table["ms / token"] > 0).all()
    chart = app.get("vega_lite_chart")
    assert len(chart) == 1 and "ms / token" in chart[0].proto.spec
    assert "random weights" in app.subheader[0].value


def upload(app, name, data, source=UPLOAD) -> AppTest:
    app.radio(key="audio_source").set_value(source).run()
    widget = app.file_uploader(key="upload") if source == UPLOAD else app.audio_input(key="recording")
    widget.upload(name, data, "audio/wav")
    return app.run()


def test_an_empty_upload_says_empty():
    line = one_line_error(upload(open_page(folder="glm_asr_scratch"), "empty.wav", b""))
    assert line == "empty.wav is empty (0 bytes)"


def test_a_non_audio_upload_says_so():
    line = one_line_error(upload(open_page(folder="glm_asr_scratch"), "notes.wav", b"not audio at all, just text"))
    assert line.startswith("cannot read notes.wav: not a recognised audio format"), line


def test_an_8_bit_stereo_upload_transcribes_with_its_conversion_shown(page_checkpoint):
    speech, rate = sf.read(str(TEST_CLIP), dtype="float32")
    eight_k = speech[::2]  # 8 kHz; the two channels differ in gain
    buffer = io.BytesIO()
    sf.write(buffer, np.stack([eight_k, 0.5 * eight_k], axis=1), rate // 2, subtype="PCM_U8", format="WAV")
    app = transcribe(upload(open_page(folder="glm_asr_scratch"), "stereo8.wav", buffer.getvalue()))
    assert not app.error, [e.value for e in app.error]
    assert any(c.value.startswith("stereo8.wav: 8-bit WAV, 8 kHz, 2 channels, 3.5 s") and
               "(mixed down to mono and resampled to 16 kHz)" in c.value for c in app.caption)
    ids, text = reference(page_checkpoint, read_audio(io.BytesIO(buffer.getvalue())).samples)
    assert text in shown(app) and metric(app, "tokens") == str(len(ids))


def test_a_recording_reaches_the_model(page_checkpoint):
    app = transcribe(upload(open_page(folder="glm_asr_scratch"), "recording.wav", TEST_CLIP.read_bytes(),
                            MICROPHONE))
    ids, text = reference(page_checkpoint, read_audio(TEST_CLIP).samples)
    assert not app.error and text in shown(app) and metric(app, "tokens") == str(len(ids))
    assert any("audio the recording, 3.5 s" in c.value for c in app.caption)


def test_a_checkpoint_field_that_is_no_checkpoint_says_so_in_the_pages_words(tmp_path):
    app = open_page(folder="glm_asr_scratch", checkpoint="another hub id or a local directory", model=str(tmp_path))
    line = one_line_error(transcribe(app))
    assert line == f"“Hub id or directory”: {tmp_path} is a directory without a config.json, not a checkpoint"


def test_an_unreachable_hub_points_to_the_random_checkpoints(monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    app = open_page(folder="glm_asr_scratch", checkpoint="zai-org/GLM-ASR-Nano-2512 (downloaded once)")
    line = one_line_error(transcribe(app))
    assert line.startswith("Cannot download zai-org/GLM-ASR-Nano-2512 from the Hugging Face hub (ConnectionError)")
    assert "“random weights (tiny, CPU-friendly)”" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="a refusal of CPU runs; with a GPU the kernels run there")
def test_full_size_weights_in_the_interpreter_are_refused_in_one_line():
    app = open_page(folder="glm_asr_triton_example", checkpoint="random weights (full size)")
    line = one_line_error(transcribe(app))
    assert line.startswith("Without a GPU, glm_asr_triton_example · fast runs its kernels in the Triton interpreter, "
                           "where this 2.3 B-parameter model takes hours a transcription"), line
    assert "“random weights (tiny, CPU-friendly)”" in line
