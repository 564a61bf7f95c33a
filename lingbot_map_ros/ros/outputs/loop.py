"""Loop closure in the node (docs/loop_closure.md "In the node"): the publishers of one camera's corrections.

The camera's engine (`CameraState`, engine/camera_state.py) closes its loops on a thread of its own (the pose
stage only queues the keyframe results) and applies each correction by the one rule (engine/correction.py):
the mapper's T_map_stream for the following frames (so the next frame's edge jumps: ``map -> odom`` in the
robot modes, whose estimate `tf/camera_edge.py` republishes is moved at once; ``map -> camera`` in the bare
camera mode; ``odom -> base`` is untouched), the trajectory moved, the map cloud and grid rebuilt from the
keyframes. `LoopOutputs` is its `CorrectionOutputs`: `~/path` held while the trajectory moves and sent again,
the map thread's queue integrated before the rebuild, and `~/loop_closures` (visualization_msgs/MarkerArray,
latched): a LINE_LIST of the loop edges between keyframe positions in the map frame. /diagnostics gets the
closer's counters (`loop_closure.*`, outputs/mapping.py) and where its verification passes ran (`stats`: the
inference thread's `GpuGaps`).

No new TF edge: the corrected edges go through the same broadcaster and the node's one-parent check.
"""

from __future__ import annotations

from collections.abc import Callable

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from std_msgs.msg import ColorRGBA, Header
from std_srvs.srv import Trigger
from visualization_msgs.msg import Marker, MarkerArray

from ...engine.face import GpuGaps, LoopCorrection, OrderedLock, gtsam_missing, loop_closer
from ..lifecycle.entities import NodeFacade
from ..lifecycle.pipeline import Pipeline
from ..params.declare import NodeParams, field_name, loop_closure_config
from ..services.triggers import SERVICE_QOS
from .config import MAP_QOS
from .mapping import MAP_DRAIN_S, LoopPublisher, MappingOutputs

#: How long `~/optimize` waits for the closer's queue and the pass.
OPTIMIZE_WAIT_S = 30.0
#: Width (m) and colour of the loop edges in RViz.
EDGE_WIDTH_M = 0.02
EDGE_COLOR = ColorRGBA(r=1.0, g=0.2, b=0.8, a=1.0)


class LoopOutputs:
    """One camera's correction publishers (module doc), the `CorrectionOutputs` of its `CameraState`.

    Args:
        facade: creates the kept `~/loop_closures` publisher.
        outputs: the camera's outputs (path, map thread, map frame).
        topic_prefix: `~/` or `~/<camera>/`.
        gaps: where the verification passes run (the inference thread's `GpuGaps`), for /diagnostics.
    """

    def __init__(
        self, facade: NodeFacade, outputs: MappingOutputs, topic_prefix: str, gaps: GpuGaps | None = None
    ) -> None:
        self._outputs = outputs
        self._gaps = gaps
        self._markers = facade.create_publisher(MarkerArray, topic_prefix + "loop_closures", MAP_QOS)

    def moving_trajectory(self) -> OrderedLock:
        return self._outputs.path.send_lock

    def stats(self) -> dict[str, object]:
        """/diagnostics: where the verification passes ran (`loop_closure.gap_tasks`, `.gap_seconds`: the
        inference thread's time on them, `.gap_gpu_seconds`: the GPU time of graphed passes on the side
        stream, `.gap_pending`: the inference thread's `GpuGaps`, engine/gpu_gaps.py); {} without gaps."""
        gaps = self._gaps
        if gaps is None:
            return {}
        return {
            "loop_closure.gap_tasks": gaps.tasks_run,
            "loop_closure.gap_seconds": round(gaps.task_seconds, 3),
            "loop_closure.gap_gpu_seconds": round(gaps.charged_seconds, 3),
            "loop_closure.gap_pending": gaps.pending(),
        }

    def trajectory_moved(self) -> None:
        outputs = self._outputs
        outputs.path.corrected(Header(stamp=outputs.last_stamp or Time(), frame_id=outputs.map_frame))

    def settle_map(self) -> None:
        self._outputs.map.drain(MAP_DRAIN_S)

    def corrected(self, correction: LoopCorrection) -> None:
        """`~/loop_closures`: the loop edges in the map frame."""
        outputs = self._outputs
        header = Header(frame_id=outputs.map_frame)
        if outputs.last_stamp is not None:
            header.stamp = outputs.last_stamp
        marker = Marker(header=header, ns="loop_closures", id=0, type=Marker.LINE_LIST, action=Marker.ADD)
        marker.scale.x = EDGE_WIDTH_M
        marker.color = EDGE_COLOR
        marker.pose.orientation.w = 1.0
        for a, b in correction.edges:
            for p in (a, b):
                marker.points.append(Point(x=float(p[0]), y=float(p[1]), z=float(p[2])))
        self._markers.publish(MarkerArray(markers=[marker]))

    def optimize(self, timeout_s: float = OPTIMIZE_WAIT_S) -> str:
        """`~/optimize`: a forced pass after the queued keyframes, then its correction published."""
        state = self._outputs.state
        state.optimize(timeout_s)
        stats = state.loop_stats()
        return (
            f"{stats['keyframes']:.0f} keyframes, {len(state.closer.loops)} loop edges, "
            f"{stats['last_optimize_ms']:.1f} ms, correction {stats['last_correction_m']:.3f} m "
            f"{stats['last_correction_deg']:.2f} deg"
        )

    def reject_last_loop(self, timeout_s: float = OPTIMIZE_WAIT_S) -> str:
        """`~/reject_loop`: the closer undoes its last loop, then the restored correction is published."""
        state = self._outputs.state
        undone = state.reject_last_loop(timeout_s)
        stats = state.loop_stats()
        head = "last loop removed" if undone else "no loop to remove"
        return f"{head}: {len(state.closer.loops)} loop edges, {stats['loops_undone']:.0f} undone in all"


def attach_loop_closure(
    outputs: MappingOutputs, facade: NodeFacade, params: NodeParams, pipeline: Pipeline | None, prefix: str
) -> None:
    """Activate: close a camera's loops (once per configure; not when `loop_closure.enabled` is false).
    Descriptors pooled by the live step (`FrameResult.place_descriptor`), else from the model's encoder
    tokens or the pipeline's own (`Pipeline.loop_descriptor`, a test's oracle); verification through the
    pipeline's model, its passes run by the inference thread between live steps (`Pipeline.gaps`,
    engine/gpu_gaps.py). Without gtsam the camera maps on without loop closure: one WARN and
    `loop_closure_off` in /diagnostics."""
    if outputs.loop is not None or pipeline is None or not params.loop_closure_enabled:
        return
    if (missing := gtsam_missing()) is not None:
        facade.stats.notes["loop_closure_off"] = missing
        facade.get_logger().warning(f"loop closure off: {missing}", once=True)
        return
    config = loop_closure_config(lambda name: getattr(params, field_name(name)))
    gaps = pipeline.gaps
    closer = loop_closer(
        config, params.model_image_width, pipeline.model, pipeline.loop_descriptor, gaps.call, gaps.charge
    )
    outputs.loop = LoopOutputs(facade, outputs, prefix, pipeline.gaps)
    outputs.state.outputs = outputs.loop
    outputs.state.attach_loop(closer, threaded=True)


def create_optimize_service(
    node: Node,
    group: CallbackGroup,
    loops: Callable[[], list[LoopPublisher]],
    on_failure: Callable[[str, Exception], None],
) -> None:
    """`~/optimize` (std_srvs/Trigger): a forced pose-graph pass of every camera's closer, its correction
    published; "not active" while no closer runs."""

    def handle(request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        try:
            active = loops()
            if not active:
                return Trigger.Response(success=False, message="not active (or loop_closure.enabled false)")
            return Trigger.Response(success=True, message="; ".join(loop.optimize() for loop in active))
        except Exception as exc:  # noqa: BLE001 - a raising service callback would end the executor's spin
            on_failure("service_optimize", exc)
            return Trigger.Response(success=False, message=f"optimize failed: {type(exc).__name__}: {exc}")

    node.create_service(Trigger, "~/optimize", handle, qos_profile=SERVICE_QOS, callback_group=group)
