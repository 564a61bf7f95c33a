"""The `lingbot_map` lifecycle node: cameras in; TF, odometry, path, depth and a point-cloud map out.

Thin over the library (docs/node.md): configure builds the model and the set of cameras (pipeline.py: a
`MultiStreamSession`, one camera or several over one KV pool); subscriptions, publishers, services and timers
are created once and kept (entities.py); activate starts the inference thread and the engine's camera pipeline
(rounds.py) and opens the gate, deactivate closes it and stops them (map and path are kept), cleanup releases
the model (and the GPU). No callback raises: failures are counted and logged. Each camera (`cameras`; default
one unnamed camera) is a `CameraStream` (cameras/stream.py). Three stages: the image callback converts and
enqueues (intake.py) and never blocks; the inference thread runs one round over the cameras that have a frame
(ONE engine call, `CameraPipeline.step`); the engine's pose stage tracks each result and hands it back to its
camera once, which publishes it, in input order with the input stamps. `~/reset` and live
`kv_cache.sliding_window` take the cameras' session locks; results of steps from before a reset are dropped.
Run: `ros2 run lingbot_map_ros lingbot_map_node --ros-args -p model.preset:=tiny` (or `python -m`).
"""

from __future__ import annotations

# ruff: noqa: E402 - the start-up signal handlers come before the imports below (about 2 s: torch, rclpy)
if __name__ == "__main__":
    from lingbot_map_ros.ros.lifecycle.startup_signals import exit_quietly_on_signals

    exit_quietly_on_signals()

import sys

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter

from ..engine.face import OrderedLock, SessionError, TfEdgeGuard
from .cameras.host import CameraHost
from .cameras.rounds import NodeRounds
from .cameras.stream import CameraStream, make_cameras
from .diagnostics.stats import CauseLog, RuntimeStats, SimClockWatch
from .diagnostics.status import node_status
from .input.depth import DepthInput
from .input.intake import InputFrame
from .input.streams import CameraFrames
from .lifecycle.entities import CallbackGuard, KeptEntities, NodeFacade, guard_callback, parameters_refused
from .lifecycle.pipeline import ConfigureError, Pipeline, build_pipeline
from .lifecycle.shutdown import run_node
from .lifecycle.timers import MapOutput, NodeTimers
from .outputs.fused import FusedMap
from .outputs.loop import attach_loop_closure, create_optimize_service
from .outputs.mapping import LoopPublisher, MappingOutputs
from .outputs.tracking import TrackingOutputs
from .params.declare import NodeParams, apply_update, check_update, declare_parameters, read_parameters
from .services.session_files import SessionFiles
from .services.triggers import MappingServices, create_reject_loop_service
from .tf.listener import TfLookup

NODE_NAME = "lingbot_map"
#: On shutdown (SIGINT), how long to wait for an inference step in progress before exiting without it.
SHUTDOWN_STEP_WAIT_S = 1.0


class LingBotMapNode(CallbackGuard, LifecycleNode):
    """Lifecycle node `lingbot_map` (see module doc and docs/node.md for the interface).

    Raises:
        ValueError: at construction, when a parameter given on the command line is invalid.
    """

    def __init__(self, node_name: str = NODE_NAME, **kwargs: object) -> None:
        super().__init__(node_name, **kwargs)
        declare_parameters(self)
        self.params: NodeParams = read_parameters(self)
        self.stats = RuntimeStats()
        self._causes = CauseLog(self.stats, self.get_logger())  # rejections and failures by cause
        failed = self._causes.callback_failed
        self.add_on_set_parameters_callback(
            guard_callback("set_parameters", self._check_parameters, failed, parameters_refused)
        )
        self.add_post_set_parameters_callback(
            guard_callback("apply_parameters", self._apply_parameters, failed)
        )
        self._pipeline: Pipeline | None = None
        self._rounds: NodeRounds | None = None  # inference thread + camera pipeline (rounds.py), when active
        self._active = False  # the gate of every kept entity's callback (lifecycle state active)
        self._kept = KeptEntities(self)
        self._facade = NodeFacade(self, self._kept)  # what MappingOutputs and the intake create through
        self._sessions = SessionFiles()
        self._load_on_activate = False  # session.load_path is loaded at the first activate after configure
        self._clock_watch = SimClockWatch(self.get_logger())
        self._service_group = MutuallyExclusiveCallbackGroup()
        self._stream_change = OrderedLock("node.stream_change")  # resets and loads (services' own groups)
        self._timer_group = MutuallyExclusiveCallbackGroup()
        p = self.params  # TF lookups (robot modes), the depth topic: subscriptions kept for the node's life
        tf_history = {"cache_s": p.tf_cache_time, "max_future_s": p.tf_max_future_s, "map_frame": p.map_frame}
        self._tf_lookup = TfLookup(self._facade, **tf_history)
        self._depth_input: DepthInput | None = None
        host = CameraHost(
            self,
            self._facade,
            lambda: self.params,
            lambda: self._active,
            self._submit,
            self.reset_camera,
            self._tf_lookup,
            MutuallyExclusiveCallbackGroup(),
            self._service_group,
            CameraFrames(),
            TfEdgeGuard(self._tf_lookup.graph),
        )
        counters = (self.stats, self._causes)
        self.cameras = make_cameras(host, tuple(self.params.cameras), counters, self._robot_map_odom)
        self._named = "" not in self.cameras  # named cameras (a fused map; no sessions) or one unnamed
        self._fused = (
            FusedMap(self._facade, self._camera_outputs, lambda: self.params.map_frame)
            if self._named
            else None
        )
        # Created once, kept for the node's life (entities.py): services, /diagnostics, timers (timers.py).
        self._triggers = MappingServices(
            self.get_logger(),
            lambda: self.params,
            self._save_target,
            self.reset_stream,
            self.save_session,
            self.load_session,
            self._causes.callback_failed,
        )
        self._triggers.create(self)
        create_optimize_service(self, self._service_group, self._loops, self._causes.callback_failed)
        create_reject_loop_service(self, self._service_group, self._loops, self._causes.callback_failed)
        self._tracking = TrackingOutputs(self._facade, self._timer_group, self._camera_outputs, failed)
        self._diag_pub = self._kept.publisher(DiagnosticArray, "/diagnostics", 10)
        self._periodic = NodeTimers(
            self,
            self._timer_group,
            self.params,
            self._active_cameras,
            self._active_maps,
            self.publish_diagnostics,
            self.context.ok,
            self._causes.callback_failed,
        )

    def callback_failed(self, where: str, exc: Exception) -> None:
        """`CallbackGuard`: an exception escaped a callback (`failed_<where>_<ExceptionType>`, logged)."""
        causes = getattr(self, "_causes", None)  # rclpy's own services are created before it
        if causes is None or not self.context.ok():
            return super().callback_failed(where, exc)
        causes.callback_failed(where, exc)

    def _robot_map_odom(self) -> object:
        """The first camera's T_map_odom: the map frame every camera's robot-mode stream starts in."""
        outputs = next(iter(self.cameras.values())).outputs
        return outputs.robot_map_odom() if outputs is not None else None

    def _camera_outputs(self) -> list[tuple[str, MappingOutputs]]:
        return [(name, c.outputs) for name, c in self.cameras.items() if c.outputs is not None]

    def _loops(self) -> list[LoopPublisher]:
        return [o.loop for _, o in self._camera_outputs() if o.loop is not None and self._active]

    def _active_cameras(self) -> list[MappingOutputs]:
        """Every camera's outputs (the timers' `map -> odom` and `~/path`), none while not active."""
        return [o for _, o in self._camera_outputs()] if self._active else []

    def _active_maps(self) -> list[MapOutput]:
        """What the map and grid timers publish: every camera's map (and the fused map), none while not
        active."""
        outputs: list[MapOutput] = list(self._active_cameras())
        return outputs + [self._fused] if self._fused is not None and outputs else outputs

    def _save_target(self) -> object | None:
        """What `~/save_map` saves: the camera's outputs, or all cameras and the fused map; None: inactive."""
        if not self._active or not self._camera_outputs():
            return None
        return self._fused if self._fused is not None else self.cameras[""].outputs

    # ----------------------------------------------------------------------------------------- lifecycle
    def build_pipeline(self) -> Pipeline:
        """The model and session of the configure step (ros/lifecycle/pipeline.py); test/fault_node.py extends
        it."""
        return build_pipeline(self.params, self.get_logger().warning)

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._pipeline = self.build_pipeline()
            for camera in self.cameras.values():
                camera.configure(self._pipeline.cameras)
        except ConfigureError as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        except Exception as exc:  # noqa: BLE001 - any model/engine error is one clear configure failure
            self.get_logger().error(f"configure failed: {type(exc).__name__}: {exc}")
            return TransitionCallbackReturn.FAILURE
        self._periodic.set_rates(self.params)
        self._load_on_activate = bool(self.params.session_load_path.strip())
        if stale := self._sessions.clean(self.params):
            self.get_logger().warning(stale)
        cameras = f", cameras {list(self.cameras)}" if self._named else ""
        self.get_logger().info(f"configured: {self._pipeline.description}{cameras}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            return self._activate()
        except Exception as exc:  # noqa: BLE001 - rclpy turns it into ERROR without a word; say why
            self.get_logger().error(f"activate failed: {type(exc).__name__}: {exc}")
            self._release_active()
            return TransitionCallbackReturn.FAILURE

    def _activate(self) -> TransitionCallbackReturn:
        p = self.params
        # Publishers and subscriptions come from the kept set: the same ones on every activation.
        if p.scale_source == "depth" and self._depth_input is None:
            self._depth_input = DepthInput(  # kept, like every subscription
                self._facade, lambda: self.params.max_input_pixels, self._causes.rejected
            )
        self._rounds = NodeRounds(self.cameras, lambda: self._pipeline, lambda: self.params, self.context.ok)
        topics = [
            camera.activate(p, self._depth_input, primary=i == 0)
            for i, camera in enumerate(self.cameras.values())
        ]
        for camera in self.cameras.values():  # loop closure on its own thread per camera (outputs/loop.py)
            attach_loop_closure(camera.outputs, self._facade, p, self._pipeline, camera.output_prefix)
        self._active = True
        self.get_logger().info(
            f"active: listening on {', '.join(topics)} ({p.image_transport}, {p.qos_reliability})"
        )
        if self._load_on_activate:
            self._load_on_activate = False
            try:
                self.get_logger().info(self.load_session())
            except Exception as exc:  # noqa: BLE001 - a bad session must not stop the node: it maps afresh
                self._causes.callback_failed("session.load_path", exc)
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_active()
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_configured()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release everything; a step still running after `SHUTDOWN_STEP_WAIT_S` is left to the exit. The map
        threads end here in either case: the context's shutdown destroys the publishers they use."""
        stopped = self._release_active(SHUTDOWN_STEP_WAIT_S)
        self._periodic.map_odom.stop()  # like the map threads: it publishes
        for _, outputs in self._camera_outputs():
            outputs.map.stop()
        if not stopped:
            self.get_logger().warning(
                f"shutdown: an inference step is still running after {SHUTDOWN_STEP_WAIT_S} s; "
                "exiting without waiting for it"
            )
            return TransitionCallbackReturn.SUCCESS
        self._release_configured()
        return TransitionCallbackReturn.SUCCESS

    def autostart(self) -> bool:
        """Configure then activate (the `autostart` parameter); False when a transition failed."""
        if self.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            return False
        return self.trigger_activate() == TransitionCallbackReturn.SUCCESS

    def _release_active(self, step_wait_s: float = 30.0) -> bool:
        """Close the gate and stop the threads activate started (the entities are kept: entities.py; each
        camera keeps its outputs, map and path, until cleanup); False when the inference thread did not end
        within `step_wait_s`. Frames converted meanwhile are counted (`frames_ignored_inactive`)."""
        self._active = False
        stopped = True
        if self._rounds is not None:
            stopped = self._rounds.stop(step_wait_s)
            self._rounds = None
        if self.context.ok():  # the last path; the map thread integrates the queued map work by itself
            for _, outputs in self._camera_outputs():  # (not waited for: deactivate answers at once)
                outputs.publish_path()
        return stopped

    def _release_configured(self) -> None:
        for camera in self.cameras.values():
            camera.release()
        if self._pipeline is not None:
            self._pipeline.release()
            self._pipeline = None

    # ---------------------------------------------------------------------------------------- frames in
    def _submit(self, name: str, frame: InputFrame) -> bool:
        """A camera's accepted frame joins its drop-oldest queue; False when not active (not queued)."""
        rounds = self._rounds
        if rounds is None or not self._active:
            return False
        return rounds.submit(name, frame)

    # --------------------------------------------------------------------------------- reset, timers
    def reset_camera(self, name: str) -> int | None:
        """Start a new stream for camera `name` (`~/<name>/reset`); the number of queued frames discarded,
        None when the node is not active."""
        rounds = self._rounds
        if self._pipeline is None or rounds is None:
            return None
        with self._stream_change:
            return self.cameras[name].reset(rounds.clear)

    def reset_stream(self) -> int | None:
        """`~/reset`: a new stream for every camera (cameras/stream.py `reset`); the queued frames discarded,
        None when the node is not active."""
        counts = [self.reset_camera(name) for name in self.cameras]
        return None if None in counts else sum(counts)

    def _single(self) -> CameraStream:
        """The unnamed camera (sessions are saved and loaded for one camera only)."""
        if self._named:
            raise SessionError(
                f"sessions are saved and loaded for one camera; this node has {list(self.cameras)}"
            )
        return self.cameras[""]

    def save_session(self) -> str:
        """`~/save_session`: copies of the session and the map under both locks (after what was inferred is
        published), written outside them. Raises `SessionError` (not active, anchor phase, ...) or OSError."""
        camera, rounds = self._single(), self._rounds
        if rounds is not None:
            rounds.wait_published()
        return self._sessions.write(self.params, camera.capture(self._sessions, self.params))

    def load_session(self) -> str:
        """`~/load_session` (and `session.load_path` at activate): read and check the session first (a refused
        load touches nothing), then start a new stream in its map frame (session_files.py)."""
        camera, rounds = self._single(), self._rounds
        if rounds is None:
            raise SessionError("not active")
        return self._sessions.load(self.params, camera, rounds.clear, self._stream_change)

    def publish_diagnostics(self) -> None:
        """Publish /diagnostics now (timer, and right after a live parameter change): one status for the
        node (the unnamed camera's, as before), and one per named camera."""
        pub = self._diag_pub
        if pub is None or not self.context.ok():
            return
        now = self.get_clock().now()
        use_sim_time = bool(self.get_parameter("use_sim_time").value)
        pipeline, rounds = self._pipeline, self._rounds  # deactivate/cleanup may clear them meanwhile
        hardware = str(pipeline.device) if pipeline else "none"
        state = "active" if self._active else ("inactive" if pipeline else "unconfigured")
        name = self.get_fully_qualified_name()  # with the namespace: two robots' statuses never collide
        clock = self._clock_watch.check(use_sim_time, now.nanoseconds)
        runtime = {**self.stats.snapshot(), "clock": clock}
        fused = self._fused is not None and self._active
        msg = node_status(
            name,
            hardware,
            now.to_msg(),
            state,
            runtime,
            self.cameras,
            rounds,
            pipeline.cameras.pool_stats() if pipeline and self._named else None,
            sum(o.map_size() for _, o in self._camera_outputs()) if fused else None,
            self._tf_lookup.stats(),
        )
        pub.publish(msg)

    # ------------------------------------------------------------------------------------- parameters
    def _check_parameters(self, params: list[Parameter]) -> SetParametersResult:
        """Validate; a new `kv_cache.sliding_window` is applied to the cache here, so a refusal rejects it.
        Guarded where it is registered: an unexpected error rejects the update with the reason."""
        result = check_update(params, self.params, configured=self._pipeline is not None)
        window = {p.name: p.value for p in params}.get("kv_cache.sliding_window")
        if not result.successful or window is None or self._pipeline is None:
            return result
        try:
            for camera in self.cameras.values():
                camera.set_sliding_window(window)
        except (ValueError, RuntimeError) as exc:
            return SetParametersResult(successful=False, reason=f"kv_cache.sliding_window refused: {exc}")
        self.get_logger().info(f"kv_cache.sliding_window -> {window}")
        return result

    def _apply_parameters(self, params: list[Parameter]) -> None:
        """After a successful set: update the snapshot and the outputs, report the change at once (guarded
        where it is registered)."""
        self.params = apply_update(self.params, params)
        self._tf_lookup.max_future_s = self.params.tf_max_future_s
        for i, camera in enumerate(self.cameras.values()):
            outputs = camera.outputs
            if outputs is not None:
                outputs.update_config(camera.output_config(self.params, primary=i == 0))
        self._periodic.diagnostics_soon()


def main(args: list[str] | None = None, exit_process: bool = True) -> int:
    """Entry point of `lingbot_map_node`; exit code 0 on SIGINT/SIGTERM (a second one during the shutdown
    exits at once, also 0), 1 when autostart fails or the executor stops by itself, 2 on bad params.
    `shutdown.run_node` has the signal handling; `exit_process=False` returns the code in-process."""
    return run_node(LingBotMapNode, SHUTDOWN_STEP_WAIT_S, args, exit_process)


if __name__ == "__main__":
    sys.exit(main())
