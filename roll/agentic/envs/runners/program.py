"""ProgramRunner: each episode is an external program — any code using the `openai` package — started as its own
process; the endpoint's address and the episode's token reach it the way the `openai` client reads them.

The program gets, besides the worker's environment:
    OPENAI_BASE_URL      the endpoint (http://127.0.0.1:<port>/v1); `openai.OpenAI()` reads it
    OPENAI_API_KEY       this episode's token; `openai.OpenAI()` reads it
    ROLL_EPISODE_SEED    the episode's seed (the same within a GRPO group)
    ROLL_EPISODE_RESULT  a file to write the result to, as JSON: {"score": 1.0, "success": true, ...}
(NO_PROXY gains the loopback names, so an HTTP proxy of the machine never carries the traffic) and runs in its own
process group: a timeout kills the group. A non-zero exit, a death by signal or a missing or
unreadable result ends the episode with the reason (the last lines the program wrote to stderr included).
"""

import json
import os
import shlex
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from roll.agentic.envs.runners.base import AgentFailed, AgentRunner, EpisodeResult, as_result

STDERR_TAIL = 600  # characters of the program's stderr kept in a failure's reason


class ProgramRunner(AgentRunner):
    default_config = {
        "command": None,  # the program and its arguments: a list, or one string split like a shell would
        "cwd": None,  # its working directory; null = the directory the run was started from (the driver's)
        "env": {},  # more environment variables for it
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.command = command_line(self.config["command"])
        self._process: subprocess.Popen | None = None
        self._lock, self._cancelled = threading.Lock(), False

    @classmethod
    def check_config(cls, settings: dict) -> dict:
        merged = super().check_config(settings)
        command_line(merged["command"])
        if not isinstance(merged["env"], dict) or not all(isinstance(v, str) for v in merged["env"].values()):
            raise ValueError(f"ProgramRunner: env_config 'env' must map names to strings, got {merged['env']!r}")
        if merged["cwd"] is not None and not isinstance(merged["cwd"], str):
            raise ValueError(f"ProgramRunner: env_config 'cwd' must be a directory path or null, got {merged['cwd']!r}")
        return merged

    def run_job(self, seed: int) -> EpisodeResult:
        with tempfile.TemporaryDirectory(prefix="roll-agent-") as scratch:
            result, stderr = Path(scratch) / "result.json", Path(scratch) / "stderr"
            env = {
                **os.environ,
                **self.config["env"],
                "OPENAI_BASE_URL": self.base_url,
                "OPENAI_API_KEY": self.api_key,
                "ROLL_EPISODE_SEED": str(seed),
                "ROLL_EPISODE_RESULT": str(result),
            }
            for key in ("NO_PROXY", "no_proxy"):  # the endpoint is local: never reach it through an HTTP proxy
                env[key] = ",".join(filter(None, [env.get(key, ""), "127.0.0.1", "localhost", "::1"]))
            with open(stderr, "wb") as err, self._lock:
                if self._cancelled:
                    raise AgentFailed("cancelled before the program started")
                self._process = subprocess.Popen(
                    self.command,
                    cwd=self.config["cwd"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    start_new_session=True,  # its own process group: cancel() kills what it started too
                )
            code = self._process.wait()
            tail = stderr.read_bytes()[-STDERR_TAIL:].decode(errors="replace").strip()
            if code != 0:
                how = f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
                raise AgentFailed(f"the agent program {how}" + (f"; stderr: {tail}" if tail else ""))
            if not result.is_file():
                raise AgentFailed("the agent program exited without writing its result to $ROLL_EPISODE_RESULT")
            try:
                return as_result(json.loads(result.read_text()))
            except (json.JSONDecodeError, TypeError, ValueError) as error:
                raise AgentFailed(f"the agent program's result is not valid: {error}") from None

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._process is not None and self._process.poll() is None:
                try:
                    os.killpg(self._process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def command_line(command) -> list[str]:
    if isinstance(command, str) and command.strip():
        return shlex.split(command)
    if isinstance(command, list) and command and all(isinstance(part, str) for part in command):
        return list(command)
    raise ValueError(
        f"ProgramRunner: env_config 'command' must be the program and its arguments (a list of strings or one "
        f"string), got {command!r}"
    )
