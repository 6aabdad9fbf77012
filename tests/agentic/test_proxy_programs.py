"""ProgramRunner: every episode an external program, its own process, served in-process by the proxy env manager
with a scripted engine (no Ray). A program using the `openai` package finds the endpoint and its token in the
environment; one that crashes, is killed, hangs, or reports nothing ends its episode with the reason, and the
rollout goes on."""

import sys
import time
from pathlib import Path

import pytest

from roll.agentic.envs.runners import ProgramRunner
from tests.agentic.proxy_helpers import ScriptedEngine, char_ids, drive, proxy_manager, tiny_chat, trained

AGENT = """
import json, os
from openai import OpenAI

client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the environment
messages = [{"role": "user", "content": "Episode " + os.environ["ROLL_EPISODE_SEED"]}]
first = client.chat.completions.create(model="policy", messages=messages).choices[0].message.content
messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "Again"}]
second = client.chat.completions.create(model="policy", messages=messages).choices[0].message.content
with open(os.environ["ROLL_EPISODE_RESULT"], "w") as out:
    json.dump({"score": float(second == "Up"), "success": second == "Up", "name": os.environ["AGENT_NAME"]}, out)
"""
CRASH = "import sys\nsys.stderr.write('about to fail\\nboom\\n')\nsys.exit(3)\n"
KILLED = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
# starts a grandchild, records both ids, then hangs: a timeout must take the whole process group
HANG = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open("pids", "w").write(f"{os.getpid()} {child.pid}")
time.sleep(60)
"""
SILENT = "pass\n"
GARBLED = "import os\nopen(os.environ['ROLL_EPISODE_RESULT'], 'w').write('{not json')\n"


def _manager(env_id: int, tmp_path: Path, name: str, source: str, chat, **settings):
    (tmp_path / f"{name}.py").write_text(source)
    config = {"command": [sys.executable, f"{name}.py"], "cwd": str(tmp_path), "env": {"AGENT_NAME": name}}
    return proxy_manager(chat, ProgramRunner, env_id=env_id, env_config={**config, **settings})


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in state  # killed, waiting for its new parent to collect it


def test_each_episode_is_a_program_and_its_failures_end_only_its_episode(tmp_path):
    chat = tiny_chat()
    programs = {"agent": AGENT, "crash": CRASH, "killed": KILLED, "hang": HANG, "silent": SILENT, "garbled": GARBLED}
    managers = {
        100 + i: _manager(100 + i, tmp_path, name, source, chat, **({"agent_timeout": 1.0} if name == "hang" else {}))
        for i, (name, source) in enumerate(programs.items())
    }
    started = time.monotonic()
    drive(managers, ScriptedEngine(lambda env_id, turn: char_ids(chat, "Up")))
    assert time.monotonic() - started < 20
    stats = {name: managers[100 + i].episode.stats() for i, name in enumerate(programs)}
    good = stats["agent"]
    assert (good["end_reason"], good["score"], good["success"], good["num_turns"]) == ("done", 1.0, 1.0, 2)
    (row,) = managers[100].samples()
    assert trained(row) == char_ids(chat, "Up") * 2
    assert stats["crash"]["agent_exit_reason"] == "AgentFailed: the agent program exited with code 3; stderr: about " \
        "to fail\nboom"  # fmt: skip
    assert stats["killed"]["agent_exit_reason"] == "AgentFailed: the agent program was killed by signal SIGKILL"
    assert stats["silent"]["agent_exit_reason"].endswith("exited without writing its result to $ROLL_EPISODE_RESULT")
    assert "the agent program's result is not valid" in stats["garbled"]["agent_exit_reason"]
    for name in ("crash", "killed", "silent", "garbled"):
        assert (stats[name]["end_reason"], stats[name]["agent_error"], stats[name]["score"]) == ("agent_error", 1, 0)
    assert stats["hang"]["end_reason"] == "timeout" and stats["hang"]["timeout"] == 1.0
    pids = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in pids), "the timed-out program or its child still runs"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "env_config 'command' must be the program and its arguments"),
        ({"command": []}, "env_config 'command' must be the program and its arguments"),
        ({"command": "x", "env": {"A": 1}}, "env_config 'env' must map names to strings"),
        ({"command": "x", "timeout": 3}, r"unknown env_config key\(s\) \['timeout'\]; valid keys: \['command', 'cwd'"),
    ],
)
def test_program_runner_settings_are_checked(settings, message):
    with pytest.raises(ValueError, match=message):
        ProgramRunner.check_config(settings)
