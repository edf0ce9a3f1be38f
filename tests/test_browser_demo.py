"""The live demo in a real browser: `streamlit run demo.py` on a free localhost port, driven by headless
Chromium (Debian's chromium and chromium-driver packages, through selenium).

On the tiny random checkpoint the page offers without a GPU: upload test_audio.wav, press Transcribe,
and read the transcript area, which must hold transformers' greedy text for that clip; record from
Chromium's fake microphone (fed with the same clip) and check that the recording reaches the model
(its length, its loudness and the tokens on the run card); run compare mode. Screenshots of the
finished transcription and of the comparison go to $GLM_ASR_DEMO_SCREENSHOTS when it is set (docs/demo.md's
come from `GLM_ASR_DEMO_SCREENSHOTS=docs/demo pytest tests/test_browser_demo.py`), else to a temporary folder.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("Chromium is not installed (apt-get install chromium chromium-driver; .ci/run does it)",
                allow_module_level=True)
pytest.importorskip("selenium", reason="selenium is not installed (the test extra of pyproject.toml; source utils/setup-triton.sh)")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_CLIP = REPO_ROOT / "test_audio.wav"
TOKENS = 16  # the slider's value for this test: a line of text, seconds in the interpreter
RUN_TIMEOUT = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The demo served on localhost; its tiny checkpoint built in a cache folder of this test session."""
    port = free_port()
    env = dict(os.environ, GLM_ASR_CACHE=str(tmp_path_factory.mktemp("glm_asr_cache")))
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "demo.py", "--server.port", str(port)],
                                   cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://localhost:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"streamlit did not start:\n{log.read_text()}")
                time.sleep(0.5)
        yield url, env["GLM_ASR_CACHE"], log
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1200",
                 "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 f"--use-file-for-fake-audio-capture={TEST_CLIP}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    folder = os.environ.get("GLM_ASR_DEMO_SCREENSHOTS")
    return Path(folder) if folder else tmp_path_factory.mktemp("screenshots")


def wait_for(find, timeout=30, what="the page"):
    """``find()``'s first truthy value, polled until ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = find()
        except Exception:  # elements replaced while the page reruns
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.25)


def by_text(driver, test_id, text, exact=True):
    return [e for e in driver.find_elements(By.CSS_SELECTOR, f"[data-testid={test_id}]")
            if (e.text == text if exact else text in e.text)]


def click(driver, test_id, text):
    wait_for(lambda: by_text(driver, test_id, text), what=f"{test_id} {text!r}")[0].click()


def choose(driver, label, option):
    """Pick ``option`` in the selectbox labelled ``label`` (a combo box input with a list of options)."""
    box = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, f"input[role=combobox][aria-label='{label}']"))[0]
    if box.get_attribute("value") == option:
        return
    box.click()
    wait_for(lambda: [e for e in driver.find_elements(By.CSS_SELECTOR, "[role=option]") if e.text == option],
             what=f"option {option!r}")[0].click()
    wait_for(lambda: box.get_attribute("value") == option, what=f"{label} = {option!r}")


def set_slider(driver, label, value):
    """Move the slider labelled ``label`` to ``value`` with the keyboard, as a person without a mouse would."""
    thumb = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, f"input[type=range][aria-label='{label}']"))[0]
    driver.execute_script("arguments[0].focus()", thumb)
    steps = value - int(thumb.get_attribute("min"))
    ActionChains(driver).send_keys(Keys.HOME).send_keys(Keys.ARROW_RIGHT * steps).perform()
    wait_for(lambda: thumb.get_attribute("aria-valuetext") == str(value), what=f"{label} = {value}")


def caption_with(driver, text):
    return by_text(driver, "stCaptionContainer", text, exact=False)


def finished_card(driver, previous=None):
    """The run card's text once a run has finished (and, given ``previous``, once it changed)."""
    def card():
        cards = driver.find_elements(By.CSS_SELECTOR, ".st-key-run_card")
        running = driver.find_elements(By.CSS_SELECTOR, "[data-testid=stStatusWidget]")
        text = cards[0].text if cards and not running else None
        # The card is drawn element by element, not always in order: done when its caption names the
        # checkpoint and its four metrics are there.
        metrics = ("time", "tokens", "ms / token", "real-time factor")
        drawn = text and "checkpoint: " in text and all(
            re.search(rf"^{re.escape(m)}\n", text, re.M) for m in metrics)
        return text if drawn and text != previous else None
    return wait_for(card, RUN_TIMEOUT, "the run card")


def metric(card: str, label: str) -> str:
    return re.search(rf"^{re.escape(label)}\n(.+)$", card, re.M).group(1)


def reference_text(cache: str) -> str:
    """transformers' greedy transcript of the test clip on the page's tiny checkpoint, in fp32."""
    from glm_asr_course.model.audio import load_audio
    from glm_asr_course.model.frontend import decode
    from glm_asr_course.tracks import open_checkpoint
    from glm_asr_course.reference.tiny_checkpoint import cached_tiny_checkpoint
    from parity import hf_generate, hf_model, inputs_for

    with pytest.MonkeyPatch.context() as env:
        env.setenv("GLM_ASR_CACHE", cache)  # the folder the server built it in: reused, not rebuilt
        path = cached_tiny_checkpoint()
    checkpoint = open_checkpoint(str(path), torch.float32)
    inputs = inputs_for(checkpoint, [load_audio(TEST_CLIP)])
    ids = hf_generate(hf_model(path), inputs, TOKENS, 0, checkpoint.config.eos_token_ids)[0]
    return decode(checkpoint.processor, ids)


def test_upload_transcribe_record_and_compare_in_chromium(server, browser, screenshots):
    url, cache, log = server
    browser.get(url)
    wait_for(lambda: by_text(browser, "stHeading", "GLM-ASR-Nano", exact=False), 60)
    choose(browser, "Checkpoint", "random weights (tiny, CPU-friendly)")
    click(browser, "stRadioOption", "fp32")
    set_slider(browser, "Max new tokens", TOKENS)

    # Upload the test clip and transcribe it.
    click(browser, "stRadioOption", "upload a file")
    upload = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "input[type=file]"), what="the uploader")
    upload[0].send_keys(str(TEST_CLIP))
    wait_for(lambda: caption_with(browser, "test_audio.wav: 16-bit WAV, 16 kHz, mono, 3.5 s"), what="the upload")
    click(browser, "stBaseButton-primary", "Transcribe")
    card = finished_card(browser)
    transcript = browser.find_element(By.CSS_SELECTOR, ".st-key-transcript").text
    assert " ".join(transcript.split()) == " ".join(reference_text(cache).split())
    where = "cuda" if torch.cuda.is_available() else "cpu (Triton interpreter)"
    assert f"glm_asr_triton_example · fast · fp32 · {where}" in card
    assert "audio test_audio.wav, 3.5 s" in card and int(metric(card, "tokens")) > 0
    assert by_text(browser, "stHeading", "Transcript — random weights, meaningless text")
    browser.save_screenshot(str(screenshots / "transcribe.png"))

    # Record a few seconds from the fake microphone, which plays the test clip.
    click(browser, "stRadioOption", "record from the microphone")
    record = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "button[aria-label=Record]"), what="Record")
    record[0].click()
    time.sleep(4)
    browser.find_element(By.CSS_SELECTOR, "[data-testid=stAudioInputActionButton]").click()  # stop
    recorded = wait_for(lambda: caption_with(browser, "the recording: "), what="the recording")[0].text
    seconds = float(re.search(r"([\d.]+) s, peak", recorded).group(1))
    assert seconds >= 2 and "silent" not in recorded, recorded
    click(browser, "stBaseButton-primary", "Transcribe")
    card = finished_card(browser, previous=card)
    assert re.search(r"audio the recording, [\d.]+ s", card) and int(metric(card, "tokens")) > 0, card

    # Compare two tracks on the test clip.
    click(browser, "stRadioOption", "the test clip (test_audio.wav)")
    click(browser, "stRadioOption", "compare")
    click(browser, "stBaseButton-primary", "Compare")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "[data-testid=stVegaLiteChart]")
             and not browser.find_elements(By.CSS_SELECTOR, "[data-testid=stStatusWidget]"), RUN_TIMEOUT,
             "the comparison")
    assert not browser.find_elements(By.CSS_SELECTOR, "[data-testid=stAlertContentError]")
    assert browser.find_elements(By.CSS_SELECTOR, "[data-testid=stDataFrame]")
    browser.save_screenshot(str(screenshots / "compare.png"))
    assert "Traceback" not in log.read_text()
