"""Command-line options generated from a pydantic-settings class, so that a setting's name, type, default and
help are written once, in the class: each field ``some_name`` becomes ``--some-name`` (plus any aliases the
command keeps), and its help names the environment variable ``HOTBOARD_SOME_NAME`` and the default. Adding a
field to the class adds the option; tests/unit/test_cli.py checks that docs/configuration.md's tables list it
too."""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal, TypeVar, get_args, get_origin

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

S = TypeVar("S", bound=BaseSettings)

_TYPES: dict[Any, type] = {int: int, float: float, str: str}


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help that shows each option's default, except where there is none to show (None, a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_var(settings: type[BaseSettings], name: str) -> str:
    return f"{settings.model_config.get('env_prefix', '')}{name}".upper()


def _help(settings: type[BaseSettings], name: str, field: FieldInfo) -> str:
    shown = field.default not in ("", None) and not isinstance(field.default, SecretStr)  # a secret has no default
    default = f", default {field.default}" if shown else ""
    # argparse formats help with %: a literal percent sign must be doubled.
    return f"{field.description or ''} ({env_var(settings, name)}{default})".replace("%", "%%")


def add_options(
    parser: argparse.ArgumentParser,
    settings: type[BaseSettings],
    *,
    only: Collection[str] | None = None,
    aliases: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """One option per field of ``settings`` (or of ``only``). An option not given stays out of the namespace
    (``SUPPRESS``), so the environment, then the field's default, decide, exactly as without the CLI."""
    for name, field in settings.model_fields.items():
        if only is not None and name not in only:
            continue
        choices = get_args(field.annotation) if get_origin(field.annotation) is Literal else None
        # a switch: ``--redis-cluster`` alone means true, ``--redis-cluster false`` spells the default out
        switch: dict[str, Any] = {"nargs": "?", "const": "true"} if field.annotation is bool else {}
        parser.add_argument(
            option(name),
            *(aliases or {}).get(name, ()),
            dest=name,
            type=_TYPES.get(field.annotation, str),
            default=argparse.SUPPRESS,
            choices=choices,
            metavar=name.upper(),
            help=_help(settings, name, field),
            **switch,
        )


def given(settings: type[BaseSettings], args: argparse.Namespace) -> dict[str, Any]:
    """The fields of ``settings`` that the command line set."""
    return {name: value for name, value in vars(args).items() if name in settings.model_fields}


def settings_from(settings: type[S], args: argparse.Namespace) -> S:
    """The settings object: command line over ``HOTBOARD_*`` environment over defaults."""
    return settings(**given(settings, args))
