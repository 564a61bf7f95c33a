"""Loop closure in the node (docs/loop_closure.md "In the node"): one `LoopOutputs` per camera's outputs.

The engine's `LoopClosureWorker` runs the closer on a thread of its own; the pose stage only queues the
keyframe results (`submit`: a non-blocking put). The stream keeps its own frame: a verified loop (or a forced
`~/optimize` pass) gives a new ``T_map_stream`` correction (Sim(3), model units), published the way ROS users
expect (`_apply`):

* the mapper applies the correction to every following stream pose (its scale to the depth), so the next
  frame's edge jumps: ``map -> odom`` in the robot modes (the estimate `camera_tf.py` republishes is moved
  at once, under its lock), ``map -> camera`` in the bare camera mode; ``odom -> base`` is untouched;
* every pose of the trajectory (`~/path`, `~/save_map`'s TUM) is moved by its own keyframe's correction
  (``G ∘ C_new ∘ C_old⁻¹ ∘ G⁻¹``, G the frame chain model world -> map; `Mapper.correct`) and republished;
* the map cloud and the grid are rebuilt from the closer's keyframes at their optimised poses (the keyframes'
  decimated points: `loop_closure` keeps every 4th pixel);
* `~/loop_closures` (visualization_msgs/MarkerArray, latched): a LINE_LIST of the loop edges between keyframe
  positions in the map frame; /diagnostics gets the closer's counters (`loop_closure.*`).

No new TF edge: the corrected edges go through the same broadcaster and the node's one-parent check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
from geometry_msgs.msg import Point
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from std_msgs.msg import ColorRGBA, Header
from std_srvs.srv import Trigger
from visualization_msgs.msg import Marker, MarkerArray

from ..engine.geometry import Sim3
from ..engine.lock_order import OrderedLock
from ..engine.loop import LoopCloser, LoopClosureWorker, LoopEvent, ModelDescriptor, PairVerifier
from ..engine.loop.gtsam_import import gtsam_missing
from ..engine.loop.similarity import compose, inverse
from ..engine.mapping.frames import FrameChain
from ..engine.result import FrameResult
from .entities import NodeFacade
from .output_config import MAP_QOS
from .outputs import MAP_DRAIN_S, MappingOutputs
from .params import NodeParams, field_name, loop_closure_config
from .pipeline import Pipeline
from .services import SERVICE_QOS

#: How long `~/optimize` waits for the closer's queue and the pass.
OPTIMIZE_WAIT_S = 30.0
#: Width (m) and colour of the loop edges in RViz.
EDGE_WIDTH_M = 0.02
EDGE_COLOR = ColorRGBA(r=1.0, g=0.2, b=0.8, a=1.0)


def chain_sim3(chain: FrameChain) -> Sim3:
    """The frame chain as a Sim(3) G: model world -> map (``chain.camera_pose(p)`` = ``G.apply_pose(p)``)."""
    r_map, t_map = chain.map_cam0[:3, :3], chain.map_cam0[:3, 3]
    cam0_world = np.linalg.inv(chain.world_cam0)
    rotation = r_map @ cam0_world[:3, :3]
    return Sim3(rotation, chain.scale * (r_map @ cam0_world[:3, 3]) + t_map, float(chain.scale))


class Corrections:
    """The correction each stamp got: keyframe stamps (s, ascending) and their T_map_stream (the newest
    holds for every later stamp; identity before any loop)."""

    def __init__(self, stamps: np.ndarray | None = None, values: list[Sim3] | None = None) -> None:
        self.stamps = np.empty(0) if stamps is None else stamps
        self.values = values or []

    def indices(self, stamps_s: np.ndarray) -> np.ndarray:
        """[N] int: which correction each stamp got (-1: identity, before any loop)."""
        if not self.values:
            return np.full(len(stamps_s), -1)
        return np.maximum(np.searchsorted(self.stamps, stamps_s, side="right") - 1, 0)

    def value(self, index: int) -> Sim3:
        return self.values[index] if index >= 0 else Sim3.identity()


class LoopOutputs:
    """One camera's loop closure (module doc).

    Args:
        facade: creates the kept `~/loop_closures` publisher.
        outputs: the camera's outputs (mapper, path, TF estimate, map thread).
        closer: the engine's closer for this camera's stream.
        topic_prefix: `~/` or `~/<camera>/`.
    """

    def __init__(
        self, facade: NodeFacade, outputs: MappingOutputs, closer: LoopCloser, topic_prefix: str
    ) -> None:
        self._outputs = outputs
        self._markers = facade.create_publisher(MarkerArray, topic_prefix + "loop_closures", MAP_QOS)
        self._applied = Corrections()
        self._apply_lock = OrderedLock("loop.apply_lock")
        self.corrections = 0  # corrections published
        self.worker = LoopClosureWorker(closer, self._on_event)

    def submit(self, result: FrameResult, stamp_s: float, new_epoch: bool) -> None:
        """Publish thread: queue a keyframe result (a new epoch clears the closer first). Never blocks."""
        if new_epoch:
            self.clear()
        self.worker.submit(result, stamp_s)

    def clear(self) -> None:
        """A new stream: forget keyframes, graph and corrections (queued behind what the closer is doing)."""
        self._applied = Corrections()
        self.worker.clear()

    def optimize(self, timeout_s: float = OPTIMIZE_WAIT_S) -> str:
        """`~/optimize`: a forced pass after the queued keyframes, then its correction published."""
        self.worker.request_optimize()
        self.worker.join_idle(timeout_s)
        self._apply()
        stats = self.worker.closer.stats
        return (
            f"{stats.keyframes} keyframes, {len(self.worker.closer.loops)} loop edges, "
            f"{stats.last_optimize_ms:.1f} ms, correction {stats.last_correction_m:.3f} m "
            f"{stats.last_correction_deg:.2f} deg"
        )

    def stop(self) -> None:
        self.worker.stop()

    @contextmanager
    def held(self) -> Iterator[LoopCloser]:
        """The closer under its worker's lock: sessions save and restore its keyframe map and graph with the
        map (engine/persistence/save_load.py). Taken after the outputs' locks; the closer's thread never
        holds it while
        it takes theirs."""
        with self.worker.lock:
            yield self.worker.closer

    def stats(self) -> dict[str, object]:
        """/diagnostics: the closer's counters as `loop_closure.<name>`, corrections published, dropped."""
        values: dict[str, object] = {
            f"loop_closure.{k}": round(v, 3) for k, v in self.worker.closer.stats.as_dict().items()
        }
        values["loop_closure.corrections"] = self.corrections
        values["loop_closure.dropped"] = self.worker.dropped
        return values

    # ------------------------------------------------------------------------------------------------
    def _on_event(self, event: LoopEvent) -> None:
        self._apply()

    def _apply(self) -> None:
        """Publish the closer's current keyframe poses (module doc). The closer's thread or `~/optimize`: one
        at a time (each moves the path from the corrections the previous one applied)."""
        with self._apply_lock:
            self._apply_unlocked()

    def _apply_unlocked(self) -> None:
        closer, outputs = self.worker.closer, self._outputs
        with self.worker.lock:
            keyframes = sorted(closer.map.keyframes.values(), key=lambda kf: kf.stamp_s)
            if not keyframes:
                return
            new = Corrections(
                np.array([kf.stamp_s for kf in keyframes]),
                [compose(kf.pose, inverse(kf.stream_pose)) for kf in keyframes],
            )
            correction = closer.correction
            clouds = [(kf.map_points(), kf.colors, kf.pose.translation) for kf in keyframes]
            poses = {kf.key: kf.pose.translation for kf in keyframes}
            edges = [(poses[a], poses[b]) for a, b in closer.loops if a in poses and b in poses]
        chain = outputs.mapper.chain
        if chain is None:
            return
        g = chain_sim3(chain)
        g_inv = inverse(g)
        old = self._applied

        def move(stamps_s: np.ndarray, poses: np.ndarray) -> np.ndarray:
            """Poses [N, 4, 4] at stamps [N]: one fix per (new, old) correction pair of the stamps."""
            pairs = np.stack([new.indices(stamps_s), old.indices(stamps_s)], axis=1)
            moved = np.array(poses, np.float64, copy=True)
            for i_new, i_old in np.unique(pairs, axis=0).tolist():
                fix = compose(compose(g, compose(new.value(i_new), inverse(old.value(i_old)))), g_inv)
                rows = (pairs[:, 0] == i_new) & (pairs[:, 1] == i_old)
                moved[rows] = fix.apply_pose(poses[rows])
            return moved

        outputs.correct(correction, move)
        self._applied = new
        self.corrections += 1
        self._rebuild_map(g, clouds)
        self._publish_edges(g, edges)

    def _rebuild_map(self, g: Sim3, clouds: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Map cloud and grid from the keyframes at their optimised poses (after the queued map works)."""
        outputs = self._outputs
        mapper = outputs.mapper
        if not mapper.mapping_enabled or not mapper.scale.converged:
            return
        outputs.map.drain(MAP_DRAIN_S)
        moved = [
            (g.apply_points(xyz.astype(np.float64)).astype(np.float32), rgb, g.apply_points(centre[None])[0])
            for xyz, rgb, centre in clouds
        ]
        outputs.map_side.rebuild(moved)

    def _publish_edges(self, g: Sim3, edges: list[tuple[np.ndarray, np.ndarray]]) -> None:
        outputs = self._outputs
        header = Header(frame_id=outputs.map_frame)
        if outputs.last_stamp is not None:
            header.stamp = outputs.last_stamp
        marker = Marker(header=header, ns="loop_closures", id=0, type=Marker.LINE_LIST, action=Marker.ADD)
        marker.scale.x = EDGE_WIDTH_M
        marker.color = EDGE_COLOR
        marker.pose.orientation.w = 1.0
        for a, b in edges:
            for p in g.apply_points(np.stack([a, b])):
                marker.points.append(Point(x=float(p[0]), y=float(p[1]), z=float(p[2])))
        self._markers.publish(MarkerArray(markers=[marker]))


def attach_loop_closure(
    outputs: MappingOutputs, facade: NodeFacade, params: NodeParams, pipeline: Pipeline | None, prefix: str
) -> None:
    """Activate: give a camera's outputs their `LoopOutputs` (once per configure; none when
    `loop_closure.enabled` is false). Descriptors from the model's encoder tokens unless the pipeline brings
    its own (`Pipeline.loop_descriptor`, a test's oracle); verification through the pipeline's model. Without
    gtsam the camera maps on without loop closure: one WARN and `loop_closure_off` in /diagnostics."""
    if outputs.loop is not None or pipeline is None or not params.loop_closure_enabled:
        return
    if (missing := gtsam_missing()) is not None:
        facade.stats.notes["loop_closure_off"] = missing
        facade.get_logger().warning(f"loop closure off: {missing}", once=True)
        return
    config = loop_closure_config(lambda name: getattr(params, field_name(name)))
    describe = pipeline.loop_descriptor or ModelDescriptor(pipeline.model)
    closer = LoopCloser(
        config, params.model_image_width, describe, PairVerifier(pipeline.model, config.verify)
    )
    outputs.loop = LoopOutputs(facade, outputs, closer, prefix)


def create_optimize_service(
    node: Node,
    group: CallbackGroup,
    loops: Callable[[], list[LoopOutputs]],
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
