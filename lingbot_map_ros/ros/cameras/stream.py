"""One camera of the node: its input, stream, session, outputs and counters (the node holds one per camera).

A `CameraStream` owns what belongs to one image stream (docs/node.md "Behaviour", "Several cameras"): the
input subscriptions and stream guard (intake.py, streams.py), the stream (`~/reset` moves the engine's token
first, `CameraState.next_stream`, so frames arriving during a reset already belong to the new stream; the
session, under the session lock, and the outputs, under the publish lock, catch up lazily: `_sync_*`), the
camera identity (a confirmed change of the image frame_id restarts the stream), its place in the node's set
of cameras (`MultiStreamSession`: its `StreamingSession`, all on the node's one model), its
`MappingOutputs` (kept from the first activate after configure until cleanup, so deactivate/activate keeps
the map), its counters (`RuntimeStats`; the unnamed camera shares the node's) and its `~/<name>/reset`. The
round runs on the node's inference thread (scheduler.py, cameras/step.py: `prepare` and `finish` around
`CameraPipeline.step`); the engine pipeline's pose stage hands the results back here (`pose_round`, `where`,
`delivered` once per round: the `PoseSink`), in round order. Nothing here raises into a callback.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from std_msgs.msg import Header
from std_srvs.srv import Trigger

from ...engine.face import (
    CameraState,
    FrameResult,
    MultiStreamSession,
    OrderedLock,
    PosedResult,
    SessionError,
    SessionSnapshot,
    SessionStats,
    StreamingSession,
)
from ..diagnostics.stats import CauseLog, RuntimeStats, intrinsics_report
from ..input.depth import DepthInput
from ..input.intake import FrameIntake, InputFrame
from ..lifecycle.entities import guard_callback, service_failure
from ..messages.poses import stamp_seconds
from ..outputs.config import OutputConfig
from ..outputs.mapping import MappingOutputs
from ..params.declare import NodeParams
from ..services.session_files import SessionFiles
from ..services.triggers import SERVICE_QOS
from .host import CameraHost


class CameraStream:
    """One camera (module doc). `name` "" is the unnamed camera of a single-camera node: topics `image`,
    `camera_info`, outputs under `~/`, `~/reset` is the node's; a named camera uses `<name>/image`,
    `<name>/camera_info`, `~/<name>/...`, `~/<name>/reset` and, without robot TF, map frame
    `<map_frame>_<name>`.

    Args:
        name: the camera's name ("" or a ROS name token).
        host: what the camera uses of the node.
        stats / causes: its counters and cause log (the node's own for the unnamed camera).
        robot_map: the driving camera's T_map_odom (None for the camera that drives the robot TF itself).
    """

    def __init__(
        self,
        name: str,
        host: CameraHost,
        stats: RuntimeStats,
        causes: CauseLog,
        robot_map: Callable[[], np.ndarray | None] | None = None,
    ) -> None:
        self.name = name
        self.stats = stats
        self.causes = causes
        self._host = host
        self._robot_map = robot_map
        self._input_prefix = f"{name}/" if name else ""
        self.output_prefix = f"~/{name}/" if name else "~/"
        self.session_lock = OrderedLock("camera.session_lock")
        self.publish_lock = OrderedLock("camera.publish_lock")  # one step's results at a time; reset clears
        self._session_stream = self._outputs_stream = 0  # the stream token each has caught up with
        self.camera_id: str | None = None  # header frame_id of the stream's frames (a change = new camera)
        self._engine: MultiStreamSession | None = None  # the node's cameras (this one is `name` in it)
        self._step_epoch: object = None  # the session's epoch before the step in progress
        self.outputs: MappingOutputs | None = None
        self.session_stats: SessionStats | None = None  # snapshot for the diagnostics timer
        self._last_result: dict[str, int] = {}  # index / phase / epoch of the last published frame
        self.intrinsics: dict[str, float] = {}  # predicted vs input focal lengths, for /diagnostics
        self._round_last: FrameResult | None = None  # the last result of the round being delivered
        self.intake = FrameIntake(
            causes,
            host.params,
            self._enqueue,
            active=host.active,
            on_inactive=stats.record_ignored_inactive,
            topic_prefix=self._input_prefix,
            frames=host.frames,
            camera=name,
        )
        if name:  # the unnamed camera's reset is the node's ~/reset
            host.node.create_service(
                Trigger,
                f"~/{name}/reset",
                guard_callback(
                    f"service_{name}_reset",
                    self._on_reset,
                    self.causes.callback_failed,
                    service_failure("reset"),
                ),
                qos_profile=SERVICE_QOS,
                callback_group=host.service_group,
            )

    def output_config(self, params: NodeParams, primary: bool) -> OutputConfig:
        """The outputs' options: the node's, with this camera's map frame and TF role."""
        camera_map = f"{params.map_frame}_{self.name}" if self.name else ""
        return replace(
            OutputConfig.from_params(params), camera_map_frame=camera_map, publish_robot_tf=primary
        )

    # ------------------------------------------------------------------------------------------ lifecycle
    @property
    def configured(self) -> bool:
        """Whether the camera has its session (configure until cleanup)."""
        return self._engine is not None

    @property
    def session(self) -> StreamingSession | None:
        """This camera's `StreamingSession` (save/load sessions), None when not configured."""
        return None if (engine := self._engine) is None else engine.sessions[self.name]

    def depth_wanted(self) -> bool:
        """Whether this frame's depth head must run (the outputs publish or use depth)."""
        outputs = self.outputs
        return outputs is not None and outputs.depth_wanted()

    def configure(self, engine: MultiStreamSession) -> None:
        """Take this camera's place in the node's set of cameras (configure; its `reset` waits for a round
        in progress): a new stream, a new map at the first activate."""
        with self.session_lock:
            self._engine = engine
            self.camera_id = None
            self._refresh_session_stats()
        self.intake.guard.forget()

    def activate(self, params: NodeParams, depth_input: DepthInput | None, primary: bool) -> str:
        """Create the outputs (first activate after configure; later ones keep map and path), subscribe;
        returns the image topic."""
        if self.outputs is None:
            self.outputs = MappingOutputs(
                self._host.facade,
                self.output_config(params, primary),
                self._host.tf_lookup,
                depth_input,
                topic_prefix=self.output_prefix,
                robot_map=self._robot_map,
                on_map_error=lambda exc: self.causes.callback_failed("map_worker", exc),
                tf_guard=self._host.tf_guard,
            )
            self._session_stream = self._outputs_stream = self.outputs.state.stream  # a new engine's first
        subscriptions = self.intake.subscribe(self._host.facade, params, self._host.input_group)
        return subscriptions[0].topic_name

    def release(self) -> None:
        """Drop the session and the outputs (cleanup); their publishers are kept (entities.py)."""
        with self.session_lock:
            self._engine = None
            self.session_stats = None
            self.camera_id = None
        with self.publish_lock:
            outputs, self.outputs = self.outputs, None
        if outputs is not None:
            outputs.destroy()

    # ---------------------------------------------------------------------------------------- frames
    def _enqueue(self, header: Header, rgb: np.ndarray, received: float) -> None:
        """An accepted frame (intake.py) joins this camera's queue in the current stream token."""
        stream = None if (outputs := self.outputs) is None else outputs.state.stream
        if not self._host.submit(self.name, InputFrame(header, rgb, received, stream)):
            self.stats.record_ignored_inactive()

    def prepare(self, frame: InputFrame) -> bool:
        """Inference thread, with `session_lock` held: whether `frame` goes into this step (False: a reset
        came after it arrived); a new stream resets the session, another camera id restarts the stream."""
        outputs = self.outputs
        if self._engine is None or outputs is None or not outputs.state.is_current(frame.stream):
            return False
        self._sync_session(frame.stream)
        self._step_epoch = self._session_epoch()
        self._follow_camera(frame.header.frame_id)
        return True

    def finish(self, results: list[FrameResult]) -> None:
        """Inference thread, with `session_lock` held, after a round (its results are on their way to the pose
        stage): the session statistics, and a warning when the engine restarted the stream."""
        self._refresh_session_stats(results[-1] if results else None)
        stats, epoch = self.session_stats, self._step_epoch
        if epoch is not None and stats is not None and stats.epoch != epoch:  # the engine restarted it
            self._host.node.get_logger().warning(
                f"{f'camera {self.name}: ' if self.name else ''}mapping restarted (epoch {stats.epoch}): "
                f"{stats.last_reset_reason}; "
                f"the map and path are cleared once the next {self._host.params().kv_cache_scale_frames} "
                "frames have formed a new anchor phase"
            )

    def _follow_camera(self, frame_id: str) -> None:
        """Frames from another camera (header frame_id) start a new stream, as a new resolution does: one map
        never mixes two cameras (call with `session_lock` held)."""
        previous, self.camera_id = self.camera_id, frame_id
        if previous is not None and frame_id != previous:
            self._reset_session(f"camera changed from '{previous}' to '{frame_id}'")

    # --------------------------------------------------- the pose stage's `PoseSink` (camera_pipeline.py)
    @contextmanager
    def pose_round(self, stream: int) -> Iterator[CameraState | None]:
        """Hold `publish_lock` for one round's results stepped in stream token `stream`: the camera's engine,
        None when a reset came in between, the outputs are gone or the node is shutting down."""
        with self.publish_lock:
            outputs = self.outputs
            if outputs is None or not outputs.state.is_current(stream) or not self._host.node.context.ok():
                yield None
                return
            self._sync_outputs(stream)
            self._round_last = None
            yield self.outputs.state
            info, last = self.intake.camera_info, self._round_last  # once per round, for /diagnostics
            if info is not None and last is not None:
                self.intrinsics = intrinsics_report(info, last.intrinsics, last.image_hw)

    def where(self, result: FrameResult) -> tuple[str, float]:
        """(the optical frame of the result's image, its stamp in s)."""
        self._round_last, header = result, result.meta.header
        return self.outputs.camera_frame(header), stamp_seconds(header.stamp)

    def delivered(self, posed: list[PosedResult]) -> None:
        """One round's frames (`publish_lock` held by `pose_round`): each tracked one published, each whose
        transform is missing (or pruned: `frame_too_old`, its stamp older than the TF history kept) counted
        and dropped before anything of it was published."""
        for item in posed:
            result, exc = item.result, item.missing
            if item.frame is None:
                self.causes.rejected(exc.cause, exc.reason())
                continue
            self.outputs.publish(result, result.meta.header, item.frame)
            self.stats.record_output(time.monotonic() - result.meta.received)

    def inference_failed(self, exc: Exception) -> None:
        """A failed step of this camera: counted and logged (`failed_<type>`) with the recovery."""
        with self.session_lock:
            epoch = self._session_epoch()
            if self._engine is not None:
                self._refresh_session_stats()
            restarted = self._session_epoch() != epoch
        self.causes.inference_failed(exc, restarted)

    # ------------------------------------------------------------------------------------------ reset
    def reset(self, clear_queue: Callable[[str], int]) -> int | None:
        """Start a new stream: move the engine's stream token first (frames arriving from now on belong to
        the new stream), drop the queued frames (`clear_queue(name)`), then reset the session after a step in
        progress and clear path, trajectory and map after a step being published. Returns the number of
        queued frames discarded, None when not active."""
        if self._engine is None or (outputs := self.outputs) is None:
            return None
        stream = outputs.state.next_stream()
        discarded = clear_queue(self.name)
        with self.session_lock:  # waits for a step in progress
            if self._engine is not None:
                self._sync_session(stream)
        with self.publish_lock:  # waits for a step being published
            if self.outputs is not None:
                self._sync_outputs(stream)
        self.stats.record_reset()
        return discarded

    def capture(self, sessions: SessionFiles, params: NodeParams) -> SessionSnapshot:
        """Copies of the session and the map under both locks (`~/save_session`; call after what was
        inferred is published). Raises `SessionError` (not active, anchor phase, ...)."""
        with self.session_lock, self.publish_lock:
            if self.session is None or self.outputs is None or not self._host.active():
                raise SessionError("not active")
            return sessions.capture(params, self.session, self.outputs)

    def restore(self, snapshot: SessionSnapshot, clear_queue: Callable[[str], int]) -> None:
        """Continue a saved session (`~/load_session`) in a new stream: queued and in-flight frames of
        the old stream are dropped, session and outputs take the snapshot. Raises `SessionError`."""
        if self.session is None or self.outputs is None:
            raise SessionError("not active")
        stream = self.outputs.state.next_stream()
        clear_queue(self.name)
        with self.session_lock, self.publish_lock:
            if self.session is None or self.outputs is None:
                raise SessionError("not active")
            self.outputs.restore(self.session, snapshot)
            self._session_stream = self._outputs_stream = stream
            self.camera_id = None
            self._last_result = {}
            self._refresh_session_stats()

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """`~/<name>/reset`: this camera's stream only (the others keep mapping)."""
        discarded = self._host.reset(self.name)
        if discarded is None:
            return Trigger.Response(success=False, message="not active")
        message = (
            f"reset camera {self.name}: cache, trajectory and map cleared, {discarded} queued frame(s) "
            f"discarded; the next {self._host.params().kv_cache_scale_frames} frames form a new "
            "anchor phase"
        )
        self._host.node.get_logger().info(message)
        return Trigger.Response(success=True, message=message)

    def _sync_session(self, stream: int) -> None:
        """Reset the session once for a new stream token (call with `session_lock` held)."""
        if self._session_stream != stream:
            self._reset_session("reset requested")
            self._session_stream = stream
            self._last_result = {}
            self._refresh_session_stats()

    def _reset_session(self, reason: str) -> None:
        """Reset this camera's session (with `session_lock` held); the set of cameras waits for a round of
        the other cameras in progress."""
        self._engine.reset(self.name, reason)

    def _sync_outputs(self, stream: int) -> None:
        """Clear path, trajectory and map once for a new stream token (with `publish_lock` held)."""
        if self._outputs_stream != stream:
            self.outputs.clear()
            self.outputs.publish_cleared(self._host.node.get_clock().now().to_msg())
            self._outputs_stream = stream

    # ------------------------------------------------------------------------------------ parameters
    def set_sliding_window(self, window: int) -> None:
        """Live `kv_cache.sliding_window`. Raises ValueError/RuntimeError when the session refuses it."""
        with self.session_lock:
            if self._engine is not None:  # cleanup may have released it meanwhile; between rounds
                self._engine.set_sliding_window(window, self.name)
            self._refresh_session_stats()

    def _refresh_session_stats(self, last: object | None = None) -> None:
        """Snapshot the session statistics (call with `session_lock` held) for the diagnostics timer."""
        engine = self._engine
        self.session_stats = engine.stats(self.name) if engine is not None else None
        if last is not None:
            self._last_result = {"index": last.index, "phase": last.phase, "epoch": last.epoch}

    def _session_epoch(self) -> int | None:
        return None if self.session_stats is None else self.session_stats.epoch

    def session_diagnostics(self) -> dict[str, object]:
        """The `session.` values of /diagnostics: the statistics and the last published frame."""
        stats = {} if self.session_stats is None else self.session_stats.as_dict()
        return {**stats, "last_frame": dict(self._last_result)}


def make_cameras(
    host: CameraHost,
    names: tuple[str, ...],
    node_counters: tuple[RuntimeStats, CauseLog],
    robot_map: Callable[[], np.ndarray | None],
) -> dict[str, CameraStream]:
    """One `CameraStream` per name; the unnamed camera shares the node's counters (`node_counters`), a named
    one has its own and its own input callback group (frames of each camera arrive in order, one at a time).
    Every camera but the first starts its robot-mode streams in the first camera's map (`robot_map`)."""
    cameras: dict[str, CameraStream] = {}
    for i, name in enumerate(names):
        if not name:
            stats, causes = node_counters
        else:
            stats = RuntimeStats()
            causes = CauseLog(stats, host.node.get_logger().get_child(name))
            host = replace(host, input_group=MutuallyExclusiveCallbackGroup())
        cameras[name] = CameraStream(name, host, stats, causes, None if i == 0 else robot_map)
    return cameras
