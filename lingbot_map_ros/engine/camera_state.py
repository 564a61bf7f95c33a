"""`CameraState`: one camera's engine: its tracker (pose side), its map side, its loop closer and the one
correction rule. The node (one per camera, ros/outputs/mapping.py), `run`, `batch` and `evaluate` (tools/) all
map and close loops through it (docs/architecture.md "image -> odometry", "loop -> corrected map -> odom").

Per frame: `track` (the `CameraTracker`: TF mode, robot TF, `Mapper.locate`), the map work through
`map_side` (inline in tools/, on the node's map thread), then `posed`: a new epoch clears the loop closer and
a keyframe result goes to it. The closer runs inline (tools/: deterministic, a correction before the next
frame) or on its own thread (`LoopClosureWorker`, the node: never on the pose path). A verified loop, or a
forced pass (`optimize`), is applied by `apply_correction` (engine/correction.py): the mapper's T_map_stream
for the following frames, the trajectory moved (`Mapper.correct`), the `map -> odom` estimate jumped, the map
rebuilt from the keyframes; its `CorrectionOutputs` (the node's publishers; none in tools/) hold the
trajectory while it moves and publish what changed.

Tracking health (docs/robot.md "Tracking state"; with `health` given): `track` judges every frame
(`TrackingHealth.assess`, cheap, on the pose path): while degraded or lost the frame's pose and twist
covariances are multiplied by the report's `inflation` at once, and a frame whose report does not `map` is
not integrated into the map (its `MapWork.mapping_enabled` is off) nor given to the loop closer. With loop
closure, `posed` hands the verdict to the closer's side (`LostAndFound.follow`, engine/loop/relocalise.py,
on the closer's thread or inline): a lost frame is searched against the keyframe map, and a relocalisation
is applied by `apply_correction` like a loop (`map -> odom` / `map -> camera` jump).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np

from .correction import CorrectionOutputs, Corrections, LoopCorrection, NoOutputs, plan_correction
from .geometry import Sim3
from .health import HealthConfig, HealthReport, TrackingHealth, Verdict
from .lock_order import OrderedLock
from .loop import LoopCloser, LoopClosureConfig, LoopClosureWorker, LoopEvent, ModelDescriptor, PairVerifier
from .loop.descriptor import Describe
from .loop.relocalise import LostAndFound, RelocaliseConfig, Relocaliser
from .loop.similarity import compose, from_pose, inverse
from .loop.verify import GapRun
from .mapping.map_side import MapSide
from .mapping.mapper import MapperConfig
from .result import FrameResult
from .robot_tf import NoRobotTf, RobotTfConfig, RobotTfSource
from .tracker import CameraTracker, DepthSource, Notice, TrackedFrame


class CameraState:
    """One camera's engine (module doc). The tracker's arguments are `CameraTracker`'s (engine/tracker.py);
    `health`: judge each frame's tracking (None: off), `mapping` false: localization mode (a loaded map is
    never extended; a relocalisation only moves the correction)."""

    def __init__(
        self,
        mapper_config: MapperConfig,
        tf_config: RobotTfConfig | None = None,
        tf: RobotTfSource | None = None,
        tf_graph: Callable[[], dict[str, str]] | None = None,
        depth: DepthSource | None = None,
        robot_map: Callable[[], np.ndarray | None] | None = None,
        on_notice: Notice | None = None,
        health: HealthConfig | None = None,
        mapping: bool = True,
    ) -> None:
        self.tracker = CameraTracker(
            mapper_config,
            tf_config or RobotTfConfig(mode="map_to_camera"),
            tf or NoRobotTf(),
            tf_graph,
            depth,
            robot_map,
            on_notice,
        )
        self.mapper = self.tracker.mapper
        self._streams = itertools.count(1)
        self._stream = 0  # the stream token (`stream`)
        self.map_side = MapSide(self.mapper, self.is_current)  # the map's one owner (mapping/map_side.py)
        self.outputs: CorrectionOutputs = NoOutputs()
        self.health = TrackingHealth(health, mapping) if health is not None else None
        self.lost_and_found: LostAndFound | None = None  # health and relocalisation, with loop closure
        self.closer: LoopCloser | None = None
        self._worker: LoopClosureWorker | None = None
        self._applied = Corrections()
        self._apply_lock = OrderedLock("loop.apply_lock")
        self.corrections: list[tuple[float, float, float]] = []  # the size of each correction applied

    # ------------------------------------------------------------------------------------------ stream
    @property
    def stream(self) -> int:
        """The camera's one stream token: a frame takes it when it arrives (the node's `InputFrame.stream`),
        a round and its `MapWork`s carry it; whatever carries another is stale: not stepped (the node's
        `CameraStream.prepare`), not delivered (`PoseSink.pose_round`), not integrated (`MapSide.integrate`).
        Only `next_stream` moves it, not the engine's own restarts (`FrameResult.epoch`: a failed scale, a
        new resolution), so the frames queued meanwhile still count."""
        return self._stream

    def next_stream(self) -> int:
        """Start another stream (the node's `~/reset`, `~/load_session`): from now on everything carrying an
        older token is stale. The caller then resets the session and clears this state (`tracker.clear`,
        `clear_loop`). Returns the new token. Stream changes are serialised by the caller (the node's
        `node.stream_change` lock); `stream` and `is_current` are read on any thread."""
        self._stream = next(self._streams)
        return self._stream

    def is_current(self, stream: int) -> bool:
        """Whether `stream` is the current stream token (not stale)."""
        return stream == self._stream

    # ------------------------------------------------------------------------------------------ frames
    def track(
        self, result: FrameResult, camera: str, stamp_s: float, stream: int | None = None
    ) -> TrackedFrame:
        """`CameraTracker.track`: the pose side of one frame stepped in `stream` (None: the current one),
        judged by the tracking health when on (module doc: covariances inflated, the map work off for a frame
        that does not map). Raises `TransformUnavailable`."""
        token = self._stream if stream is None else stream
        tracked = self.tracker.track(result, camera, stamp_s, token)
        if self.health is None:
            return tracked
        if tracked.frame.new_epoch:
            with self.health.lock:
                self.health.reset()
        verdict = self.health.assess(result)
        report = verdict.report
        if report.inflation != 1.0:
            frame = tracked.frame
            frame.pose_covariance = frame.pose_covariance * report.inflation
            frame.twist_covariance = frame.twist_covariance * report.inflation
        work = tracked.work if report.maps else replace(tracked.work, mapping_enabled=False)
        return replace(tracked, work=work, health=verdict)

    def tracking_report(self) -> HealthReport | None:
        """The camera's tracking state now (None with health off): `~/tracking_state`."""
        if self.health is None:
            return None
        with self.health.lock:
            return self.health.report()

    def hint(self, body_in_map: np.ndarray, radius_m: float, place_after: int) -> bool:
        """A pose hint (`/initialpose`): the odometry body's pose [4, 4] T_map_body in metres (the camera in
        `map_to_camera`) narrows the relocalisation search to `radius_m` around it, and after `place_after`
        searched frames without a verified match places the camera there (`Relocaliser.hint`; on the
        closer's thread after what is queued). False without relocalisation (health or loop closure off) or
        before the stream's first frame (no frame chain to take the pose into the keyframe map)."""
        lost_and_found, chain, last = self.lost_and_found, self.mapper.chain, self.mapper.last_poses
        if lost_and_found is None or chain is None or last is None:
            return False
        body, camera = last
        map_camera = np.asarray(body_in_map, np.float64) @ np.linalg.inv(body) @ camera
        g = chain.sim3()
        hinted = compose(inverse(g), from_pose(map_camera))  # the keyframe map's units (model world)
        radius = radius_m / g.scale
        relocaliser = lost_and_found.relocaliser
        if self._worker is not None:
            self._worker.call(lambda: relocaliser.hint(hinted, radius, place_after))
        else:
            relocaliser.hint(hinted, radius, place_after)
        return True

    def set_mapping(self, mapping: bool) -> None:
        """Mapping (true) or localization mode (`mapping.enabled`): the map and, with health, the keyframe
        map are extended or not."""
        self.mapper.mapping_enabled = mapping
        if self.health is not None:
            self.health.mapping = mapping

    def session_loaded(self) -> None:
        """A saved session (map, keyframe map) was loaded: the stream's place in it is unknown until a
        verified match. In localization mode (health on, `mapping` false) the camera starts `lost` (reported,
        covariance inflated, nothing mapped) and searches the loaded keyframes; in mapping mode it starts
        `tracking` from the loaded anchors (docs/session.md "Localization mode")."""
        if self.health is None:
            return
        with self.health.lock:
            self.health.reset(lost=not self.health.mapping)
        if self.lost_and_found is not None:
            relocaliser = self.lost_and_found.relocaliser
            if self._worker is not None:
                self._worker.call(relocaliser.reset)
            else:
                relocaliser.reset()

    def posed(
        self, result: FrameResult, tracked: TrackedFrame, stamp_s: float, odometry: np.ndarray | None = None
    ) -> LoopCorrection | None:
        """After a frame was posed (and published): a new epoch clears the closer, a keyframe goes to it with
        the robot's odometry pose [4, 4] (T_odom_base, metres): `odometry`, else in `map_to_odom` the frame's
        own T_map_odom⁻¹ · T_map_base (= the odometry sample it was posed with), so that a loop contradicting
        the odometry is refused (engine/loop/gate.py). Inline, the correction its loop caused (already
        applied); on the closer's thread, None."""
        if self.closer is None:
            return None
        if tracked.frame.new_epoch:
            self.clear_loop()
        verdict = tracked.health
        if self.lost_and_found is not None and verdict is not None:
            if not (result.is_keyframe or verdict.search or verdict.lost_started or verdict.new_segment):
                return None
        elif not result.is_keyframe:
            return None
        frame = tracked.frame
        if odometry is None and frame.map_odom is not None:
            odometry = np.linalg.inv(frame.map_odom) @ frame.body_pose
        if self.lost_and_found is not None and verdict is not None:
            return self._follow(result, stamp_s, verdict, odometry)
        if self._worker is not None:
            self._worker.submit(result, stamp_s, odometry)  # a queue put: never blocks
            return None
        event = self.closer.add(result, stamp_s, odometry)
        return self.apply_correction() if event is not None else None

    # ------------------------------------------------------------------------------------------ loop closure
    def attach_loop(
        self, closer: LoopCloser, threaded: bool, relocalise: RelocaliseConfig | None = None
    ) -> None:
        """Close this camera's loops with `closer`: on its own thread (`threaded`, the node) or inline; with
        health on, a lost camera relocalises against its keyframe map (`relocalise`: None, the defaults)."""
        self.closer = closer
        self._worker = LoopClosureWorker(closer, self._on_event) if threaded else None
        if self.health is not None:
            self.lost_and_found = LostAndFound(self.health, Relocaliser(closer, relocalise))

    def apply_correction(self) -> LoopCorrection | None:
        """THE correction rule (module doc; engine/correction.py): the closer's keyframe poses now applied to
        the mapper, the trajectory, the `map -> odom` estimate and the map; None when there is nothing to
        correct (no keyframe, or no frame chain yet). One at a time (the closer's thread, `~/optimize`)."""
        with self._apply_lock:
            chain = self.mapper.chain
            if self.closer is None or chain is None:
                return None
            with self.held_closer():
                plan = plan_correction(self.closer, chain, self._applied)
            if plan is None:
                return None
            jump = self.move_trajectory(plan.correction, plan.move)
            self._applied = plan.corrections
            self.corrections.append(plan.size)
            applied = replace(plan, jump=jump, map_rebuilt=self._rebuild_map(plan))
            self.outputs.corrected(applied)
            return applied

    def move_trajectory(
        self, correction: Sim3, move: Callable[[np.ndarray, np.ndarray], np.ndarray]
    ) -> np.ndarray | None:
        """The pose side of a correction: `correction` (T_map_stream) for every following stream pose, the
        trajectory's camera poses moved by `move(stamps, poses)` (`Mapper.correct`), then the `map -> odom`
        estimate by the last body's jump, at once. Returns that jump [4, 4] (None before a frame)."""
        with self.outputs.moving_trajectory(), self.tracker.lock:
            jump = self.mapper.correct(correction, move)
            self.outputs.trajectory_moved()
            if jump is not None:
                self.tracker.jump(lambda map_odom: jump @ map_odom)
        return jump

    def optimize(self, timeout_s: float) -> LoopCorrection | None:
        """A forced pose-graph pass after the keyframes queued so far (at most `timeout_s` s on the closer's
        thread), then its correction applied; None without a closer or a keyframe."""
        if self._worker is not None:
            self._worker.request_optimize()
            self._worker.join_idle(timeout_s)
        elif self.closer is not None:
            self.closer.optimize()
        return self.apply_correction()

    def reject_last_loop(self, timeout_s: float) -> bool:
        """Undo the closer's last accepted loop (`LoopCloser.reject_last_loop`, after what is queued) and
        apply the restored correction by the same rule; False without a closer or a loop to undo."""
        if self.closer is None:
            return False
        if self._worker is not None:
            undone = self._worker.reject_last_loop(timeout_s)
        else:
            undone = self.closer.reject_last_loop()
        self.apply_correction()
        return undone

    def join_loop(self, timeout_s: float) -> None:
        """Wait (at most `timeout_s` s) until the closer's thread handled what was queued (and applied its
        corrections); at once inline."""
        if self._worker is not None:
            self._worker.join_idle(timeout_s)

    def clear_loop(self) -> None:
        """A new stream: forget keyframes, graph and corrections (on the thread: queued behind its work)."""
        self._applied = Corrections()
        if self._worker is not None:
            self._worker.clear()
        elif self.closer is not None:
            self.closer.clear()

    @contextmanager
    def held_closer(self) -> Iterator[LoopCloser | None]:
        """The closer under its lock (None without loop closure): sessions save and restore its keyframe map
        and graph with the map (engine/persistence/save_load.py). Taken after the pose and map locks."""
        if self._worker is None:
            yield self.closer
            return
        with self._worker.lock:
            yield self.closer

    def loop_stats(self) -> dict[str, float]:
        """The closer's counters (`LoopStats`), corrections applied, keyframe results dropped from the
        thread's queue and its `backlog` (items waiting or in progress); {} without loop closure."""
        if self.closer is None:
            return {}
        values = dict(self.closer.stats.as_dict())
        values["corrections"] = len(self.corrections)
        values["dropped"] = self._worker.dropped if self._worker is not None else 0
        values["backlog"] = self._worker.backlog if self._worker is not None else 0
        return values

    def loop_summary(self) -> dict[str, object]:
        """What a tool's summary.json reports of loop closure: loops accepted and rejected, keyframes, the
        size of each correction."""
        closer = self.closer
        if closer is None:
            return {"enabled": False}
        stats = closer.stats
        return {
            "enabled": True,
            "loops_accepted": len(closer.accepted),
            "loops_rejected": int(stats.rejected + stats.graph_outliers),
            "loop_edges": len(closer.loops),
            "keyframes": int(stats.keyframes),
            "submaps": int(stats.submaps),
            "corrections": [
                {"translation": round(m, 6), "rotation_deg": round(deg, 6), "scale": round(scale, 6)}
                for m, deg, scale in self.corrections
            ],
        }

    def stop(self) -> None:
        """End the closer's thread (the node's cleanup)."""
        if self._worker is not None:
            self._worker.stop()

    # ------------------------------------------------------------------------------------------------
    def _on_event(self, event: LoopEvent) -> None:
        self.apply_correction()

    def _follow(
        self, result: FrameResult, stamp_s: float, verdict: Verdict, odometry: np.ndarray | None
    ) -> LoopCorrection | None:
        """The closer's side of a judged frame (`LostAndFound.follow`): on the closer's thread (None), or
        inline (the correction a loop or a relocalisation caused, applied)."""
        lost_and_found = self.lost_and_found
        if lost_and_found is None:
            return None

        def follow() -> bool:
            found = lost_and_found.follow(result, stamp_s, verdict, result.is_keyframe, odometry)
            return found is not None or lost_and_found.event is not None

        if self._worker is not None:
            self._worker.call(follow, lambda changed: self._apply_if(bool(changed)))
            return None
        return self._apply_if(follow())

    def _apply_if(self, changed: bool) -> LoopCorrection | None:
        return self.apply_correction() if changed else None

    def _rebuild_map(self, plan: LoopCorrection) -> bool:
        """Map cloud and grid from the keyframes at their optimised poses (after the queued map works)."""
        if not self.mapper.mapping_enabled or not self.mapper.scale.converged:
            return False
        self.outputs.settle_map()
        self.map_side.rebuild(plan.map_clouds())
        return True


def loop_closer(
    config: LoopClosureConfig,
    image_width: int,
    model: object,
    describe: Describe | None = None,
    run: GapRun | None = None,
    charge: Callable[[float], None] | None = None,
) -> LoopCloser:
    """A camera's loop closer: descriptors pooled by the live step (`FrameResult.place_descriptor`), else
    from the model's encoder tokens unless `describe` is given (a test's oracle); verification by the model's
    two-frame pass, launched through `run` (the node's `GpuGaps.call`: on the inference thread between live
    steps, engine/gpu_gaps.py; default: on the closer's thread), its GPU time paid through `charge` (the
    node's `GpuGaps.charge`) (engine/loop/verify.py, docs/loop_closure.md)."""
    verify = PairVerifier(model, config.verify, run=run, charge=charge)
    return LoopCloser(config, image_width, describe or ModelDescriptor(model), verify)
