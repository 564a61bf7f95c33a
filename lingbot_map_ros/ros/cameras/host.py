"""What a camera uses of its node (`CameraHost`): the node, its facade, parameters, gates, queues, TF
lookups, callback groups and the one-parent TF check. Apart from the camera (ros/cameras/stream.py) so that
a camera is read without the node's wiring."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rclpy.callback_groups import CallbackGroup
from rclpy.lifecycle import LifecycleNode

from ...engine.face import TfEdgeGuard
from ..input.intake import InputFrame
from ..input.streams import CameraFrames
from ..lifecycle.entities import NodeFacade
from ..params.declare import NodeParams
from ..tf.listener import TfLookup


@dataclass(frozen=True)
class CameraHost:
    """What a camera uses of its node.

    Attributes:
        node: the lifecycle node (logger, clock, context, services).
        facade: creates the kept publishers and subscriptions (entities.py).
        params: the current parameter snapshot.
        active: whether the node is active (the gate of every callback).
        submit: `(camera name, frame)` into the inference queue; False when not active (no queue).
        reset: `(camera name)` resets that camera's stream (the node's `reset_camera`).
        tf_lookup: the node's TF lookups (robot modes).
        input_group / service_group: callback groups of the subscriptions and services.
        frames: which camera has which frame id (one frame id, one camera).
        tf_guard: the node's one-parent check of every TF edge it publishes (engine/mapping/tf_tree.py).
    """

    node: LifecycleNode
    facade: NodeFacade
    params: Callable[[], NodeParams]
    active: Callable[[], bool]
    submit: Callable[[str, InputFrame], bool]
    reset: Callable[[str], int | None]
    tf_lookup: TfLookup
    input_group: CallbackGroup
    service_group: CallbackGroup
    frames: CameraFrames
    tf_guard: TfEdgeGuard
