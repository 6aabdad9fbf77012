"""Errors whose message is the whole story: the user's config, data, files or machine must change.

The launchers (roll.cli) print such an error's message alone and exit with status 2; a traceback would only
bury the one line that says what to fix. `ROLL_TRACEBACK=1` (or `--traceback`) shows it anyway. Any other
exception is a bug or an unexpected failure and keeps its traceback.
"""


class UserError(Exception):
    """Base of the errors a user fixes (ConfigError, InputError, MissingInput, SaveFailed)."""


class InputError(UserError, ValueError):
    """A data file, model directory or checkpoint that cannot be used; the message names it and the fix."""


class MissingInput(UserError, FileNotFoundError):
    """A file or directory the run needs is not there (a data file, a checkpoint to resume)."""


class SaveFailed(UserError, OSError):
    """A checkpoint could not be written (e.g. no space left on device); the partial save was removed."""


class PluginError(UserError, ValueError):
    """A user's plugin (a reward worker, an environment) broke its contract, e.g. a score that is not a finite
    number; the message names the class, the row and the rule."""
