"""Settings of a command as a frozen dataclass whose fields are its flags and environment
variables: ``nmt-serve`` (server/config.py) and ``nmt-http`` (gateway/config.py).

Each field is made with ``setting(default, help)``; the help is the flag's documentation.
``add_flags`` adds one flag per field (``--max-texts``), defaulting to None so that
``values`` can tell a flag given from one left to the environment (``NMT_MAX_TEXTS``) or
the default; flags win over the environment. A value the environment gets wrong is a
``ConfigError`` naming the variable.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class ConfigError(ValueError):
    """A configuration the command must not start with; the message names every problem."""


@dataclass(frozen=True)
class Settings:
    """The base of a command's settings dataclass: checked when made, every problem at once."""

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigError("; ".join(problems))

    def problems(self) -> list[str]:
        """Every setting the command must not start with, as sentences naming the flag."""
        return []


def setting(default: Any, help: str) -> Any:
    """A field of a settings dataclass with its --help text, which is its documentation too."""
    return field(default=default, metadata={"help": help})


def flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def shown(default: Any) -> str:
    """A default as --help shows it."""
    if default in ((), ""):
        return "none"
    if isinstance(default, bool):
        return "on" if default else "off"
    return str(default)


def one_of(name: str, value: str, allowed: tuple[str, ...], any_case: bool = False) -> list[str]:
    """[] or the problem of a setting that must be one of ``allowed`` (in any letter case)."""
    if (value.upper() if any_case else value) in allowed:
        return []
    return [f"{flag(name)} is {value!r}; it must be {', '.join(allowed[:-1])} or {allowed[-1]}"]


def add_flags(p: argparse.ArgumentParser, config: type, env_name: Callable[[str], str],
              skip: tuple[str, ...] = ()) -> None:
    """One flag per field of the dataclass ``config`` (but ``skip``), with its help, default and
    environment variable; booleans get --x / --no-x."""
    defaults = config()
    for f in fields(config):
        if f.name in skip:
            continue
        default = getattr(defaults, f.name)
        help_text = f"{f.metadata['help']} (default: {shown(default)}; ${env_name(f.name)})"
        if isinstance(default, bool):
            p.add_argument(flag(f.name), action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            p.add_argument(flag(f.name), type=type(default), default=None, metavar=f.name.upper(), help=help_text)


def values(args: argparse.Namespace, config: type, environ: Mapping[str, str], env_name: Callable[[str], str],
           skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields given as flags, else in the environment (typed like their defaults)."""
    defaults = config()
    out: dict[str, Any] = {}
    for f in fields(config):
        if f.name in skip:
            continue
        flag_value = getattr(args, f.name)
        env = environ.get(env_name(f.name))
        if flag_value is not None:
            out[f.name] = flag_value
        elif env is not None:
            out[f.name] = from_env(env_name(f.name), env, getattr(defaults, f.name))
    return out


def from_env(variable: str, value: str, default: Any) -> Any:
    """An environment variable's value, typed like the field's default."""
    if isinstance(default, bool):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{variable}={value!r}: expected true or false")
    try:
        return type(default)(value)
    except ValueError:
        kind = {int: "an integer", float: "a number"}.get(type(default), type(default).__name__)
        raise ConfigError(f"{variable}={value!r}: expected {kind}") from None
