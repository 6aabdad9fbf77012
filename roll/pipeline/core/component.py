"""A part a pipeline kind composes into the thin pipeline (roll/pipeline/base.py) that has its own start-up
duties and driver state, e.g. the PPO update (roll/pipeline/core/ppo_update.py). The pipeline calls each
component's hooks at the right moments of its loop; a kind that needs none has no components."""


class PipelineComponent:
    def attach(self) -> None:
        """The roles were (re)started: build what needs their clusters (e.g. the weight sync)."""

    def start(self, first_step: int) -> None:
        """Before the first step of a (re)start at 0-based `first_step` (e.g. the engine gets the trainer's
        weights)."""

    def state_dict(self) -> dict:
        """Driver-side state saved in pipeline_state.pt (plain data: it loads with weights_only=True); its keys
        are top-level keys of that file, so they must not collide with another component's."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore from the whole saved state (a key this component wrote may be missing from an older file)."""

    def reset(self) -> None:
        """A recovery starts over from step 1 (no checkpoint saved yet): back to the state at start-up."""
