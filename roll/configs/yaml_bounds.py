"""Bounds on the YAML files a config is composed from, checked before Hydra reads them.

Hydra (through OmegaConf) copies every value an alias points at, so nine nested anchors of nine items
("billion laughs") make it build 10⁹ nodes and hang; a `defaults:` list that includes its own file recurses
until Python's stack ends (2,500 lines of RecursionError); a binary file fails inside a codec. Here each file
of the primary config's defaults tree that lives in its directory is read once, as YAML nodes (aliases not
expanded): it must be a regular text file of bounded size, its values counted with aliases expanded must stay
bounded, an alias must not contain itself, and no file may include itself, directly or through others.
Files of other search-path entries (the shipped blocks) are Hydra's to read.
"""

from pathlib import Path

from roll.configs.loader import ConfigError
from roll.utils.paths import not_a_regular_file

MAX_BYTES = 8 * 2**20  # a config file; the largest shipped one is ~10 KB
MAX_VALUES = 1_000_000  # values after alias expansion; the largest shipped config has ~1,000


def check_config_tree(directory: Path, name: str) -> None:
    """The primary config `directory/name.yaml` and every file its defaults lists include from `directory`."""
    _check(Path(directory), "", name, [])


def _check(root: Path, group: str, name: str, chain: list) -> None:
    path = root / group / f"{name}.yaml"
    if path in chain:
        cycle = " → ".join(p.name if p.parent == root else str(p.relative_to(root)) for p in [*chain, path])
        raise ConfigError(
            f"{chain[-1]}: its defaults list includes {path.name}, which is already being composed ({cycle}); a "
            f"defaults list must not include its own file, directly or through another: remove that entry"
        )
    if not path.exists() and not path.is_symlink():
        return  # a config of another search-path entry (e.g. a shipped block), or missing: Hydra says which
    data = load_bounded(path)
    defaults = data.get("defaults") if isinstance(data, dict) else None
    for target_group, target in _targets(defaults if isinstance(defaults, list) else [], group):
        _check(root, target_group, target, [*chain, path])


def load_bounded(path: Path):
    """The file's data (aliases shared, not copied), or a ConfigError naming the file and the bound it breaks."""
    import yaml

    problem = not_a_regular_file(path)
    if problem:
        raise ConfigError(f"{path} {problem}, not a YAML file: give a regular text file")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise ConfigError(f"{path} has {size:,} bytes, more than a config file may ({MAX_BYTES:,}); is it a config?")
    raw = path.read_bytes()
    if b"\0" in raw:
        raise ConfigError(
            f"{path} is not a text file (a NUL byte at offset {raw.index(0)}): a binary file given as the YAML?"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start}): a binary file "
            f"given as the YAML? Re-save it as UTF-8"
        ) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        count_values(node, path)
        return yaml.load(text, Loader=yaml.SafeLoader) if node is not None else None  # aliases stay shared
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {error}") from None
    except RecursionError:
        raise ConfigError(f"{path} nests its values too deeply for a config (thousands of levels)") from None


def count_values(node, path: Path) -> int:
    """Scalars, lists and mappings in `node` with every alias expanded, computed once per distinct node (the
    count of an alias bomb without expanding it); a ConfigError past MAX_VALUES or for an alias inside itself."""
    import yaml

    memo: dict[int, int] = {}
    open_nodes: set[int] = set()

    def count(item) -> int:
        key = id(item)
        if key in memo:
            return memo[key]
        if key in open_nodes:
            raise ConfigError(
                f"{path}: an alias (line {item.start_mark.line + 1}) refers to a value that contains it, which "
                f"has no finite expansion: remove the alias"
            )
        open_nodes.add(key)
        if isinstance(item, yaml.SequenceNode):
            total = 1 + sum(count(child) for child in item.value)
        elif isinstance(item, yaml.MappingNode):
            total = 1 + sum(count(k) + count(v) for k, v in item.value)
        else:
            total = 1
        open_nodes.discard(key)
        if total > MAX_VALUES:
            raise ConfigError(
                f"{path}: its aliases expand to more than {MAX_VALUES:,} values (the one at line "
                f"{item.start_mark.line + 1} alone to {total:,}): a YAML alias bomb? A config has a few thousand"
            )
        memo[key] = total
        return total

    return count(node) if node is not None else 0


def _targets(defaults: list, group: str):
    """(group, name) of each config a defaults list includes, resolved as Hydra does: relative to the including
    file's group, from the search path's root with a leading '/'; `@package` suffixes and `optional` dropped."""
    for entry in defaults:
        if isinstance(entry, str):
            if entry.strip() == "_self_":
                continue
            yield _resolve(group, "", entry)
        elif isinstance(entry, dict):
            for key, options in entry.items():
                key = str(key).replace("optional ", "").replace("override ", "").strip()
                for option in options if isinstance(options, list) else [options]:
                    if isinstance(option, str):
                        yield _resolve(group, key, option)


def _resolve(group: str, key: str, option: str) -> tuple[str, str]:
    key, option = key.partition("@")[0], option.partition("@")[0].strip()
    target = f"{key}/{option}" if key else option
    absolute = target.startswith("/")
    target = target.strip("/")
    parent, _, name = target.rpartition("/")
    return (parent if absolute else "/".join(p for p in (group, parent) if p)), name
