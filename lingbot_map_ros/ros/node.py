"""The `lingbot_map` lifecycle node: camera in; TF, odometry, path, depth and a point-cloud map out.

Thin over the library (docs/node.md): configure builds the model and `StreamingSession` (pipeline.py), the
node's subscriptions, publishers, services and timers are created once and kept (entities.py: never destroyed
while the executor may wait on them), activate starts the inference and publish threads and opens the gate,
deactivate closes it and stops them, cleanup releases the model (and the GPU). No callback raises (an
exception escaping one would end the executor's spin): failures are counted and logged. Three stages: the
image callback converts and enqueues (intake.py, then worker.py's drop-oldest queue) and never blocks; the
inference thread pushes frames through the session under `_session_lock`; the publish thread publishes each
step's results in input order with the input stamps (back-pressure to inference, never dropped), so the next
frame's inference overlaps the previous frame's unprojection, voxel map and message serialisation. `~/reset`
and live `kv_cache.sliding_window` take the session lock, so they are safe while a frame is being inferred;
results of steps from before a reset are not published.

Run: `ros2 run lingbot_map_ros lingbot_map_node --ros-args -p model.preset:=tiny` or
`python -m lingbot_map_ros.ros.node --ros-args ...`.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from std_msgs.msg import Header

from ..engine.contracts import SessionStats
from ..engine.session_store import SessionError
from .depth_input import DepthInput
from .diagnostics import CauseLog, RuntimeStats, SimClockWatch, diagnostic_array, intrinsics_report
from .entities import KeptEntities, NodeFacade
from .intake import FrameIntake, InputFrame
from .outputs import MappingOutputs, OutputConfig
from .params import NodeParams, apply_update, check_update, declare_parameters, read_parameters
from .pipeline import ConfigureError, Pipeline, build_pipeline
from .services import MappingServices
from .session_files import SessionFiles
from .shutdown import run_node
from .tf_listener import TfLookup
from .timers import NodeTimers
from .worker import InferenceWorker, WorkerStopped

NODE_NAME = "lingbot_map"
#: On shutdown (SIGINT), how long to wait for an inference step in progress before exiting without it.
SHUTDOWN_STEP_WAIT_S = 1.0
#: Steps whose results may wait for the publish thread before inference waits (back-pressure).
PUBLISH_QUEUE_STEPS = 2
#: On deactivate/shutdown, how long the publish thread may take to publish what was already inferred.
PUBLISH_DRAIN_S = 1.0


@dataclass(frozen=True)
class StepResults:
    """The results of one session step (S0 anchor frames or one frame), on their way to the publish thread.

    Attributes:
        generation: reset counter when the step ran; results from before a reset are not published.
        results: `FrameResult`s in input order.
    """

    generation: int
    results: list


class LingBotMapNode(LifecycleNode):
    """Lifecycle node `lingbot_map` (see module doc and docs/node.md for the interface).

    Raises:
        ValueError: at construction, when a parameter given on the command line is invalid.
    """

    def __init__(self, node_name: str = NODE_NAME, **kwargs: object) -> None:
        super().__init__(node_name, **kwargs)
        declare_parameters(self)
        self.params: NodeParams = read_parameters(self)
        self.add_on_set_parameters_callback(self._check_parameters)
        self.add_post_set_parameters_callback(self._apply_parameters)
        self.stats = RuntimeStats()
        self._causes = CauseLog(self.stats, self.get_logger())  # rejections and failures by cause
        self._pipeline: Pipeline | None = None
        self._session_lock = threading.Lock()
        # Stream generations: `_generation` is bumped by ~/reset first, so frames arriving during a reset
        # already belong to the new stream; the session (under the session lock) and the outputs (under the
        # publish lock) catch up with it lazily, whichever thread gets there first (`_sync_*`).
        self._generation = 0
        self._camera_id: str | None = None  # header frame_id of the stream's frames (a change = new camera)
        self._session_generation = 0
        self._outputs_generation = 0
        self._session_stats: SessionStats | None = None  # snapshot for the diagnostics timer
        self._last_result: dict[str, int] = {}  # index / phase / epoch of the last published frame
        self._worker: InferenceWorker[InputFrame] | None = None
        self._publisher: InferenceWorker[StepResults] | None = None  # publish stage, in step order
        self._publish_lock = threading.Lock()  # one step's results at a time; reset clears under it
        self._outputs: MappingOutputs | None = None
        self._active = False  # the gate of every kept entity's callback (lifecycle state active)
        self._kept = KeptEntities(self)
        self._facade = NodeFacade(self, self._kept)  # what MappingOutputs and the intake create through
        self._intake = FrameIntake(
            self._causes,
            lambda: self.params,
            self._enqueue,
            active=lambda: self._active,
            on_inactive=self.stats.record_ignored_inactive,
        )
        self._sessions = SessionFiles()
        self._load_on_activate = False  # session.load_path is loaded at the first activate after configure
        self._triggers = MappingServices(
            self.get_logger(), lambda: self.params, lambda: self._outputs, self.reset_stream,
            self.save_session, self.load_session, self._causes.callback_failed,
        )
        self._intrinsics: dict[str, float] = {}  # predicted vs input focal lengths, for /diagnostics
        self._clock_watch = SimClockWatch(self.get_logger())
        self._input_group = MutuallyExclusiveCallbackGroup()  # frames arrive in order, one at a time
        self._service_group = MutuallyExclusiveCallbackGroup()
        self._timer_group = MutuallyExclusiveCallbackGroup()
        # Created once, kept for the node's life (entities.py): services, /diagnostics, timers (timers.py).
        self._triggers.create(self, self._service_group)
        self._diag_pub = self._kept.publisher(DiagnosticArray, "/diagnostics", 10)
        self._periodic = NodeTimers(
            self, self._timer_group, self.params, lambda: self._outputs if self._active else None,
            self.publish_diagnostics, self.context.ok, self._causes.callback_failed,
        )
        # TF lookups (robot modes) and the metric depth topic: subscriptions kept for the node's life too.
        self._tf_lookup = TfLookup(self._facade)
        self._depth_input: DepthInput | None = None

    # ----------------------------------------------------------------------------------------- lifecycle
    def build_pipeline(self) -> Pipeline:
        """The model and session of the configure step (ros/pipeline.py); test/fault_node.py extends it."""
        return build_pipeline(self.params, self.get_logger().warning)

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._pipeline = self.build_pipeline()
        except ConfigureError as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        except Exception as exc:  # noqa: BLE001 - any model/engine error is one clear configure failure
            self.get_logger().error(f"configure failed: {type(exc).__name__}: {exc}")
            return TransitionCallbackReturn.FAILURE
        self._refresh_session_stats()
        self._periodic.set_rates(self.params)
        self._intake.guard.forget()
        self._load_on_activate = bool(self.params.session_load_path.strip())
        self.get_logger().info(f"configured: {self._pipeline.description}")
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
            self._depth_input = DepthInput(self._facade)  # kept, like every subscription
        config = OutputConfig.from_params(p)
        self._outputs = MappingOutputs(
            self._facade, config, self._tf_lookup, self._depth_input, self._causes.rejected
        )
        self._worker = InferenceWorker(self._process, p.queue_size, self._on_inference_error)
        self._publisher = InferenceWorker(
            self._publish, PUBLISH_QUEUE_STEPS, self._on_publish_error, name="lingbot_map_publish"
        )
        subscriptions = self._intake.subscribe(self._facade, p, self._input_group)
        self._active = True
        topic = subscriptions[0].topic_name
        self.get_logger().info(f"active: listening on {topic} ({p.image_transport}, {p.qos_reliability})")
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
        """Release everything; a step still running after `SHUTDOWN_STEP_WAIT_S` is left to the exit."""
        if not self._release_active(SHUTDOWN_STEP_WAIT_S):
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
        """Close the gate and stop the threads activate started (the entities are kept: entities.py); False
        when the inference thread did not end within `step_wait_s`. Frames converted meanwhile are counted
        (`frames_ignored_inactive`), never raised."""
        self._active = False
        stopped = True
        if self._worker is not None:
            stopped = self._worker.stop(step_wait_s)
            self._worker = None
        if self._publisher is not None:
            self._publisher.wait_idle(PUBLISH_DRAIN_S)  # publish what was inferred
            stopped = self._publisher.stop(PUBLISH_DRAIN_S) and stopped
            self._publisher = None
        with self._publish_lock:  # not while a (late) publish or a reset uses the outputs
            outputs, self._outputs = self._outputs, None
        if outputs is not None:
            outputs.destroy()  # through the facade: its publishers are kept
        return stopped

    def _release_configured(self) -> None:
        with self._session_lock:
            if self._pipeline is not None:
                self._pipeline.release()
                self._pipeline = None
            self._session_stats = None
            self._camera_id = None

    # ---------------------------------------------------------------------------------------- frames in
    def _enqueue(self, header: Header, rgb: np.ndarray, received: float) -> None:
        """An accepted frame (intake.py) joins the inference queue (drop-oldest) in the current generation."""
        worker = self._worker
        if worker is None or not self._active:
            self.stats.record_ignored_inactive()
            return
        try:
            worker.submit(InputFrame(header, rgb, received, self._generation))
        except WorkerStopped:  # deactivate stopped the worker while this frame was being converted
            self.stats.record_ignored_inactive()

    def _process(self, frame: InputFrame) -> None:
        """Inference thread: push one frame, publish whatever results the session returns, in order."""
        with self._session_lock:
            if frame.generation != self._generation or self._pipeline is None or self._outputs is None:
                return  # a reset came after this frame arrived
            self._sync_session(frame.generation)
            epoch = self._session_epoch()
            self._follow_camera(frame.header.frame_id)
            results = self._pipeline.session.push(frame.rgb, meta=frame)
            if not self.context.ok():
                return  # shutting down (SIGINT during the step): nothing can be published any more
            self._refresh_session_stats(results[-1] if results else None)
            stats = self._session_stats
            if epoch is not None and stats.epoch != epoch:  # the engine restarted the stream by itself
                self.get_logger().warning(
                    f"mapping restarted (epoch {stats.epoch}): {stats.last_reset_reason}; the map and "
                    f"path are cleared once the next {self.params.kv_cache_scale_frames} frames have formed "
                    "a new anchor phase"
                )
        publisher = self._publisher
        if results and publisher is not None:
            publisher.submit(StepResults(frame.generation, results), block=True)  # back-pressure, no drop

    def _follow_camera(self, frame_id: str) -> None:
        """Frames from another camera (header frame_id) start a new stream, as a new resolution does: one map
        never mixes two cameras (call with `_session_lock` held)."""
        previous, self._camera_id = self._camera_id, frame_id
        if previous is not None and frame_id != previous:
            self._pipeline.session.reset(f"camera changed from '{previous}' to '{frame_id}'")

    def _publish(self, step: StepResults) -> None:
        """Publish thread: every output of one step, in order, unless a reset came in between."""
        with self._publish_lock:
            if step.generation != self._generation or self._outputs is None:
                return  # inferred before a reset: the old stream's outputs are gone
            self._sync_outputs(step.generation)
            for result in step.results:
                if self._outputs.publish(result, result.meta.header):  # False: dropped (tf_unavailable)
                    self.stats.record_output(time.monotonic() - result.meta.received)
            camera_info = self._intake.camera_info
            if camera_info is not None:
                last = step.results[-1]
                self._intrinsics = intrinsics_report(camera_info, last.intrinsics, last.image_hw)

    def _sync_session(self, generation: int) -> None:
        """Reset the session once for a new stream generation (call with `_session_lock` held)."""
        if self._session_generation != generation:
            self._pipeline.session.reset()
            self._session_generation = generation
            self._last_result = {}
            self._refresh_session_stats()

    def _sync_outputs(self, generation: int) -> None:
        """Clear path, trajectory and map once for a new stream generation (with `_publish_lock` held)."""
        if self._outputs_generation != generation:
            self._outputs.clear()
            self._outputs.publish_cleared(self.get_clock().now().to_msg())
            self._outputs_generation = generation

    def _on_publish_error(self, step: StepResults, exc: Exception) -> None:
        if self.context.ok():  # else shutting down: the publishers are gone
            self._causes.publish_failed(exc)

    def _on_inference_error(self, frame: InputFrame, exc: Exception) -> None:
        if not self.context.ok():
            return  # shutting down: the publishers are gone, the frame is not a failure
        with self._session_lock:
            epoch = self._session_epoch()
            if self._pipeline is not None:
                self._refresh_session_stats()
            restarted = self._session_epoch() != epoch
        self._causes.inference_failed(exc, restarted)

    # --------------------------------------------------------------------------------- reset, timers
    def reset_stream(self) -> int | None:
        """Start a new stream (`~/reset`): bump the generation first (frames arriving from now on belong to
        the new stream), drop the queued frames, then reset the session after a step in progress and clear
        path, trajectory and map after a step being published. Returns the number of queued frames
        discarded, None when the node is not active."""
        worker = self._worker
        if self._pipeline is None or self._outputs is None or worker is None:
            return None
        self._generation += 1  # frames from now on start the new stream; older ones are dropped
        generation = self._generation
        discarded = worker.clear()
        with self._session_lock:  # waits for a step in progress
            if self._pipeline is not None:
                self._sync_session(generation)
        with self._publish_lock:  # waits for a step being published
            if self._outputs is not None:
                self._sync_outputs(generation)
        self.stats.record_reset()
        return discarded

    def save_session(self) -> str:
        """`~/save_session`: copies of the session and the map under both locks (after what was inferred is
        published), written outside them. Raises `SessionError` (not active, anchor phase, ...) or OSError."""
        publisher = self._publisher
        if publisher is not None:
            publisher.wait_idle(PUBLISH_DRAIN_S)
        with self._session_lock, self._publish_lock:
            if self._pipeline is None or self._outputs is None:
                raise SessionError("not active")
            snapshot = self._sessions.capture(self.params, self._pipeline.session, self._outputs)
        return self._sessions.write(self.params, snapshot)

    def load_session(self) -> str:
        """`~/load_session` (and `session.load_path` at activate): read and validate the session first (the
        current map is kept on any error), then start a new stream generation in its map frame."""
        name, snapshot = self._sessions.read(self.params)
        worker = self._worker
        if self._pipeline is None or self._outputs is None or worker is None:
            raise SessionError("not active")
        self._generation += 1  # queued and in-flight frames of the old stream are dropped
        generation = self._generation
        worker.clear()
        with self._session_lock, self._publish_lock:
            if self._pipeline is None or self._outputs is None:
                raise SessionError("not active")
            self._session_generation = self._outputs_generation = generation
            self._camera_id = None
            self._outputs.restore(self._pipeline.session, snapshot)
            self._last_result = {}
            self._refresh_session_stats()
        poses = len(snapshot.trajectory_stamps_ns)
        return (f"loaded session {name}: {len(snapshot.map_xyz)} points, {poses} poses, TF mode "
                f"{self._outputs.mapper.mode}; new frames continue its map frame")

    def publish_diagnostics(self) -> None:
        """Publish /diagnostics now (timer, and right after a live parameter change)."""
        pub = self._diag_pub
        if pub is None or not self.context.ok():
            return
        now = self.get_clock().now()
        use_sim_time = bool(self.get_parameter("use_sim_time").value)
        runtime = self.stats.snapshot()
        runtime["clock"] = self._clock_watch.check(use_sim_time, now.nanoseconds)
        runtime.update(self._intrinsics)
        outputs, pipeline = self._outputs, self._pipeline  # deactivate/cleanup may clear them meanwhile
        if outputs is not None:
            runtime["map_points"] = outputs.map_size()
            runtime.update(outputs.trajectory_stats())
        worker = self._worker
        conflict = self._intake.guard.conflict()
        msg = diagnostic_array(
            self.get_fully_qualified_name(),  # with the namespace: two robots' statuses never collide
            str(pipeline.device) if pipeline else "none",
            now.to_msg(),
            runtime,
            worker.stats() if worker is not None else None,
            self._session_diagnostics(),
            "active" if self._active else ("inactive" if pipeline else "unconfigured"),
            errors=[conflict] if conflict else [],
        )
        pub.publish(msg)

    def _refresh_session_stats(self, last: object | None = None) -> None:
        """Snapshot the session statistics (call with `_session_lock` held) for the diagnostics timer."""
        self._session_stats = self._pipeline.session.stats() if self._pipeline is not None else None
        if last is not None:
            self._last_result = {"index": last.index, "phase": last.phase, "epoch": last.epoch}

    def _session_epoch(self) -> int | None:
        return None if self._session_stats is None else self._session_stats.epoch

    def _session_diagnostics(self) -> dict[str, object]:
        """The `session.` values of /diagnostics: the statistics and the last published frame."""
        stats = {} if self._session_stats is None else self._session_stats.as_dict()
        return {**stats, "last_frame": dict(self._last_result)}

    # ------------------------------------------------------------------------------------- parameters
    def _check_parameters(self, params: list[Parameter]) -> SetParametersResult:
        """Validate; a new `kv_cache.sliding_window` is applied to the cache here, so a refusal rejects it.
        Never raises: an unexpected error rejects the update with the reason."""
        try:
            return self._check_parameters_unguarded(params)
        except Exception as exc:  # noqa: BLE001 - a raising parameter callback would end the executor's spin
            self._causes.callback_failed("set_parameters", exc)
            return SetParametersResult(successful=False, reason=f"{type(exc).__name__}: {exc}")

    def _check_parameters_unguarded(self, params: list[Parameter]) -> SetParametersResult:
        result = check_update(params, self.params, configured=self._pipeline is not None)
        window = {p.name: p.value for p in params}.get("kv_cache.sliding_window")
        if not result.successful or window is None or self._pipeline is None:
            return result
        try:
            with self._session_lock:
                if self._pipeline is not None:  # cleanup may have released it meanwhile
                    self._pipeline.session.set_sliding_window(window)
                    self._refresh_session_stats()
        except (ValueError, RuntimeError) as exc:
            return SetParametersResult(successful=False, reason=f"kv_cache.sliding_window refused: {exc}")
        self.get_logger().info(f"kv_cache.sliding_window -> {window}")
        return result

    def _apply_parameters(self, params: list[Parameter]) -> None:
        """After a successful set: update the snapshot and the outputs, report the change at once."""
        try:
            self.params = apply_update(self.params, params)
            outputs = self._outputs
            if outputs is not None:
                outputs.update_config(OutputConfig.from_params(self.params))
            self.publish_diagnostics()
        except Exception as exc:  # noqa: BLE001 - a raising parameter callback would end the executor's spin
            self._causes.callback_failed("apply_parameters", exc)


def main(args: list[str] | None = None, exit_process: bool = True) -> int:
    """Entry point of `lingbot_map_node`; exit code 0 on SIGINT/SIGTERM (a second one during the shutdown
    exits at once, also 0), 1 when autostart fails or the executor stops by itself, 2 on bad params.
    `shutdown.run_node` has the signal handling; `exit_process=False` returns the code in-process."""
    return run_node(LingBotMapNode, SHUTDOWN_STEP_WAIT_S, args, exit_process)


if __name__ == "__main__":
    sys.exit(main())
