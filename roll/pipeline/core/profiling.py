"""Where a step's time goes: the `profiler` blocks (per-role traces of chosen steps) and, every step, the
framework's own cost (`timing/overhead`) and each role's busy/idle seconds."""

from roll.configs import ConfigError
from roll.configs.profiler import role_profile
from roll.utils.logging import get_logger

logger = get_logger("roll.profiler")


class StepProfiler:
    """Starts and stops the roles' profiling sessions around the configured steps."""

    def __init__(self, config, clusters: dict):
        self.clusters, self.settings = clusters, {}
        for name, cluster in clusters.items():
            settings = role_profile(config.profiler, cluster.worker_config.profiler, config.output_dir)
            if settings is None:
                continue
            outside = [r for r in settings["ranks"] if not 0 <= r < cluster.world_size]
            if outside and not settings["all_ranks"]:
                raise ConfigError(
                    f"profiler ranks {outside} of role {name}: the role has ranks 0..{cluster.world_size - 1}"
                )
            self.settings[name] = settings
        self.active: list[str] = []

    def start(self, step: int) -> None:
        """Before 0-based `step`: start the sessions of the roles that profile it (steps are 1-based)."""
        self.active = [name for name, s in self.settings.items() if step + 1 in s["steps"]]
        calls = [self.clusters[name].start_profile.submit(step + 1, self.settings[name]) for name in self.active]
        for call in calls:
            call.result()

    def stop(self) -> list[str]:
        """End the running sessions; logs and returns the files they wrote."""
        calls = [self.clusters[name].stop_profile.submit() for name in self.active]
        files = [path for call in calls for per_rank in call.result() for path in per_rank]
        for name in self.active:
            written = [f for f in files if f"/{name}/" in f]
            logger.info("profiler (%s): %s", self.settings[name]["tool"], ", ".join(written) or "no files")
        self.active = []
        return files


# overlap: seconds phases ran at once; offload_reload: colocated roles' turns, inside the phases' seconds
NOT_PHASES = ("timing/step", "timing/overhead", "timing/overlap", "timing/offload_reload")


def phase_seconds(metrics: dict) -> dict:
    """The step's phases: `timing/<phase>` keys with a single-level name (not timing/busy/<role> ...)."""
    return {
        key: value
        for key, value in metrics.items()
        if key.startswith("timing/") and key.count("/") == 1 and key not in NOT_PHASES
    }


def overhead_and_busy(metrics: dict, busy: dict) -> dict:
    """timing/overhead = step wall − (Σ phases − timing/overlap) (the driver's own work between phases:
    batching, decoding, ...; overlap: the seconds phases ran at once);
    timing/busy/<role> = seconds with a call to the role outstanding (submission → result, seen by the driver),
    timing/idle/<role> = the rest of the step."""
    wall = metrics["timing/step"]
    busy_phases = sum(phase_seconds(metrics).values()) - metrics.get("timing/overlap", 0.0)
    out = {"timing/overhead": wall - busy_phases}
    for role, seconds in busy.items():
        out[f"timing/busy/{role}"] = min(seconds, wall)
        out[f"timing/idle/{role}"] = max(wall - seconds, 0.0)
    return out
