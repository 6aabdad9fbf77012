"""The demos' preparations as entries of the build cache (tests/build_cache.py), and the agentic one's
background preparation.

The agentic demo model takes ~2-3 min of warm start (1,080 optimizer steps on one core) when its entry has
to be built. `start_agentic_prefetch` builds it in a child process at the lowest CPU priority while the rest
of the session runs (most tests leave one of the two cores idle most of the time); the `agentic_model`
fixture then finds the entry, or waits for the child on the entry's lock. `python -m tests.pipeline.demo_cache`
builds the entry in the foreground.
"""

import contextlib
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from tests.build_cache import REPO, cache_root, cached_copy, cached_entry, key_inputs, package_root

RLVR_DEMO, AGENTIC_DEMO, CODE_JUDGE_DEMO, TOOL_DEMO = "rlvr-demo", "agentic-demo", "code-judge-demo", "tool-demo"


@contextlib.contextmanager
def one_thread():
    """Builds run on one torch thread, as the examples' prepare_demo.py scripts and CI do: the weights do not
    then depend on the machine's core count (the key does not hash it)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def prepared_demo(directory: Path, settings) -> Path:
    """`directory` ← the RLVR demo (roll.demo.rlvr.prepare_demo) with these DemoSettings, from the build cache."""
    from roll.demo.rlvr import prepare_demo

    def build(out: Path) -> None:
        with one_thread():
            prepare_demo(out, settings, log=lambda *_: None)
        (out.parent / f".{out.name}.lock").unlink(missing_ok=True)  # prepare_demo's lock file, beside `out`

    return cached_copy(directory, RLVR_DEMO, ["roll.demo.rlvr"], dataclasses.asdict(settings), build)


def prepared_code_judge_demo(directory: Path) -> Path:
    """`directory` ← the code-and-judge demo (roll.demo.code_judge, the shipped default settings) from the build
    cache: model/, judge/, train.jsonl, heldout.jsonl (~1-2 min on 2 cores when its entry is built)."""
    from roll.demo.code_judge import CodeJudgeDemoSettings, prepare_code_judge_demo

    settings = CodeJudgeDemoSettings()

    def build(out: Path) -> None:
        with one_thread():
            prepare_code_judge_demo(out, settings, log=lambda *_: None)
        (out.parent / f".{out.name}.lock").unlink(missing_ok=True)

    return cached_copy(directory, CODE_JUDGE_DEMO, ["roll.demo.code_judge"], dataclasses.asdict(settings), build)


def prepared_tool_demo(directory: Path, settings=None) -> Path:
    """`directory` ← the tool-calling demo (roll.demo.tool_calling; default: the shipped settings) from the build
    cache; the model is `directory / "model"`."""
    from roll.demo.tool_calling import ToolDemoSettings, prepare_tool_demo

    settings = settings or ToolDemoSettings()

    def build(out: Path) -> None:
        with one_thread():
            prepare_tool_demo(out, settings, log=lambda *_: None)
        (out.parent / f".{out.name}.lock").unlink(missing_ok=True)

    return cached_copy(directory, TOOL_DEMO, ["roll.demo.tool_calling"], dataclasses.asdict(settings), build)


def _agentic_settings():
    from roll.demo.agentic import AgenticDemoSettings

    return AgenticDemoSettings()  # the shipped demo's: examples/agentic_demo/prepare_demo.py uses the defaults


def prepared_agentic_demo(directory: Path) -> Path:
    """`directory` ← the agentic demo (roll.demo.agentic.prepare_agentic_demo, default settings) from the build
    cache; the model is `directory / "model"`."""
    from roll.demo.agentic import prepare_agentic_demo

    settings = _agentic_settings()

    def build(out: Path) -> None:
        with one_thread():
            prepare_agentic_demo(out, settings, log=lambda *_: None)

    return cached_copy(directory, AGENTIC_DEMO, ["roll.demo.agentic"], dataclasses.asdict(settings), build)


def agentic_demo_is_cached() -> bool:
    inputs = key_inputs(AGENTIC_DEMO, ["roll.demo.agentic"], dataclasses.asdict(_agentic_settings()))
    return cached_entry(AGENTIC_DEMO, inputs) is not None


def _lowest_priority() -> None:
    try:
        with open("/proc/self/autogroup", "w") as f:  # Linux's per-session scheduling group (own session)
            f.write("19")
    except OSError:
        pass
    os.nice(19)


def start_agentic_prefetch() -> subprocess.Popen | None:
    """Starts building the agentic demo's cache entry in the background unless it is cached (or this process
    imports `roll` from elsewhere than this checkout, which the child would import)."""
    if package_root() != REPO or agentic_demo_is_cached():
        return None
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{AGENTIC_DEMO}-prefetch.log", "w") as log:
        return subprocess.Popen(  # from the repository root: this checkout's `roll` and `tests`
            [sys.executable, "-m", "tests.pipeline.demo_cache"],
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own scheduling group, so that its lowest priority holds against Ray's
        )


if __name__ == "__main__":
    import tempfile

    _lowest_priority()

    with tempfile.TemporaryDirectory() as scratch:
        prepared_agentic_demo(Path(scratch) / "agentic_demo")
    print("agentic demo cached in", cache_root())
