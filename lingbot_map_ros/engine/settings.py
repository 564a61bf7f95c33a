"""Settings: engine config fields that carry their own user documentation, accepted range and choices.

A field declared with `setting(...)` is the one owner of its default, its range, its choices and its
description. The node's parameter table (ros/params/table.py, `ParamSpec.of`), `run`'s flags
(tools/run/options.py) and the launch arguments (launch/lingbot_map.launch.py, through the table) read them
with `owned(Owner, "field")`; nothing copies them. Why: the window default sat in 6 places, `TF_MODES` and
`SCALE_SOURCES` were copied into the table, and `run`'s flags repeated the node's defaults (issue 21).

`bounds` and `choices` are checked where a value enters from outside (rclpy's parameter descriptor and
`ParamSpec.validate`, `run`'s flags); the dataclass's own `__post_init__` keeps only the engine's
invariants (e.g. a window within the pool), so a value is not range-checked twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, cast

#: The key of a field's `Setting` in `dataclasses.field(metadata=...)`.
SETTING_KEY = "lingbot_map_ros.setting"

SettingValue = bool | int | float | str


@dataclass(frozen=True)
class Setting:
    """What users are told about one config field.

    Attributes:
        doc: one or more sentences, the parameter's description (docs/node.md, config/lingbot_map.yaml).
        bounds: inclusive (low, high) accepted from outside (ROS parameter, CLI flag); None: any value.
        choices: the accepted strings; None: any string.
        node_default: the default of the node and of `run` where it differs from the field's own default
            (which library callers and tests get); None: the field's default.
    """

    doc: str
    bounds: tuple[int, int] | tuple[float, float] | None = None
    choices: tuple[str, ...] | None = None
    node_default: SettingValue | None = None


def setting(
    default: SettingValue,
    doc: str,
    *,
    bounds: tuple[int, int] | tuple[float, float] | None = None,
    choices: tuple[str, ...] | None = None,
    node_default: SettingValue | None = None,
) -> Any:
    """A dataclass field with default `default` that documents itself (`Setting`)."""
    return field(default=default, metadata={SETTING_KEY: Setting(doc, bounds, choices, node_default)})


@dataclass(frozen=True)
class Owned:
    """One setting as read from its owner: `owner.name` (e.g. `SessionConfig.sliding_window`), its
    `default` (the node's where it has one of its own) and its `Setting`."""

    owner: type
    name: str
    default: SettingValue
    setting: Setting


def owned(owner: type, name: str) -> Owned:
    """The setting `name` of the dataclass `owner`.

    Raises:
        KeyError: `owner` has no field `name` declared with `setting(...)`.
    """
    found = {f.name: f for f in fields(owner)}.get(name)
    if found is None or SETTING_KEY not in found.metadata:
        raise KeyError(f"{owner.__name__}.{name} is not a setting (declare it with engine.settings.setting)")
    info: Setting = found.metadata[SETTING_KEY]
    # `setting` always gives the field a default (never MISSING)
    default = cast(SettingValue, found.default if info.node_default is None else info.node_default)
    return Owned(owner, name, default, info)


def settings_of(owner: type) -> list[Owned]:
    """Every field of `owner` declared with `setting(...)`, in declaration order."""
    return [owned(owner, f.name) for f in fields(owner) if SETTING_KEY in f.metadata]
