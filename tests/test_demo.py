"""demo.py driven headless through Streamlit's AppTest: it renders, transcribes an upload with the
chosen folder on the tiny checkpoint, and shows a bad file as one error line."""

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from glm_asr_common.audio import load_audio  # noqa: E402
from glm_asr_common.frontend import decode  # noqa: E402
from parity import inputs_for, track_model  # noqa: E402

DEMO = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "demo.py")


def start(tiny_ckpt):
    app = AppTest.from_file(DEMO, default_timeout=300)
    app.run()
    app.sidebar.selectbox[0].set_value("glm_asr_scratch")
    app.sidebar.text_input[0].set_value(str(tiny_ckpt))
    app.sidebar.radio[0].set_value("fp32")
    app.sidebar.slider[0].set_value(16)
    return app.run()


def test_demo_starts_with_instructions():
    app = AppTest.from_file(DEMO, default_timeout=60).run()
    assert not app.exception
    assert "Record or upload" in app.info[0].value


def test_demo_transcribes_an_upload_like_the_model(tiny_ckpt, clips):
    app = start(tiny_ckpt)
    app.file_uploader[0].upload("clip.wav", clips["short"].read_bytes(), "audio/wav")
    app.run()
    assert not app.exception and not app.error
    model, ckpt = track_model("glm_asr_scratch", tiny_ckpt)
    tokens = model.generate(inputs_for(ckpt, [load_audio(clips["short"])]), 16)[0]
    shown = [m.value for m in app.markdown]
    assert decode(ckpt.processor, tokens) in shown
    assert any(f"{len(tokens)} tokens" in c.value for c in app.caption)


def test_demo_reports_a_bad_file(tiny_ckpt):
    app = start(tiny_ckpt)
    app.file_uploader[0].upload("notes.wav", b"not audio at all", "audio/wav")
    app.run()
    assert not app.exception
    assert "cannot read audio" in app.error[0].value
