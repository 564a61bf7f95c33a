"""`ParamSpec`: one row of the node's parameter table (`params/table.py`): default, constraints, live or not;
its rcl descriptor and the check of a value against it. A row of an engine setting is made by `ParamSpec.of`
from the owning dataclass field (`engine.settings`): its default, range, choices and description are read
from there, never written twice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

from ...engine.face import Owned, owned

ParamValue = bool | int | float | str | list[str]


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: ROS `name`, `default` (fixes the type), constraints, and whether it applies live."""

    name: str
    default: ParamValue
    description: str
    live: bool = False
    int_range: tuple[int, int] | None = None
    float_range: tuple[float, float] | None = None
    choices: tuple[str, ...] | None = None
    startup: bool = False  # read when the node starts (its topics and services): never changed at run time
    #: The engine setting the row is derived from (`ParamSpec.of`); None: a node-only parameter.
    source: Owned | None = field(default=None, compare=False)

    @classmethod
    def of(cls, name: str, owner: type, attribute: str, *, live: bool = False) -> ParamSpec:
        """The row of parameter `name` derived from the setting `owner.attribute` (default, description,
        range, choices: `engine.settings.owned`)."""
        item = owned(owner, attribute)
        bounds, integer = item.setting.bounds, type(item.default) is int
        return cls(
            name,
            item.default,
            item.setting.doc,
            live=live,
            int_range=cast(tuple[int, int], bounds) if integer and bounds else None,
            float_range=cast(tuple[float, float], bounds) if bounds and not integer else None,
            choices=item.setting.choices,
            source=item,
        )

    def descriptor(self) -> ParameterDescriptor:
        """The rcl descriptor (ranges are enforced by rclpy itself; choices by `validate`)."""
        text = self.description + (
            " (live)" if self.live else " (read at configure; needs a reload to change)"
        )
        if self.startup:
            text = self.description + " (read at start-up; restart the node to change)"
        if self.choices:
            text += f" One of: {', '.join(self.choices)}."
        desc = ParameterDescriptor(description=text, read_only=False)
        if self.int_range is not None:
            desc.integer_range = [
                IntegerRange(from_value=self.int_range[0], to_value=self.int_range[1], step=1)
            ]
        if self.float_range is not None:
            desc.floating_point_range = [
                FloatingPointRange(from_value=self.float_range[0], to_value=self.float_range[1], step=0.0)
            ]
        return desc

    def validate(self, value: object) -> str | None:
        """Reason the value is invalid, or None when it is acceptable."""
        if isinstance(self.default, list):
            ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
            return None if ok else f"{self.name} must be a string array, got {type(value).__name__}"
        if type(value) is not type(self.default) and not (
            isinstance(self.default, float) and type(value) is int
        ):
            return f"{self.name} must be a {type(self.default).__name__}, got {type(value).__name__}"
        if self.choices is not None and value not in self.choices:
            return f"{self.name} must be one of {list(self.choices)}, got '{value}'"
        bounds = self.int_range or self.float_range
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            return f"{self.name} must be in [{bounds[0]}, {bounds[1]}], got {value}"
        return None
