"""The live demo: record or upload speech, transcribe it with a track's kernels, watch the text arrive.

    ./demo.sh                    (= streamlit run demo.py, on http://localhost:8501 only)

Transcribe mode runs one track (folder and path) and streams the transcript token by token with a
card of timings; compare mode runs several tracks on the same clip and tables their times and whether
their ids agree. On a machine without an NVIDIA GPU the kernels run on the CPU: Triton's in its
interpreter, cuTile's in the emulator (glm_asr_common.runtime picks them). The checkpoint can be the
real model or random weights built here (tiny, or full size), so the page works offline too.
"""

import io
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st
import torch

from glm_asr_common import teaching
from glm_asr_common.audio import AUDIO_EXTENSIONS, Audio, read_audio
from glm_asr_common.checkpoint import DEFAULT_MODEL, HubUnavailable
from glm_asr_common.cli import folder_student_kernels
from glm_asr_common.errors import UserError
from glm_asr_common.frontend import check_audio_length, decode, prepare_inputs
from glm_asr_common.precision import DEFAULT_PRECISION, PRECISIONS
from glm_asr_common.runtime import (REPO_ROOT, Checkpoint, import_track, open_checkpoint, path_summary,
                                    track_folders, track_paths, use_device)
from glm_asr_common.tiny_checkpoint import cached_tiny_checkpoint

TEST_CLIP = REPO_ROOT / "test_audio.wav"

# The checkpoint choices, by what the sidebar shows.
REAL_MODEL = f"{DEFAULT_MODEL} (downloaded once)"
TINY_RANDOM = "random weights (tiny, CPU-friendly)"
FULL_RANDOM = "random weights (full size)"
OTHER_MODEL = "another hub id or a local directory"
CHECKPOINTS = [REAL_MODEL, TINY_RANDOM, FULL_RANDOM, OTHER_MODEL]
RANDOM_CHECKPOINTS = {TINY_RANDOM, FULL_RANDOM}

AUDIO_SOURCES = ["the test clip (test_audio.wav)", "upload a file", "record from the microphone"]
REFERENCE_TOGGLE = "Use the reference for unfinished kernels"

# The transcript and progress redraw at most this often: on a GPU a token takes ~1 ms, and sending
# the page every token would cost more than the model.
REDRAW_SECONDS = 0.1
MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def device_label(device: str, folder: str) -> str:
    """Where a track's kernels run, as the card says it."""
    if device != "cpu":
        return f"{device} ({torch.cuda.get_device_name()})"
    if "triton" in folder:
        return "cpu (Triton interpreter)"
    if "cutile" in folder:
        return "cpu (cuTile emulator)"
    return "cpu"


def track_label(track: str) -> str:
    folder, path = track.split(":")
    return f"{folder} · {path}"


def page_message(error: UserError) -> str:
    """A UserError in the page's words: errors raised for the command line name its options."""
    if isinstance(error, teaching.KernelTodo):
        return (f"{error.kernel} in {error.file} is not written yet (a TODO kernel; see {error.guide}). "
                f"Tick “{REFERENCE_TOGGLE}” in the sidebar to run the example's kernel in its place meanwhile.")
    if isinstance(error, HubUnavailable):
        return (f"Cannot download {error.model} from the Hugging Face hub ({error.reason}). Choose "
                f"“{TINY_RANDOM}” or “{FULL_RANDOM}” under Checkpoint to try the page without a download, or "
                f"“{OTHER_MODEL}” and give the directory of a checkpoint downloaded elsewhere.")
    return str(error)


# ---- what is cached between runs and shared by every browser tab ---------------------------------


@st.cache_resource(max_entries=2, show_spinner=False)
def load_checkpoint(choice: str, model: str, dtype_name: str) -> Checkpoint:
    dtype = getattr(torch, dtype_name)
    if choice == TINY_RANDOM:
        checkpoint = open_checkpoint(str(cached_tiny_checkpoint()), dtype)
        checkpoint.description = f"tiny random weights ({checkpoint.description})"
        return checkpoint
    if choice == FULL_RANDOM:
        return open_checkpoint(DEFAULT_MODEL, dtype, random_weights=True)
    if choice == OTHER_MODEL:
        check_model_field(model)
    return open_checkpoint(model, dtype)


def check_model_field(model: str):
    """The sidebar's "Hub id or directory", checked here so its errors speak of that field."""
    path = Path(model).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        raise UserError(f"“Hub id or directory”: {model} is a directory without a config.json, not a checkpoint")
    if not path.is_dir() and (model.startswith((".", "/", "~")) or model.count("/") != 1):
        raise UserError(f"“Hub id or directory”: {model} is neither a directory on this machine nor a hub id "
                        "like org/name")


@dataclass
class LoadedModel:
    model: object
    checkpoint: Checkpoint
    summary: str  # what the path is (its module's first docstring line)
    runs: int = 0  # transcriptions so far: the first on a GPU compiles kernels and captures graphs


@st.cache_resource(max_entries=3, show_spinner=False)
def load_model(track: str, choice: str, model: str, precision: str, device: str) -> LoadedModel:
    folder, path = track.split(":")
    checkpoint = load_checkpoint(choice, model, PRECISIONS[precision].dtype_name)
    module = import_track(folder, path, device)
    loaded = module.load_model(checkpoint.config, checkpoint.weights, device, PRECISIONS[precision])
    return LoadedModel(loaded, checkpoint, path_summary(module))


@st.cache_resource
def model_lock() -> threading.Lock:
    """One transcription at a time: a loaded model's KV cache and the reference switch are shared."""
    return threading.Lock()


def reload_track_code():
    """Forget loaded models and the track modules, so edited kernels are imported afresh."""
    load_model.clear()
    folders = tuple(track_folders())
    for name in [m for m in sys.modules if m.split(".")[0] in folders]:
        del sys.modules[name]


# ---- one transcription --------------------------------------------------------------------------


@dataclass
class Run:
    track: str
    checkpoint_choice: str
    checkpoint: str
    precision: str
    device: str
    audio_name: str
    audio_seconds: float
    max_new_tokens: int
    ids: list[int] = field(default_factory=list)
    text: str = ""
    seconds: float = 0.0  # the model's time: the page's redraws are left out
    first_token_seconds: float = 0.0
    first_run: bool = False
    references: list[str] = field(default_factory=list)  # the example's kernels that stood in

    @property
    def random(self) -> bool:
        return self.checkpoint_choice in RANDOM_CHECKPOINTS

    @property
    def ms_per_token(self) -> float:
        return self.seconds * 1000 / max(len(self.ids), 1)

    @property
    def real_time_factor(self) -> float:
        return self.seconds / self.audio_seconds


def shown_text(run: Run, processor) -> str:
    if processor is None:
        return "(this checkpoint has no tokenizer: the ids) " + " ".join(map(str, run.ids))
    return decode(processor, run.ids)


def transcribe(track: str, settings: dict, audio: Audio, live=None) -> Run:
    """Load (or reuse) the track's model and transcribe ``audio``; ``live`` (placeholders for text,
    progress bar and status line) shows the transcript growing."""
    folder = track.split(":")[0]
    kernels = folder_student_kernels(folder)
    teaching.allow_references("all" if settings["allow_reference"] and kernels else None, kernels, folder)
    if live:
        live["status"].caption(f"Loading {track_label(track)} on {settings['checkpoint']}…")
    loaded = load_model(track, settings["checkpoint"], settings["model"], settings["precision"], settings["device"])
    checkpoint = loaded.checkpoint
    check_audio_length(audio.samples, checkpoint.config, audio.name)
    inputs = prepare_inputs([audio.samples], checkpoint.config, checkpoint.processor)
    run = Run(track, settings["checkpoint"], checkpoint.description, settings["precision"],
              device_label(settings["device"], folder), audio.name, audio.seconds, settings["max_new_tokens"],
              first_run=loaded.runs == 0)
    cuda = settings["device"] == "cuda"
    if cuda and loaded.runs == 0:
        if live:
            live["status"].caption("First run of this model: compiling kernels and capturing CUDA graphs…")
        loaded.model.generate(inputs, 2)
        loaded.runs += 1
    redraw = {"seconds": 0.0, "last": 0.0}

    def on_token(new_ids):
        now = time.perf_counter()
        if not run.ids:
            run.first_token_seconds = now - start
        run.ids.append(new_ids[0])
        if live is None or (now - redraw["last"] < REDRAW_SECONDS and len(run.ids) < run.max_new_tokens):
            return
        live["text"].markdown(plain(shown_text(run, checkpoint.processor)) or "…")
        live["progress"].progress(min(len(run.ids) / run.max_new_tokens, 1.0),
                                  text=f"{len(run.ids)} of at most {run.max_new_tokens} tokens · "
                                       f"{now - start - redraw['seconds']:.1f} s")
        redraw["last"] = time.perf_counter()
        redraw["seconds"] += redraw["last"] - now

    if live:
        live["status"].caption("Encoding the audio and reading the prompt (the first token comes after that)…")
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    ids = loaded.model.generate(inputs, run.max_new_tokens, on_token=on_token)[0]
    if cuda:
        torch.cuda.synchronize()
    run.seconds = time.perf_counter() - start - redraw["seconds"]
    run.ids = list(ids)  # generate's own list: the stopping rules may drop the last streamed id (eos)
    run.text = shown_text(run, checkpoint.processor)
    run.references = teaching.substituted()
    loaded.runs += 1
    if live:
        live["status"].empty()
        live["progress"].empty()
    return run


# ---- the page -----------------------------------------------------------------------------------


def plain(text: str) -> str:
    """``text`` as Markdown that shows it verbatim (random weights produce any punctuation)."""
    return MARKDOWN_SPECIALS.sub(r"\\\1", text)


def transcript_heading(random: bool) -> str:
    return "Transcript" + (" — random weights, meaningless text" if random else "")


def show_run(run: Run, live_text=None):
    """The transcript (into ``live_text``, the placeholder it grew in, when given) and the run's card."""
    (live_text or st).markdown(plain(run.text) or "(no text: the model stopped at once)")
    with st.container(border=True):
        st.markdown(f"**{track_label(run.track)}** · {run.precision} · {run.device}")
        cols = st.columns(4)
        cols[0].metric("time", f"{run.seconds * 1000:.0f} ms")
        cols[1].metric("tokens", len(run.ids))
        cols[2].metric("ms / token", f"{run.ms_per_token:.1f}")
        cols[3].metric("real-time factor", f"{run.real_time_factor:.2f}",
                       help="transcription time / audio length: below 1 is faster than real time")
        notes = [f"audio {run.audio_name}, {run.audio_seconds:.1f} s",
                 f"first token after {run.first_token_seconds * 1000:.0f} ms",
                 f"checkpoint: {run.checkpoint}"]
        if run.references:
            notes.append("the example's kernels stood in for: " + ", ".join(run.references))
        if run.first_run and not run.device.startswith("cpu"):
            notes.append("first run of this model (compilation done in an untimed warm-up)")
        st.caption(" · ".join(notes))


def sidebar(device: str) -> dict:
    folders = track_folders()
    # The CuPy baseline needs a GPU.
    tracks = [f"{f}:{p}" for f in folders for p in track_paths(f) if p != "cupy" or device == "cuda"]
    with st.sidebar:
        mode = st.radio("Mode", ["transcribe", "compare"], horizontal=True, key="mode",
                        help="compare: run several tracks on the same clip and table their times")
        if mode == "transcribe":
            default = folders.index("glm_asr_triton_example") if "glm_asr_triton_example" in folders else 0
            folder = st.selectbox("Track", folders, index=default, key="folder")
            path = st.radio("Path", track_paths(folder) if device == "cuda" else
                            [p for p in track_paths(folder) if p != "cupy"], horizontal=True, key="path",
                            help="fast: the fused production kernels; course: the course kernels alone")
            chosen = [f"{folder}:{path}"]
        else:
            preferred = [t for t in ("glm_asr_scratch:course", "glm_asr_triton_example:fast") if t in tracks]
            chosen = st.multiselect("Tracks", tracks, default=preferred or tracks[:2], key="tracks",
                                    format_func=track_label)
        checkpoint = st.selectbox("Checkpoint", CHECKPOINTS, index=0 if device == "cuda" else 1, key="checkpoint",
                                  help="random weights need no download; they transcribe nothing meaningful, "
                                       "but every kernel runs and the timings are real")
        model = DEFAULT_MODEL
        if checkpoint == OTHER_MODEL:
            model = st.text_input("Hub id or directory", DEFAULT_MODEL, key="model")
        precision = st.radio("Precision", list(PRECISIONS), index=list(PRECISIONS).index(DEFAULT_PRECISION),
                             horizontal=True, key="precision",
                             help="; ".join(f"{p.name}: {p.description}" for p in PRECISIONS.values()))
        max_new_tokens = st.slider("Max new tokens", 4, 512, 100, key="max_new_tokens")
        templates = [t for t in chosen if folder_student_kernels(t.split(":")[0])]
        allow_reference = False
        if templates:
            allow_reference = st.toggle(REFERENCE_TOGGLE, key="allow_reference",
                                        help="a template's kernels that are still TODO run as the example's; "
                                             "the run card lists them")
        st.caption(f"Device: {device}" + ("" if device == "cuda" else
                                          " (no NVIDIA GPU: Triton kernels run in its interpreter, cuTile "
                                          "kernels in the emulator; slow, but exact)"))
        if st.button("Reload track code", help="after editing a kernel: forget the loaded models and "
                                               "import the tracks afresh"):
            reload_track_code()
    return dict(mode=mode, tracks=chosen, checkpoint=checkpoint, model=model, precision=precision,
                max_new_tokens=max_new_tokens, allow_reference=allow_reference, device=device)


def audio_input() -> Audio | None:
    source = st.radio("Audio", AUDIO_SOURCES, horizontal=True, key="audio_source")
    try:
        if source == AUDIO_SOURCES[0]:
            return read_audio(TEST_CLIP, "test_audio.wav")
        if source == AUDIO_SOURCES[1]:
            upload = st.file_uploader("Upload a file", type=list(AUDIO_EXTENSIONS), key="upload")
            return None if upload is None else read_audio(io.BytesIO(upload.getvalue()), upload.name)
        recording = st.audio_input("Record from the microphone", key="recording")
        return None if recording is None else read_audio(io.BytesIO(recording.getvalue()), "the recording")
    except UserError as e:
        st.error(page_message(e))
        return None


def describe(audio: Audio):
    conversion = audio.conversion()
    st.caption(f"{audio.name}: {audio.description()} → the model reads 16 kHz mono float samples"
               + (f" ({conversion})" if conversion else ""))


def run_transcribe(settings: dict, audio: Audio):
    track = settings["tracks"][0]
    if st.button("Transcribe", type="primary", key="transcribe"):
        live_heading = st.empty()
        live = {"status": st.empty(), "progress": st.empty(), "text": st.empty()}
        live_heading.subheader(transcript_heading(settings["checkpoint"] in RANDOM_CHECKPOINTS))
        try:
            with model_lock():
                run = transcribe(track, settings, audio, live)
        except UserError as e:
            live_heading.empty()
            st.error(page_message(e))
            return
        st.session_state["last_run"] = run
        show_run(run, live["text"])
        return
    run = st.session_state.get("last_run")
    if run is not None:
        st.subheader(transcript_heading(run.random))
        show_run(run)


def run_compare(settings: dict, audio: Audio):
    import pandas as pd

    if not settings["tracks"]:
        st.info("Choose the tracks to compare in the sidebar.")
        return
    if st.button("Compare", type="primary", key="compare"):
        runs, progress = [], st.progress(0.0)
        for i, track in enumerate(settings["tracks"]):
            progress.progress(i / len(settings["tracks"]), text=f"{track_label(track)} ({i + 1} of "
                                                                f"{len(settings['tracks'])})")
            try:
                with model_lock():
                    runs.append(transcribe(track, settings, audio))
            except UserError as e:
                st.error(f"{track_label(track)}: {page_message(e)}")
        progress.empty()
        st.session_state["last_compare"] = runs
    runs = st.session_state.get("last_compare")
    if not runs:
        return
    first = runs[0]
    table = pd.DataFrame({
        "track": [track_label(r.track) for r in runs],
        "time (ms)": [round(r.seconds * 1000, 1) for r in runs],
        "tokens": [len(r.ids) for r in runs],
        "ms / token": [round(r.ms_per_token, 2) for r in runs],
        "real-time factor": [round(r.real_time_factor, 3) for r in runs],
        "ids equal to the first": ["(first)" if r is first else ("yes" if r.ids == first.ids else "no")
                                   for r in runs],
        "transcript": [r.text for r in runs],
    })
    st.subheader("Comparison" + (" — random weights, meaningless text" if first.random else ""))
    st.caption(f"{first.audio_name}, {first.audio_seconds:.1f} s · {first.precision} · {first.device} · "
               f"checkpoint: {first.checkpoint}")
    st.dataframe(table, hide_index=True)
    st.bar_chart(table.set_index("track")["ms / token"], horizontal=True, x_label="ms / token", y_label="")


def main():
    st.set_page_config(page_title="GLM-ASR kernels: live demo", page_icon="🎙️", layout="wide")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    use_device(device)  # before any track imports its kernel language
    st.title("GLM-ASR-Nano: speech to text on your kernels")
    settings = sidebar(device)
    if settings["checkpoint"] in RANDOM_CHECKPOINTS:
        st.warning(f"Checkpoint: {settings['checkpoint']}. The transcript will be meaningless text; every "
                   "kernel still runs, and the timings are real.")
    audio = audio_input()
    if audio is None:
        st.info("Upload a file or record from the microphone, then press the button.")
        return
    describe(audio)
    if settings["mode"] == "transcribe":
        run_transcribe(settings, audio)
    else:
        run_compare(settings, audio)


main()
