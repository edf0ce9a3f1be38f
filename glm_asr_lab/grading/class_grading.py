"""Grading a class: every student's copy of a template checked and timed the same way, in one table.

    ./benchmark.sh --grade SUBMISSIONS_DIR [--track triton|cutile] [--gpus N|all] [--out DIR]
                   [--force] [--only NAME,...] [--time-limit S] [--cases KERNEL,...]
                   [--model ... --random-weights --audio ... --precision ... --max-new-tokens N ...]
                   [--slurm [--slurm-arg ARG]... [--wait]]

Each sub-folder of SUBMISSIONS_DIR (or .zip / .tar / .tar.gz / .tgz archive) is one student's copy of a
template folder; its name is the student's. The grader writes into --out (default grading/NAME):

    grades.csv, grades.md, times.png   the class table, the pass rate of every kernel, the time plot
    results/NAME.json                  what the grader recorded of each student (sealed, see below)
    baselines/*.json                   the example's course and fast paths and transformers, run once
    logs/NAME.log                      what each worker printed (capped)
    reports/NAME/report.md             each student's --compare report (class_report.py)

Who does what. This process (the grader) is trusted: it reads each submission, makes a scratch copy of
it under a package name of its own (glm_asr_TRACK_submission), and starts one worker process
(grading_worker.py) on it with a wall-clock limit (--time-limit), a cap on what it may return and on
what its log keeps, its caches and temporary files in the scratch folder, and on a GPU its own
CUDA_VISIBLE_DEVICES; afterwards it checks that the GPU still runs a tiny CUDA operation in a fresh
process. The worker runs the student's code and returns one JSON result; the grader validates it
and writes every file. A worker that dies is a CRASH (its log's last line says why), one past the
limit a TIMEOUT. The course's example runs through the same worker as the baselines, once.

What a submission is judged with (the clip, a copy of which the workers read; the checkpoint; the
case table with its tolerances and every other module of glm_asr_course; the examples) is
fingerprinted before grading (files up to 64 MiB by content, larger ones, weights, by size and
modification time), and the fingerprint is stored in every result. Around each worker the grader
compares those files and its own output folder with what they were: a worker that changed one is
TAMPERED, a changed output is put back (or removed, to be graded again), and a changed judged input
stops the grading. A time is believed only where the grader's own clock, which the worker cannot
reach, agrees with it; a worker whose timing was replaced, whose timed runs gave other ids, or that
ran below the roofline floor, is TAMPERED too (integrity.py; docs/grading_integrity.md). Results are sealed with a key kept in the output folder (HMAC-SHA256), so that a
result file another process rewrote is not believed. This is process isolation, not a security
sandbox: the worker runs as the same user, with the same file system and network (README says how to
run the grader in a container without a network).

Re-running grades only what changed: a result is reused when its key (a hash of the submission's
files, its track and the fingerprint) is that of the submission now, unless --force. Results are
written as each worker ends, so an interrupted run resumes where it stopped.

Locally, one worker at a time on a CPU and one per GPU (--gpus). With --slurm the same task (the
grader process for one submission: ``--plan PLAN --task NAME``) runs as a task of a Slurm job array,
one GPU each, and a job after it (``--collect``) builds the same tables from the result files.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import hmac
import json
import os
import queue
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from glm_asr_course.errors import UserError, run_cli
from glm_asr_lab.grading import class_report, integrity, slurm
from glm_asr_course.command_line import (ArgumentParser, add_common_args, expected_text, positive_int, refuse_interpreted_full_size,
                           resolve_device)
from glm_asr_course.tracks import REPO_ROOT, declared_language

TRACKS = ("triton", "cutile")
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
MAX_SUBMISSION_BYTES = 100 << 20  # a student's folder is a few hundred kB; more is a mistake or a bomb
RESULT_LIMIT_BYTES = 8 << 20  # a worker's result: ~60 kernel rows and a few hundred ids
LOG_HEAD_BYTES, LOG_TAIL_BYTES = 256 << 10, 64 << 10  # what a log keeps of a worker's output
HASHED_WHOLE_BYTES = 64 << 20  # judged files up to this size are fingerprinted by content
HEALTH_TIMEOUT_S = 120
SLURM_MARGIN_S = 600  # a Slurm task's limit beyond --time-limit: copying, the GPU health check, Python start
# Options of benchmark.sh that mean nothing here: the grader picks the path, times on its own rules
# (grading_worker.time_transcriptions) and writes its own files.
NOT_FOR_GRADING = ("path", "warmup", "runs", "json", "allow_reference", "dtype")
# The grader's running workers, so that an interrupt can stop them; once STOPPING is set, a worker
# that ends was stopped by the interrupt, and nothing is recorded of it.
RUNNING: set[subprocess.Popen] = set()
STOPPING = threading.Event()


class SubmissionProblem(Exception):
    """A submission the grader cannot even start: its row is a CRASH with this message."""


class GradingStopped(Exception):
    """The grading was interrupted while this worker ran."""


# ------------------------------------------------------------------------------------------------
# Submissions: read into memory, their track, their key
# ------------------------------------------------------------------------------------------------


def submission_sources(directory: Path) -> dict[str, Path]:
    """{student name: folder or archive} of SUBMISSIONS_DIR. Names keep letters, digits and ._-."""
    sources = {}
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith((".", "_")):
            continue
        if entry.is_dir():
            stem = entry.name
        elif entry.is_file() and entry.name.lower().endswith(ARCHIVE_SUFFIXES):
            stem = entry.name[:-len(next(s for s in ARCHIVE_SUFFIXES if entry.name.lower().endswith(s)))]
        else:
            continue
        name = re.sub(r"[^A-Za-z0-9._-]", "_", stem)
        if name.startswith("baseline-"):
            raise UserError(f"{entry.name} in {directory}: names starting with baseline- are the grader's; rename it")
        if name in sources:
            raise UserError(f"{sources[name].name} and {entry.name} in {directory} are both student {name}; rename one")
        sources[name] = entry
    return sources


def is_source_file(relative: str) -> bool:
    """Whether a file is part of a folder's source: not a cache, a compiled file, or a hidden one (version
    control, editors, macOS archive metadata)."""
    parts = PurePosixPath(relative).parts
    return not any(p.startswith(".") or p in ("__pycache__", "__MACOSX") for p in parts) and not relative.endswith(".pyc")


def read_submission(source: Path) -> dict[str, bytes]:
    """Every file of a submission (folder or archive) as {relative path: bytes}: regular files only,
    no caches or hidden files, paths that stay inside it, MAX_SUBMISSION_BYTES in all."""
    files, total = {}, 0

    def add(relative: str, read):
        nonlocal total
        path = PurePosixPath(relative)
        if path.is_absolute() or ".." in path.parts:
            raise SubmissionProblem(f"{source.name}: a path that leaves the folder ({relative})")
        if is_source_file(relative):
            data = read()
            total += len(data)
            if total > MAX_SUBMISSION_BYTES:
                raise SubmissionProblem(f"{source.name}: more than {MAX_SUBMISSION_BYTES >> 20} MB of files")
            files[path.as_posix()] = data

    try:
        if source.is_dir():
            for path in sorted(source.rglob("*")):
                if path.is_file() and not path.is_symlink():
                    add(path.relative_to(source).as_posix(), path.read_bytes)
        elif source.name.lower().endswith(".zip"):
            with zipfile.ZipFile(source) as archive:
                for info in archive.infolist():
                    if not info.is_dir():
                        add(info.filename, lambda info=info: archive.read(info))
        else:
            with tarfile.open(source) as archive:
                for member in archive.getmembers():
                    if member.isfile():
                        add(member.name, lambda member=member: archive.extractfile(member).read())
    except (OSError, zipfile.BadZipFile, tarfile.TarError) as error:
        raise SubmissionProblem(f"{source.name}: cannot be read ({error})") from None
    return files


def track_package(files: dict[str, bytes], name: str, track: str | None) -> tuple[str, dict[str, bytes]]:
    """The track folder inside a submission's files (the folder holding model.py, at the top or one
    level down) and its track: ``track`` when the class has one (--track), else told by its files."""
    tops = sorted({rel[:-len("model.py")] for rel in files if rel == "model.py" or rel.endswith("/model.py")
                   and rel.count("/") == 1})
    if len(tops) != 1:
        where = "no model.py" if not tops else f"model.py in {len(tops)} folders"
        raise SubmissionProblem(f"{name}: not one copy of a template folder ({where})")
    package = {rel[len(tops[0]):]: data for rel, data in files.items() if rel.startswith(tops[0])}
    language = declared_language(package.get("__init__.py", b""))
    found = [language] if language in ("triton", "cutile") else []
    if track is not None and found and found != [track]:
        raise SubmissionProblem(f"{name}: a {found[0]} folder, and the class is graded as {track} (--track)")
    if track is None and len(found) != 1:
        raise SubmissionProblem(f"{name}: cannot tell its track from its files; pass --track")
    return track or found[0], package


def files_hash(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for relative in sorted(files):
        digest.update(relative.encode() + b"\0" + hashlib.sha256(files[relative]).digest())
    return digest.hexdigest()


def task_key(fingerprint: str, *parts: str) -> str:
    return hashlib.sha256("\0".join((fingerprint, *parts)).encode()).hexdigest()


# ------------------------------------------------------------------------------------------------
# The plan: settings, judged inputs and tasks, shared by every process of one grading
# ------------------------------------------------------------------------------------------------


@dataclass
class Task:
    name: str  # the student's name; baseline-TRACK-PATH or baseline-transformers for the baselines
    kind: str  # "submission" or "baseline"
    track: str | None  # None: a submission whose track could not be told (problem says why)
    path: str  # what the worker runs: course, fast, or transformers
    key: str  # the hash a stored result must carry to be reused
    source: str | None = None  # the submission's folder or archive
    problem: str = ""  # why the submission cannot be started (its row is a CRASH)

    @property
    def result_file(self) -> str:
        return f"{'baselines' if self.kind == 'baseline' else 'results'}/{self.name}.json"


@dataclass
class Plan:
    out: str
    submissions_dir: str
    device: str  # cuda or cpu: where the workers run
    benchmark_argv: list[str]  # the benchmark options every worker runs with
    cases: list[str] | None  # the kernels whose cases run (None: every case)
    time_limit_s: int
    expected: str | None  # the expected transcript (a real checkpoint and a clip with one)
    judged_files: list[str]
    fingerprint: str
    tasks: list[Task]

    @property
    def path(self) -> Path:
        return Path(self.out) / "plan.json"

    def task(self, name: str) -> Task:
        for task in self.tasks:
            if task.name == name:
                return task
        raise UserError(f"{self.path}: no task {name}")

    def current_fingerprint(self) -> str:
        """The fingerprint of the judged files as they are now, with the options every worker runs with
        (the clip's copy aside: the original is among the files)."""
        options = {"argv": self.benchmark_argv[2:], "cases": self.cases, "expected": self.expected}
        digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode())
        for name in self.judged_files:
            digest.update(f"{name}\0{signature(Path(name))}\n".encode())
        return digest.hexdigest()

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def load(cls, path: str) -> Plan:
        try:
            data = json.loads(Path(path).read_text())
            return cls(**dict(data, tasks=[Task(**t) for t in data["tasks"]]))
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise UserError(f"--plan {path}: not a grading plan ({error})") from None


def signature(path: Path) -> str | None:
    """A file's content hash (its size and modification time above HASHED_WHOLE_BYTES); None if missing."""
    try:
        stat = path.stat()
        if stat.st_size > HASHED_WHOLE_BYTES:
            return f"size {stat.st_size} mtime {stat.st_mtime_ns}"
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def judged_files(clip: Path, model_dir: Path | None) -> list[str]:
    """The files a submission is judged with: the clip, the checkpoint, glm_asr_course (the case table
    and its tolerances, the model, the timer), glm_asr_lab (this grader, its worker, the roofline floor),
    cutile_emulator (what runs cuTile kernels on a CPU), the examples (the baselines, the TODO
    stand-ins' references)."""
    files = [clip]
    if model_dir is not None:
        files += sorted(p for p in model_dir.rglob("*") if p.is_file())
    for package in ("glm_asr_course", "glm_asr_lab", "cutile_emulator"):
        files += sorted((REPO_ROOT / package).rglob("*.py"))
    for track in TRACKS:
        files += sorted(p for p in (REPO_ROOT / f"glm_asr_{track}_example").rglob("*")
                        if p.is_file() and is_source_file(p.relative_to(REPO_ROOT).as_posix()))
    return [str(p.resolve()) for p in files]


# ------------------------------------------------------------------------------------------------
# The output folder: sealed results, the watch on what a worker may not change
# ------------------------------------------------------------------------------------------------


class Store:
    """The grader's output folder. Results are sealed (HMAC-SHA256 with the folder's key), so a result
    another process rewrote is not believed; ``watch`` and ``unexplained_changes`` tell what changed
    while a worker ran that no grader wrote; ``put_back`` undoes it."""

    UNWATCHED = ("scratch", "logs", "slurm")  # written while workers run: by workers, by Slurm, by the grader

    def __init__(self, out: Path):
        self.out = out
        self.lock = threading.Lock()
        self.known: dict[Path, bytes] = {}  # files as this process last wrote or read them
        key_file = out / ".grader_key"
        if not key_file.is_file():
            out.mkdir(parents=True, exist_ok=True)
            key_file.touch(mode=0o600)
            key_file.write_bytes(secrets.token_bytes(32))
        self.key = self._remember(key_file)

    def _remember(self, path: Path) -> bytes:
        data = path.read_bytes()
        self.known[path] = data
        return data

    def write(self, relative: str, data: bytes):
        """Write atomically (a reader never sees half a file) and remember it; under the lock, so that
        no watch of this process sees the temporary file."""
        path = self.out / relative
        with self.lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            temporary.write_bytes(data)
            os.replace(temporary, path)
            self.known[path] = data

    def seal(self, record: dict) -> str:
        body = json.dumps({k: v for k, v in record.items() if k != "seal"}, sort_keys=True).encode()
        return hmac.new(self.key, body, hashlib.sha256).hexdigest()

    def write_result(self, task: Task, record: dict):
        self.write(task.result_file, (json.dumps(dict(record, seal=self.seal(record)), indent=1) + "\n").encode())

    def read_result(self, task: Task) -> dict | None:
        """The stored result of ``task`` if it is one the grader wrote (sealed, for this task), else None."""
        path = self.out / task.result_file
        record = self._sealed(path, task.name)
        if record is not None:
            with self.lock:
                self.known[path] = path.read_bytes()
        return record

    def _sealed(self, path: Path, name: str) -> dict | None:
        try:
            record = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("task") != name or not hmac.compare_digest(
                str(record.get("seal")), self.seal(record)):
            return None
        return record

    def watch(self, judged: list[str]) -> dict[str, str | None]:
        """Signatures of the judged files and of every file of the output folder but the unwatched ones."""
        # (A grader of another process writes its results through .NAME.PID.tmp files.)
        mine = [p for p in self.out.rglob("*") if p.is_file() and not re.fullmatch(r"\..*\.\d+\.tmp", p.name)
                and p.relative_to(self.out).parts[0] not in self.UNWATCHED]
        with self.lock:
            return {str(p): signature(p) for p in [*map(Path, judged), *mine]}

    def unexplained_changes(self, before: dict, after: dict) -> list[str]:
        """Files that changed between two watches and are not a sealed result a grader wrote."""
        changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        return [p for p in changed if not self._is_result(Path(p))]

    def _is_result(self, path: Path) -> bool:
        inside = path.parent.parent == self.out and path.parent.name in ("results", "baselines")
        return inside and path.suffix == ".json" and self._sealed(path, path.stem) is not None

    def put_back(self, paths: list[str]):
        """Undo changes inside the output folder: what this process wrote or read goes back, anything
        else (a table, a result another process wrote) is removed, to be made or graded again."""
        for name in paths:
            path = Path(name)
            if self.out not in path.parents:
                continue
            if path in self.known:
                self.write(str(path.relative_to(self.out)), self.known[path])
            else:
                path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------
# One worker process
# ------------------------------------------------------------------------------------------------


class CappedReader(threading.Thread):
    """Drains a pipe, keeping its first ``head`` and last ``tail`` bytes and counting the rest."""

    def __init__(self, pipe, head: int, tail: int):
        super().__init__(daemon=True)
        self.pipe, self.head_limit, self.tail_limit = pipe, head, tail
        self.head, self.tail, self.total = bytearray(), collections.deque(), 0
        self.tail_bytes = 0

    def run(self):
        while chunk := self.pipe.read1(1 << 16):
            self.total += len(chunk)
            room = self.head_limit - len(self.head)
            self.head += chunk[:max(room, 0)]
            rest = chunk[max(room, 0):]
            if rest and self.tail_limit:
                self.tail.append(rest)
                self.tail_bytes += len(rest)
                while self.tail_bytes - len(self.tail[0]) >= self.tail_limit:
                    self.tail_bytes -= len(self.tail.popleft())

    @property
    def overflowed(self) -> bool:
        return self.total > self.head_limit

    def text(self) -> bytes:
        tail = b"".join(self.tail)[-self.tail_limit:] if self.tail_limit else b""
        left_out = self.total - len(self.head) - len(tail)
        return bytes(self.head) + (f"\n[... {left_out} bytes left out ...]\n".encode() if left_out else b"") + tail


@dataclass
class WorkerOutcome:
    returncode: int | None
    timed_out: bool
    seconds: float
    result: CappedReader
    log: CappedReader
    seen: dict  # the windows of its check run and timed runs on this process's clock (integrity.Announcements)


def run_worker(request: dict, scratch: Path, gpu: str | None, limit_s: int) -> WorkerOutcome:
    """Start grading_worker on ``request`` in ``scratch``, wait at most ``limit_s``, then stop it and
    everything it started (its own process group). Its announcements of its timed windows come on a
    pipe of their own, timestamped here as they arrive (integrity.py)."""
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    # Its caches in its scratch folder, none shared: the course baseline measures the device's peaks (the
    # roofline floor) afresh, not from a cache in the user's home that an earlier submission could have written.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
               PYTHONDONTWRITEBYTECODE="1", TMPDIR=str(scratch / "tmp"), TRITON_CACHE_DIR=str(scratch / "triton_cache"),
               GLM_ASR_CACHE_DIR=str(scratch / "cache"))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    started = time.monotonic()
    announcements_fd, announce_fd = os.pipe()
    announcements = integrity.Announcements(announcements_fd)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "glm_asr_lab.grading.grading_worker", json.dumps(dict(request, announce_fd=announce_fd))],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=scratch, env=env,
            start_new_session=True, pass_fds=(announce_fd,))
    except BaseException:
        os.close(announcements_fd)
        raise
    finally:
        os.close(announce_fd)  # the worker's copy is the only writer left: its end is the pipe's end
    announcements.start()
    RUNNING.add(process)
    result = CappedReader(process.stdout, RESULT_LIMIT_BYTES, 0)
    log = CappedReader(process.stderr, LOG_HEAD_BYTES, LOG_TAIL_BYTES)
    result.start()
    log.start()
    timed_out = False
    try:
        process.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        stop_group(process)
        RUNNING.discard(process)
    if STOPPING.is_set():
        raise GradingStopped()
    # A grandchild that left the process group could hold the pipes open: do not wait for it forever.
    result.join(timeout=10)
    log.join(timeout=10)
    announcements.join(timeout=10)
    return WorkerOutcome(process.returncode, timed_out, time.monotonic() - started, result, log,
                         announcements.windows())


def stop_group(process: subprocess.Popen):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def last_line(text: bytes) -> str:
    lines = [line.strip() for line in text.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def judge_outcome(outcome: WorkerOutcome, limit_s: int, device: str) -> dict:
    """What the grader makes of a worker's end: DONE with its result, TIMEOUT or CRASH, with a note; TAMPERED,
    with its result and why, where its times cannot be believed (integrity.py: on ``device``, "cpu" or "cuda")."""
    notes = []
    if outcome.log.overflowed:
        notes.append(f"printed {outcome.log.total / 1e6:.1f} MB; its log keeps the first {LOG_HEAD_BYTES >> 10} kB "
                     f"and the last {LOG_TAIL_BYTES >> 10} kB")
    record = {"seconds": round(outcome.seconds, 1), "log_bytes": outcome.log.total, "worker": None}
    if outcome.timed_out:
        return dict(record, status="TIMEOUT", note="; ".join([f"stopped after {limit_s} s (--time-limit)", *notes]))
    if outcome.returncode != 0 or not outcome.result.total:
        why = last_line(outcome.log.text()) or (f"killed by signal {-outcome.returncode}" if (outcome.returncode or 0) < 0
                                               else f"exit code {outcome.returncode}")
        return dict(record, status="CRASH", note="; ".join([why, *notes]))
    if outcome.result.overflowed:
        return dict(record, status="CRASH", note=f"returned more than {RESULT_LIMIT_BYTES >> 20} MB")
    try:
        worker = class_report.validated_worker_result(json.loads(bytes(outcome.result.head)))
    except ValueError as error:
        return dict(record, status="CRASH", note=f"returned an invalid result ({error})")
    record.update(seen=outcome.seen, worker=worker)
    problems = integrity.timing_problems(worker["e2e"], outcome.seen, device)
    if worker["replaced"]:
        problems.insert(0, f"replaced in its process: {', '.join(worker['replaced'])}")
    if problems:
        return dict(record, status="TAMPERED", note="; ".join(problems + notes))
    return dict(record, status="DONE", note="; ".join(notes))


def gpu_health(gpu: str | None) -> str:
    """"ok" when a fresh process still runs a tiny CUDA operation on the GPU, else why not."""
    if gpu is None:
        return "not checked (CPU run)"
    probe = ("import torch; x = torch.ones(1 << 20, device='cuda'); "
             "assert float(x.sum()) == float(1 << 20); torch.cuda.synchronize()")
    try:
        result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=HEALTH_TIMEOUT_S,
                                env=dict(os.environ, CUDA_VISIBLE_DEVICES=gpu))
    except subprocess.TimeoutExpired:
        return f"unhealthy: a tiny CUDA operation did not finish in {HEALTH_TIMEOUT_S} s"
    return "ok" if result.returncode == 0 else f"unhealthy: {last_line(result.stderr.encode())}"


# ------------------------------------------------------------------------------------------------
# One task: what the local pool and a Slurm array task both run
# ------------------------------------------------------------------------------------------------


def worker_request(plan: Plan, task: Task, root: Path | None) -> dict:
    folder = f"glm_asr_{task.track}_{'submission' if root else 'example'}"
    return {"folder": folder, "track": task.track, "root": str(root) if root else None, "path": task.path,
            "cases": plan.cases, "benchmark_argv": plan.benchmark_argv,
            "roofline": task.name == f"baseline-{task.track}-course"}


def grade_task(plan: Plan, store: Store, task: Task, gpu: str | None) -> dict:
    """Grade one submission (or run one baseline) in a worker and write its sealed result. Raises a
    UserError when the worker changed a file every submission is judged with."""
    record = {"task": task.name, "kind": task.kind, "track": task.track, "path": task.path, "key": task.key,
              "fingerprint": plan.fingerprint, "gpu": gpu, "log": f"logs/{task.name}.log"}
    scratch = Path(plan.out) / "scratch" / task.name
    shutil.rmtree(scratch, ignore_errors=True)
    root = None
    try:
        if task.problem:
            raise SubmissionProblem(task.problem)
        if task.kind == "submission":
            track, package = track_package(read_submission(Path(task.source)), task.name, task.track)
            record["key"] = task_key(plan.fingerprint, track, files_hash(package))  # what was graded, now
            root = scratch / "copy"
            for relative, data in package.items():
                target = root / f"glm_asr_{track}_submission" / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
    except SubmissionProblem as problem:
        record.update(status="CRASH", note=str(problem), seconds=0.0, log_bytes=0, worker=None, gpu_health="not run")
        store.write_result(task, record)
        return record
    before = store.watch(plan.judged_files)
    outcome = run_worker(worker_request(plan, task, root), scratch, gpu, plan.time_limit_s)
    after = store.watch(plan.judged_files)
    record.update(judge_outcome(outcome, plan.time_limit_s, plan.device), gpu_health=gpu_health(gpu))
    changed = store.unexplained_changes(before, after)
    if changed:
        record.update(status="TAMPERED", note="; ".join(filter(None, [
            f"the worker changed {', '.join(changed[:3])}" + (f" and {len(changed) - 3} more" if len(changed) > 3 else ""),
            record["note"] if record["status"] == "TAMPERED" else ""])))
        store.put_back(changed)
    store.write(record["log"], outcome.log.text())
    store.write_result(task, record)
    shutil.rmtree(scratch, ignore_errors=True)
    altered = [name for name in changed if name in plan.judged_files]
    if altered:
        raise UserError(f"{task.name}'s worker changed {altered[0]}, which every submission is judged with; "
                        f"put it back (git checkout, or download the checkpoint again) and grade again")
    return record


def pending_tasks(plan: Plan, store: Store, force: bool, only: set[str] | None) -> list[Task]:
    """The tasks to run: those without a stored result of their key, or all of them (--force);
    --only restricts both to the students named (baselines still run where they have no result)."""
    chosen = []
    for task in plan.tasks:
        named = only is None or task.name in only
        stored = store.read_result(task)
        if task.kind == "submission" and not named:
            continue
        if (force and named) or stored is None or stored["key"] != task.key:
            chosen.append(task)
    return chosen


# ------------------------------------------------------------------------------------------------
# Locally: a pool of workers, one per GPU (one on a CPU)
# ------------------------------------------------------------------------------------------------


def run_pool(plan: Plan, store: Store, tasks: list[Task], slots: list[str | None], say) -> list[str | None]:
    """Run ``tasks`` with one worker per slot at a time; returns the slots still healthy. A GPU that
    fails its health check after a worker takes no more tasks."""
    todo: queue.Queue[Task] = queue.Queue()
    for task in tasks:
        todo.put(task)
    healthy, errors = list(slots), []

    def serve(slot):
        while not errors and not STOPPING.is_set():
            try:
                task = todo.get_nowait()
            except queue.Empty:
                return
            try:
                record = grade_task(plan, store, task, slot)
            except GradingStopped:
                return
            except UserError as error:
                errors.append(error)
                return
            say(record)
            if record["gpu_health"].startswith("unhealthy"):
                healthy.remove(slot)
                return

    threads = [threading.Thread(target=serve, args=(slot,), daemon=True) for slot in slots]
    for thread in threads:
        thread.start()
    try:
        while any(thread.is_alive() for thread in threads):
            time.sleep(0.2)
    except KeyboardInterrupt:
        STOPPING.set()
        for process in list(RUNNING):
            stop_group(process)
        raise
    if errors:
        raise errors[0]
    if not todo.empty():
        raise UserError(f"every GPU failed its health check after a worker; {todo.qsize()} tasks were not run "
                        f"(see the gpu_health of the results in {store.out})")
    return healthy


def run_locally(plan: Plan, store: Store, tasks: list[Task], slots: list[str | None]):
    total = len(tasks)
    done = [0]

    def say(record):
        done[0] += 1
        print(f"[{done[0]}/{total}] {class_report.progress_line(plan, store, record)}", flush=True)

    baselines = [t for t in tasks if t.kind == "baseline"]
    slots = run_pool(plan, store, baselines, slots, say) if baselines else slots
    for track in sorted({t.track for t in plan.tasks if t.kind == "baseline"}):
        course = store.read_result(plan.task(f"baseline-{track}-course"))
        if course is None or course["status"] != "DONE" or course["worker"]["e2e"]["status"] != "RUN":
            note = "no result" if course is None else course["note"] or course["worker"]["e2e"].get("note", "")
            raise UserError(f"the course baseline (glm_asr_{track}_example, course path) did not run: {note}; "
                            f"nothing was graded (its log: {store.out / 'logs' / f'baseline-{track}-course.log'})")
    run_pool(plan, store, [t for t in tasks if t.kind == "submission"], slots, say)


def gpu_slots(requested: str | None, device: str) -> list[str | None]:
    """The GPUs the local workers use, by the ids CUDA_VISIBLE_DEVICES gives them; [None] on a CPU."""
    if device == "cpu":
        if requested is not None:
            raise UserError("--gpus: the grading runs on the CPU (no CUDA GPU is visible, or --device cpu), "
                            "one worker at a time")
        return [None]
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = ([d.strip() for d in visible.split(",") if d.strip()] if visible
           else [str(i) for i in range(torch.cuda.device_count())])
    if requested in (None, "all"):
        return ids if requested == "all" else ids[:1]
    if not requested.isdigit() or int(requested) < 1:
        raise UserError(f"--gpus {requested}: a number of GPUs (1 or more) or 'all'")
    if int(requested) > len(ids):
        raise UserError(f"--gpus {requested}: only {len(ids)} GPU(s) visible")
    return ids[:int(requested)]


# ------------------------------------------------------------------------------------------------
# On a Slurm cluster: the same tasks as a job array, the same tables from a collect job
# ------------------------------------------------------------------------------------------------


def grader_command(plan: Plan, *options: str) -> list[str]:
    return [sys.executable, "-m", "glm_asr_lab.grading.class_grading", "--plan", str(plan.path), *options]


def submit_to_slurm(plan: Plan, tasks: list[Task], slurm_args: list[str], wait: bool):
    directory = Path(plan.out) / "slurm"
    limit = plan.time_limit_s + SLURM_MARGIN_S
    script = slurm.write_array_script(
        directory / "array.sbatch", [grader_command(plan, "--task", t.name) for t in tasks],
        log_dir=directory / "logs", time_limit=f"{limit // 3600:02d}:{limit // 60 % 60:02d}:{limit % 60:02d}",
        gpus=0 if plan.device == "cpu" else 1, workdir=REPO_ROOT)
    array_id = slurm.submit(script, slurm_args)
    collect_id = slurm.submit_after(array_id, grader_command(plan, "--collect"), log_dir=directory / "logs",
                                    workdir=REPO_ROOT, extra_args=slurm_args)
    print(f"Submitted job array {array_id} ({len(tasks)} tasks: {script}) and the collect job {collect_id} after it.")
    print(f"The tables will be in {Path(plan.out) / 'grades.md'}; follow with: squeue -j {array_id},{collect_id}")
    if wait:
        states = slurm.wait_for_jobs([array_id, collect_id], timeout_s=limit * len(tasks) + 600)
        print(f"Jobs ended: {', '.join(f'{job} {state}' for job, state in sorted(states.items()))}")
        log = directory / "logs" / f"glm-asr-collect-{collect_id}.out"
        print(log.read_text().strip() if log.is_file() else f"the collect job left no log ({log})")


# ------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="./benchmark.sh --grade", description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", nargs="?", metavar="SUBMISSIONS_DIR",
                        help="a folder with one sub-folder (or archive) per student: their copy of a template")
    parser.add_argument("--track", choices=TRACKS, help="the class's track (default: told by each folder's files)")
    parser.add_argument("--gpus", metavar="N|all", help="grade on N GPUs (or all), one worker each (default 1)")
    parser.add_argument("--out", metavar="DIR", help="where the results and tables go (default grading/NAME)")
    parser.add_argument("--force", action="store_true", help="grade again what has a result of the same files")
    parser.add_argument("--only", metavar="NAME[,NAME...]", help="only these students (with --force: again)")
    parser.add_argument("--time-limit", type=positive_int, default=1800, metavar="S",
                        help="wall-clock seconds one submission may take (default 1800); past it: TIMEOUT")
    parser.add_argument("--cases", metavar="KERNEL[,KERNEL...]",
                        help="run only these kernels' cases (default: every case of the case table)")
    parser.add_argument("--slurm", action="store_true",
                        help="submit the submissions as a Slurm job array (one GPU each) and a collect job after it")
    parser.add_argument("--slurm-arg", action="append", default=[], metavar="ARG",
                        help="pass ARG to sbatch (--partition=gpu, --account=..., --cpus-per-task=2); repeatable")
    parser.add_argument("--wait", action="store_true", help="with --slurm: wait until the table is written")
    parser.add_argument("--plan", help=argparse.SUPPRESS)  # a Slurm task's or collect job's grading plan
    parser.add_argument("--task", help=argparse.SUPPRESS)  # the one task to run
    parser.add_argument("--collect", action="store_true", help=argparse.SUPPRESS)  # build the tables
    add_common_args(parser, runs_default=1)
    for action in parser._actions:  # benchmark.sh's options that a grading refuses (check_options): not in --help
        if action.dest in NOT_FOR_GRADING:
            action.help = argparse.SUPPRESS
    return parser


def check_options(args, parser):
    """One line (exit 2) for every option that does not fit a grading."""
    defaults = parser.parse_args([])
    for option in NOT_FOR_GRADING:
        if getattr(args, option) != getattr(defaults, option):
            raise UserError(f"--{option.replace('_', '-')} does not go with --grade: the grader runs the course "
                            "path, times on its own rules and writes its own files (see GUIDE.md, For graders)")
    if args.submissions is None:
        raise UserError("usage: ./benchmark.sh --grade SUBMISSIONS_DIR [options] (see --help)")
    if (args.slurm_arg or args.wait) and not args.slurm:
        raise UserError("--slurm-arg and --wait go with --slurm")
    if args.slurm and args.gpus:
        raise UserError("--gpus goes with grading on this machine; with --slurm each task gets one GPU")


def make_plan(args) -> Plan:
    """Check the inputs (one line for a bad one), fingerprint what submissions are judged with, list the tasks."""
    from glm_asr_course.kernels.kernel_cases import CASES
    from glm_asr_course.model import checkpoint as ckpt
    from glm_asr_course.model.audio import load_audio

    submissions = Path(args.submissions)
    if not submissions.is_dir():
        raise UserError(f"{args.submissions}: not a folder of submissions")
    out = Path(args.out or Path("grading") / submissions.resolve().name).resolve()
    if submissions.resolve() in (out, *out.parents):
        raise UserError(f"--out {out}: inside {submissions}, where it would be taken for a submission")
    sources = submission_sources(submissions)
    if not sources:
        raise UserError(f"{args.submissions}: no sub-folders or archives ({', '.join(ARCHIVE_SUFFIXES)}) in it")
    cases = sorted({c.strip() for c in args.cases.split(",") if c.strip()}) if args.cases else None
    known = sorted({case.kernel for case in CASES})
    if cases is not None and (not cases or set(cases) - set(known)):
        raise UserError(f"--cases {args.cases}: the case table's kernels are {', '.join(known)}")
    device = args.device or ("cuda" if args.slurm else resolve_device(None))
    if device == "cpu":
        refuse_interpreted_full_size(args.model, args.random_weights, f"glm_asr_{args.track or 'triton'}_example", "course")
    load_audio(args.audio)  # a clip that cannot be read: its one line, before anything runs
    model_dir = ckpt.local_model_dir(args.model) if args.random_weights else ckpt.resolve_model_dir(args.model)
    clip = Path(args.audio).resolve()

    out.mkdir(parents=True, exist_ok=True)
    judged_clip = out / "judged" / f"clip{clip.suffix}"
    if signature(judged_clip) != signature(clip):
        judged_clip.parent.mkdir(exist_ok=True)
        judged_clip.unlink(missing_ok=True)
        shutil.copyfile(clip, judged_clip)
        judged_clip.chmod(0o444)
    argv = ["--audio", str(judged_clip), "--model", str(model_dir or args.model), "--device", device,
            "--min-new-tokens", str(args.min_new_tokens)]
    argv += ["--random-weights"] if args.random_weights else []
    argv += ["--precision", args.precision] if args.precision else []
    argv += ["--max-new-tokens", str(args.max_new_tokens)] if args.max_new_tokens else []
    plan = Plan(str(out), str(submissions.resolve()), device, argv, cases, args.time_limit, expected_text(args.audio, args.expected),
                judged_files(clip, model_dir), "", [])
    plan.fingerprint = fingerprint = plan.current_fingerprint()

    tasks = []
    for name, source in sources.items():
        # A submission that cannot be graded keeps a key of what it holds, so that a fixed one runs again.
        track, key, problem = args.track, task_key(fingerprint, "unreadable", str(signature(source))), ""
        try:
            files = read_submission(source)
            key = task_key(fingerprint, "not a template copy", files_hash(files))
            track, package = track_package(files, name, args.track)
            key = task_key(fingerprint, track, files_hash(package))
        except SubmissionProblem as error:
            problem = str(error)
        tasks.append(Task(name, "submission", track, "course", key, str(source.resolve()), problem))
    tracks = sorted({t.track for t in tasks if t.track})
    baselines = [Task(f"baseline-{track}-{path}", "baseline", track, path, task_key(fingerprint, track, path))
                 for track in tracks for path in ("course", "fast")]
    if tracks:
        baselines.append(Task("baseline-transformers", "baseline", tracks[0], "transformers",
                              task_key(fingerprint, "transformers")))
    plan.tasks = baselines + tasks
    return plan


def interrupt(signum, frame):
    """SIGTERM (Slurm's scancel, a container stopping) ends the grader as Ctrl-C does."""
    raise KeyboardInterrupt()


def main(argv) -> int:
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        return grade_class(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def grade_class(argv) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.plan:  # a task of a Slurm array, or its collect job
        plan = Plan.load(args.plan)
        store = Store(Path(plan.out))
        if plan.current_fingerprint() != plan.fingerprint:
            raise UserError(f"a file the submissions are judged with changed since {plan.path} was written "
                            "(the clip, the checkpoint, glm_asr_course, the examples); grade again")
        if args.collect:
            return class_report.write_class_tables(plan, store)
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0") if plan.device == "cuda" else None
        record = grade_task(plan, store, plan.task(args.task), gpu)
        print(class_report.progress_line(plan, store, record))
        return 1 if record["gpu_health"].startswith("unhealthy") else 0
    check_options(args, parser)
    plan = make_plan(args)
    store = Store(Path(plan.out))
    store.write("plan.json", plan.to_json().encode())
    only = {n.strip() for n in args.only.split(",")} if args.only else None
    unknown = sorted((only or set()) - {t.name for t in plan.tasks if t.kind == "submission"})
    if unknown:
        raise UserError(f"--only: no submission named {', '.join(unknown)} in {args.submissions}")
    tasks = pending_tasks(plan, store, args.force, only)
    skipped = len([t for t in plan.tasks if only is None or t.kind == "baseline" or t.name in only]) - len(tasks)
    print(f"Grading {len([t for t in plan.tasks if t.kind == 'submission'])} submissions of {args.submissions} into "
          f"{plan.out}: {len(tasks)} to run, {skipped} unchanged since their result (--force runs them again)")
    if args.slurm and tasks:
        submit_to_slurm(plan, tasks, args.slurm_arg, args.wait)
        return 0
    if tasks:
        try:
            run_locally(plan, store, tasks, gpu_slots(args.gpus, plan.device))
        except KeyboardInterrupt:
            print(f"interrupted: the results so far are kept in {plan.out}; the same command goes on from there",
                  file=sys.stderr)
            raise
    return class_report.write_class_tables(plan, store)


if __name__ == "__main__":
    run_cli(main)
