"""The command line of the example launchers: compose a Hydra YAML, validate it, print the plan, run.

    python examples/start_<kind>_pipeline.py --config_path DIR --config_name NAME [key=value ...] [--dry_run]

Each launcher is `launch_kind(kind, ...)`: the kind's config class (roll/pipeline/kinds.py) loads, checks, describes
and runs the config.

--config_path is a directory (absolute, relative to the current directory, or relative to examples/).
--dry_run composes and validates the config, runs the pipeline's start-up checks on what this machine has
(model directories, worker classes, chat template, data files, sizes; docs/reliability.md), prints the config
with the batch arithmetic and the placement plan, and exits without starting Ray.

A refusal of the user's config, data, model or checkpoint (roll.utils.errors.UserError, ConfigError included)
prints its message alone and exits with status 2; --traceback or ROLL_TRACEBACK=1 adds the traceback. Any other
error is unexpected and keeps its traceback.

SIGTERM or Ctrl-C stops the run at the end of the current step, after a checkpoint (a second one: at once), stops
Ray, prints one line with the command that resumes, and exits 143 or 130 (roll.pipeline.core.stopping).
"""

import argparse
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path


def config_dir(path: str, examples: Path) -> Path:
    for candidate in (Path(path), examples / path):
        if candidate.is_dir():
            return candidate.resolve()
    raise SystemExit(f"--config_path {path!r}: no such directory (looked in {Path.cwd()} and {examples})")


def launch_kind(kind: str, argv, description: str, examples: Path) -> int:
    """examples/start_<kind>_pipeline.py's main: the kind's default config (DEFAULT_CONFIG, under `examples`),
    its loader plus its on-disk checks (`check_inputs`), and its pipeline (`run`)."""
    from roll.pipeline.kinds import kind_config

    cls = kind_config(kind)

    def load(composed):
        from roll.configs import load_config

        return load_config(cls, composed).check_inputs()

    default_path, default_name = cls.DEFAULT_CONFIG
    return launch(argv, description, examples, default_path, default_name, load, lambda config: config.run())


def launch(
    argv, description: str, examples: Path, default_path: str, default_name: str, load: Callable, run: Callable
) -> int:
    """`examples`: the launcher's directory; `load`: composed DictConfig → validated config; `run`: config →
    history."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config_path", default=default_path, help="directory holding the YAML")
    parser.add_argument("--config_name", default=default_name, help="YAML file name without .yaml")
    parser.add_argument("--dry_run", action="store_true", help="validate and print the plan, then exit")
    parser.add_argument(
        "--traceback", action="store_true", help="with a refused input, print the traceback too (or ROLL_TRACEBACK=1)"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides such as max_steps=5")
    args = parser.parse_args(argv)
    from roll.pipeline.core.stopping import STOPPER, StopRequested

    STOPPER.install()  # SIGTERM / Ctrl-C: a clean stop with one line (issue 42), also during start-up
    from roll.distributed.ray_utils import mark_run_processes

    mark_run_processes()  # so that a stop can end every process the run started
    show_traceback = args.traceback or os.environ.get("ROLL_TRACEBACK", "").lower() in ("1", "true", "yes")

    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        os.environ.setdefault(name, "1")  # one readable line per step instead of a bar per file read
    from roll.utils.errors import UserError

    try:
        from roll.configs import ConfigError, compose_config, describe_config  # seconds of imports: a stop point

        composed = compose_config(str(config_dir(args.config_path, examples)), args.config_name, args.overrides)
        config = load(composed) if args.dry_run else load_while_ray_starts(load, composed)
        notes = _check_here(config) if args.dry_run else []  # a run: the pipeline runs these before Ray's roles
        print("\n".join([describe_config(config), *notes]), flush=True)
        if not args.dry_run:
            run(config)
    except UserError as error:
        if show_traceback:
            traceback.print_exception(error)
        from roll.configs import ConfigError

        print(f"{'config error' if isinstance(error, ConfigError) else 'error'}: {error}", file=sys.stderr)
        return 2
    except (StopRequested, KeyboardInterrupt) as stop:  # KeyboardInterrupt: a Ctrl-C before the handler took over
        return _stopped(stop, sys.argv[1:] if argv is None else list(argv), show_traceback)
    except SystemExit as stop:
        if stop.code != signal.SIGTERM:
            raise
        # Ray's own SIGTERM handler, in place while ray.init runs (ray_utils puts ours back after it): sys.exit(15)
        return _stopped(StopRequested(signal.SIGTERM, True), sys.argv[1:] if argv is None else list(argv), False)
    finally:
        from roll.distributed.ray_utils import stop_early_ray

        stop_early_ray()  # a refused config, or a run that stopped before starting its roles: no Ray left behind
        STOPPER.uninstall()
    return 0


def _stopped(stop: BaseException, argv: list[str], show_traceback: bool) -> int:
    """After a stop on a signal: end every Ray process the run started, print the one line, return the exit code."""
    from roll.pipeline.core.stopping import STOPPER, StopRequested

    STOPPER.finishing = True  # further signals: the stop is under way
    if not isinstance(stop, StopRequested):
        stop = StopRequested(signal.SIGINT, True)
    if show_traceback:
        traceback.print_exception(stop)
    import ray

    from roll.distributed.ray_utils import end_run_processes

    ray.shutdown()  # a local Ray ends with its workers; attached, the job's actors end with the job
    end_run_processes()  # what a stop inside ray.init left: processes started before Ray recorded them
    print(stop.line(_command(argv), _command(argv, resume=True)), file=sys.stderr, flush=True)
    return stop.exit_code


def _command(argv: list[str], resume: bool = False) -> str:
    """This run's command line again (without --dry_run); `resume`: with resume_from_checkpoint=true."""
    import shlex

    args = [a for a in argv if a != "--dry_run"]
    if resume:
        args = [a for a in args if a.lstrip("+~").partition("=")[0] != "resume_from_checkpoint"]
        args.append("resume_from_checkpoint=true")
    return shlex.join([sys.executable, sys.argv[0], *args])


def _check_here(config) -> list[str]:
    """--dry_run: the pipeline's start-up checks (model directories, classes, templates, data files, sizes) on
    what this machine has; notes for the paths it does not have."""
    from roll.pipeline.core.preflight import check_roles

    return check_roles(config, missing_ok=True)


def load_while_ray_starts(load: Callable, composed):
    """`load(composed)` on a thread while this one starts the local Ray the config asks for: the config checks
    import torch and transformers (~4 s on one core) and Ray's start (~3.5 s) mostly waits on its own
    processes, so the two overlap (issue 33). Ray starts on the main thread: Linux ends the GCS and raylet with
    the thread that started them. A config that is refused, or whose checked values differ, gets no use of it
    (stop_early_ray / init_ray)."""
    outcome: dict = {}

    def check():
        try:
            outcome["config"] = load(composed)
        except BaseException as error:  # re-raised on this thread, as if loaded here
            outcome["error"] = error

    checker = threading.Thread(target=check, name="roll-config-check", daemon=True)
    checker.start()
    _start_ray_early(composed)
    checker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["config"]


def _start_ray_early(composed) -> None:
    """The local Ray for the composed (not yet checked) config's devices and system_envs; nothing where they
    are not plain values yet (the checks name the problem) or the start fails (init_ray tries again and says why)."""
    from omegaconf import OmegaConf

    from roll.distributed.ray_utils import start_local_ray_early

    try:
        nodes, per_node = composed.get("num_nodes"), composed.get("num_gpus_per_node", 1)
        envs = OmegaConf.to_container(composed.get("system_envs") or {}, resolve=True)
        if type(nodes) is not int or type(per_node) is not int or not isinstance(envs, dict):
            return
        start_local_ray_early(nodes * per_node, {str(k): str(v) for k, v in envs.items()}, nodes)
    except Exception as error:  # an optimisation only: the run starts Ray again where it needs it
        print(
            f"note: starting Ray early failed ({type(error).__name__}: {error}); it starts with the roles",
            file=sys.stderr,
        )
