"""The config spine (issue 21): parameter rows, `run`'s flags and `NodeParams` derived from engine settings.

An engine setting (`engine.settings.setting`) owns its default, range, choices and description; the node's
parameter table reads them through `ParamSpec.of`, `run`'s flags through `tools/run/options.py`, and
`NodeParams` is generated from the table. These tests fail when a copy drifts from its owner.
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import fields
from pathlib import Path

import pytest

from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.loop.config import LoopClosureConfig
from lingbot_map_ros.engine.loop.pose_graph import GraphConfig
from lingbot_map_ros.engine.mapping.grid import GridConfig
from lingbot_map_ros.engine.mapping.mapper_config import CovarianceConfig, MapperConfig
from lingbot_map_ros.engine.mapping.scale import ScaleConfig
from lingbot_map_ros.engine.mapping.voxel_map import VoxelMapConfig
from lingbot_map_ros.engine.settings import SETTING_KEY, owned, settings_of
from lingbot_map_ros.engine.stream.multi_stream import BatchConfig
from lingbot_map_ros.ros.outputs.config import OutputConfig
from lingbot_map_ros.ros.params import node_params
from lingbot_map_ros.ros.params.declare import (
    PARAMETERS,
    SPECS,
    NodeParams,
    cross_check,
    default_params,
    field_name,
    node_params_source,
    owner_values,
    param_reader,
)
from lingbot_map_ros.ros.params.spec import ParamSpec
from lingbot_map_ros.tools.run.options import SETTING_FLAGS, add_run_options, run_config

#: Every engine dataclass with settings that the node exposes as parameters.
OWNERS = (
    SessionConfig,
    ScaleConfig,
    GridConfig,
    VoxelMapConfig,
    CovarianceConfig,
    MapperConfig,
    BatchConfig,
    LoopClosureConfig,
    GraphConfig,
)
DERIVED = [spec for spec in PARAMETERS if spec.source is not None]


@pytest.mark.parametrize("spec", DERIVED, ids=lambda spec: spec.name)
def test_a_derived_row_equals_its_owning_field(spec: ParamSpec) -> None:
    """Default, description, range and choices of the row are the owning field's (or its node default)."""
    field = {f.name: f for f in fields(spec.source.owner)}[spec.source.name]
    setting = field.metadata[SETTING_KEY]
    expected_default = field.default if setting.node_default is None else setting.node_default
    assert spec.default == expected_default and type(spec.default) is type(expected_default)
    assert spec.description == setting.doc
    assert (spec.int_range or spec.float_range) == setting.bounds
    assert spec.choices == setting.choices


def test_every_setting_is_one_row_and_no_node_only_row_copies_one() -> None:
    sources = [(spec.source.owner, spec.source.name) for spec in DERIVED]
    assert len(sources) == len(set(sources))
    settings = [(item.owner, item.name) for owner in OWNERS for item in settings_of(owner)]
    assert sorted(sources, key=str) == sorted(settings, key=str)
    docs = {item.setting.doc for owner in OWNERS for item in settings_of(owner)}
    copies = [spec.name for spec in PARAMETERS if spec.source is None and spec.description in docs]
    assert not copies, f"rows that copy an engine setting instead of ParamSpec.of: {copies}"


def test_a_row_can_only_name_a_declared_setting() -> None:
    with pytest.raises(KeyError, match="SessionConfig.timing_window is not a setting"):
        ParamSpec.of("x", SessionConfig, "timing_window")
    with pytest.raises(KeyError, match="not a setting"):
        owned(SessionConfig, "no_such_field")


def test_the_node_defaults_build_valid_engine_configs() -> None:
    """The node's defaults pass each owner's own validation, and `owner_values` gives back every field of
    the owner that a parameter sets (the node builds its engine configs with it)."""
    value = param_reader(default_params())
    for owner in (SessionConfig, ScaleConfig, GridConfig, VoxelMapConfig, CovarianceConfig, BatchConfig):
        values = owner_values(owner, value)
        assert set(values) == {item.name for item in settings_of(owner)}
        owner(**values)
    mapper = OutputConfig.from_params(default_params()).mapper
    assert (mapper.voxel.pixel_stride, mapper.voxel.max_points, mapper.scale.min_samples) == (2, 500_000, 10)
    assert mapper.path_max_length == SPECS["path.max_length"].default
    assert VoxelMapConfig().pixel_stride == 4  # the engine's own default is untouched


def test_node_params_module_is_generated_from_the_table() -> None:
    written = Path(node_params.__file__).read_text()
    assert written == node_params_source(), (
        f"stale: python -m lingbot_map_ros.ros.params --node-params > {node_params.__file__}"
    )
    hints = typing.get_type_hints(NodeParams)
    assert list(hints) == [field_name(spec.name) for spec in PARAMETERS]
    for spec in PARAMETERS:
        kind = tuple[str, ...] if isinstance(spec.default, list) else type(spec.default)
        assert hints[field_name(spec.name)] == kind, spec.name


def test_run_flags_default_to_the_node_parameters_and_check_their_range() -> None:
    parser = argparse.ArgumentParser()
    add_run_options(parser)
    config = run_config(parser.parse_args([]), None, None)
    nodes = {(spec.source.owner, spec.source.name): spec for spec in DERIVED}
    for flag, (group, item) in SETTING_FLAGS.items():
        spec = nodes[(item.owner, item.name)]
        assert getattr(getattr(config, group), item.name) == spec.default, flag
        low, high = spec.int_range or spec.float_range
        with pytest.raises(SystemExit):
            parser.parse_args([flag, str(high * 2 if high > 0 else high + 1)])
    assert config.session == SessionConfig()  # `run` streams with the engine's defaults


def test_constraints_between_settings_are_checked_by_their_owner() -> None:
    """The node reports what the owning dataclass's `__post_init__` rejects (one check, one message)."""
    values = {spec.name: spec.default for spec in PARAMETERS}
    assert cross_check(values) == []
    low_grid = cross_check({**values, "grid.min_height": 2.0})
    assert low_grid == ["grid.max_height (1.5) must be > grid.min_height (2.0)"]
    assert cross_check({**values, "scale.window": 5}) == [
        "scale.window (5) must be >= scale.min_samples (10) >= 1"
    ]
    assert cross_check({**values, "scale.source": "sonar"}) == []  # its row reports it (ParamSpec.validate)
