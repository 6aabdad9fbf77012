"""roll.sandbox.run_python: output, errors, limits, environment, concurrency, and refusal without isolation.
The attack corpus is in test_hostile.py."""

import os

import pytest

from roll.sandbox import SandboxUnavailable, capabilities, run_python, runner


def test_stdout_and_stdin():
    result = run_python("import sys\nprint('hi', sys.stdin.read().upper())", stdin="abc")
    assert (result.stdout, result.stderr, result.returncode, result.timed_out) == ("hi ABC\n", "", 0, False)
    assert 0 < result.duration < 5


def test_error_exit_code_and_traceback():
    result = run_python("print('before')\nraise ValueError('boom')")
    assert result.returncode == 1 and result.stdout == "before\n" and not result.timed_out
    assert "Traceback" in result.stderr and result.stderr.strip().splitlines()[-1] == "ValueError: boom"
    assert "prelude" not in result.stderr  # the user's own frames only
    assert run_python("import sys; sys.exit(3)").returncode == 3


def test_memory_bomb_fails_and_caller_survives():
    result = run_python("blocks = []\nwhile True:\n    blocks.append(b'x' * (50 * 1024 * 1024))", memory_mb=256)
    assert result.returncode != 0 and not result.timed_out
    assert "MemoryError" in result.stderr or result.memory_exceeded
    assert run_python("print(2 + 2)").stdout == "4\n"


def test_scratch_is_private_and_writable():
    code = "import os\nopen('out.txt', 'w').write('data')\nos.mkdir('sub')\nprint(os.getcwd(), sorted(os.listdir('.')))"
    assert run_python(code).stdout == "/work ['out.txt', 'sub']\n"
    assert run_python("import os\nprint(os.listdir('.'))").stdout == "[]\n"  # nothing carries over


def test_parent_environment_is_not_visible(monkeypatch):
    monkeypatch.setenv("ROLL_TEST_SECRET", "hunter2")
    result = run_python("import os\nprint(sorted(os.environ))")
    assert result.stdout == "['HOME', 'LANG', 'PWD']\n"


def test_limits_cannot_be_raised_from_inside():
    result = run_python("import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))")
    assert result.returncode != 0 and ("PermissionError" in result.stderr or "ValueError" in result.stderr)


def test_file_size_limit():
    result = run_python("open('big', 'wb').write(b'x' * (20 * 1024 * 1024))")
    assert result.returncode != 0 and ("File too large" in result.stderr or "No space left" in result.stderr)


def test_concurrent_calls_from_threads():
    # Reward workers and env managers run cases from threads; limits are set in the child, not a preexec_fn.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda i: run_python(f"print({i} * {i})"), range(8)))
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(8)]


def test_every_layer_holds_here():
    # The CI machine (root in a VM with user namespaces and cgroups) must give every layer.
    assert capabilities() == {"bubblewrap": True, "seccomp": True, "cgroup": True, "namespaces": True}


def test_refuses_without_isolation_unless_allowed(monkeypatch):
    layers = {**runner.layers(), "namespaces": (False, "user namespaces are disabled")}
    monkeypatch.setattr(runner, "layers", lambda: layers)
    with pytest.raises(
        SandboxUnavailable, match="namespaces: user namespaces are disabled.*allow_unsafe_local_sandbox"
    ):
        run_python("print(1)")
    unsafe = run_python("import os\nprint(os.getuid())", allow_unsafe=True)
    # no user namespace: the host's uid, and never root (a root caller's unsafe run is host uid 65534 too)
    assert unsafe.stdout == f"{65534 if os.getuid() == 0 else os.getuid()}\n"


def test_a_sandbox_that_cannot_be_built_is_an_error_not_a_failed_program(monkeypatch):
    # bubblewrap exits before reporting its sandbox: SandboxUnavailable, not a result scored as wrong code
    monkeypatch.setattr(runner.isolation, "bwrap_binary", lambda: "/bin/false")
    with pytest.raises(SandboxUnavailable, match="the sandbox could not be built: exit status 1"):
        run_python("print(1)")
    from roll.sandbox.server import run_code

    answer = run_code({"code": "print(1)"})  # the grading server answers SandboxError, which clients retry
    assert answer["status"] == "SandboxError" and "could not be built" in answer["message"]
