"""Name → environment class. Shipped envs register on import of roll.agentic.envs; users either register
their own with @register_env or name the class by dotted path (`my_pkg.my_module.MyEnv`)."""

from roll.agentic.envs.base import BaseEnv
from roll.utils.import_utils import import_class

_REGISTRY: dict[str, type[BaseEnv]] = {}


def register_env(name: str):
    """Class decorator: `@register_env("my_env")`. A name can be registered only once."""
    if not isinstance(name, str) or not name or "." in name:
        raise ValueError(
            f"register_env: name must be a non-empty string without dots, got {name!r} "
            f"(dotted names are reserved for import paths)"
        )

    def decorator(cls):
        if not (isinstance(cls, type) and issubclass(cls, BaseEnv)):
            raise TypeError(f"register_env({name!r}): {cls!r} is not a subclass of roll.agentic.envs.BaseEnv")
        if name in _REGISTRY:
            raise ValueError(
                f"register_env: env name {name!r} is already registered to "
                f"{_REGISTRY[name].__module__}.{_REGISTRY[name].__qualname__}; pick another name"
            )
        _REGISTRY[name] = cls
        return cls

    return decorator


def list_envs() -> list[str]:
    return sorted(_REGISTRY)


def resolve_env_class(env_type: str) -> type[BaseEnv]:
    if env_type in _REGISTRY:
        return _REGISTRY[env_type]
    if not isinstance(env_type, str) or "." not in env_type:
        raise ValueError(
            f"unknown env_type {env_type!r}; registered envs: {list_envs()}. For your own env "
            f"give the dotted path of a BaseEnv subclass, e.g. 'my_pkg.my_envs.MyEnv', or "
            f"decorate it with @register_env('name') in a module that is imported first"
        )
    try:
        cls = import_class(env_type)
    except ImportError as error:
        raise ImportError(
            f"env_type {env_type!r} is not a registered env ({list_envs()}) and cannot be "
            f"imported as a dotted class path: {error}"
        ) from error
    if not (isinstance(cls, type) and issubclass(cls, BaseEnv)):
        raise TypeError(
            f"env_type {env_type!r} resolves to {cls!r}, which is not a subclass of roll.agentic.envs.BaseEnv"
        )
    return cls


def make_env(env_type: str, env_config: dict = None) -> BaseEnv:
    """Build one env instance from a registered name or a dotted class path."""
    return resolve_env_class(env_type)(**(env_config or {}))
