"""What a path that should be a regular file is instead, in words, without opening it.

Opening a FIFO blocks until a writer comes, and reading /dev/zero never ends: a file roll reads whole (a data
file, a YAML) is checked with `not_a_regular_file` first, so such a path is refused by name, at once.
"""

import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(path) -> str:
    """'a regular file', 'a directory', 'a named pipe (FIFO)', ..., 'a broken symbolic link' or 'missing'."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken symbolic link" if os.path.islink(path) else "missing"
    except OSError as error:
        return f"unreadable ({error.strerror})"
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def not_a_regular_file(path) -> str | None:
    """None for a regular file (or a link to one) and for a missing path; otherwise what it is, with the link's
    target: "is a named pipe (FIFO)", "is a symbolic link to /dev/zero, a character device"."""
    kind = kind_of(path)
    if kind in ("a regular file", "missing"):
        return None
    if os.path.islink(path) and kind != "a broken symbolic link":
        return f"is a symbolic link to {Path(path).resolve()}, {kind}"
    return f"is {kind}"
