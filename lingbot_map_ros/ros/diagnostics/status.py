"""The node's /diagnostics message: one status for a node of one unnamed camera (that camera's), or one for
the node (its counters, the cameras, the shared KV pool, the fused map's size) and one per named camera."""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray

from ...engine.face import WorkerStats
from ..cameras.rounds import NodeRounds
from ..cameras.stream import CameraStream
from .stats import diagnostic_array


def node_status(
    name: str,
    hardware: str,
    stamp: object,
    state: str,
    runtime: dict[str, object],
    cameras: dict[str, CameraStream],
    rounds: NodeRounds | None,
    pool: dict[str, object] | None,
    fused_points: int | None,
    tf: dict[str, object],
) -> DiagnosticArray:
    """The node's /diagnostics.

    Args:
        name: the node's fully qualified name (statuses `<name>: mapping`, `<name>/<camera>: mapping`).
        hardware, stamp, state: the device, the message stamp, the lifecycle state.
        runtime: the node's counters and the clock check.
        cameras: the node's cameras ("" alone: one unnamed camera).
        rounds: the inference threads (queue counters per camera), None when not active.
        pool: the shared KV pool's statistics of several cameras (None: no shared pool).
        fused_points: the fused map's size (None: no fused map, or not active).
        tf: the TF listener's statistics.
    """
    if "" in cameras:
        camera = cameras[""]
        worker = rounds.stats("") if rounds is not None else None
        runtime = {**runtime, **camera_runtime(camera), **tf}
        return camera_status(camera, name, hardware, stamp, runtime, worker, state)
    runtime = {**runtime, "cameras": ",".join(cameras), **tf}
    if fused_points is not None:
        runtime["map_points"] = fused_points
    msg = diagnostic_array(name, hardware, stamp, runtime, None, {"pool": pool} if pool else {}, state)
    for camera in cameras.values():
        worker = rounds.stats(camera.name) if rounds is not None else None
        status = camera_status(
            camera, f"{name}/{camera.name}", hardware, stamp, camera_runtime(camera), worker, state
        )
        msg.status += status.status
    return msg


def camera_status(
    camera: CameraStream,
    name: str,
    hardware: str,
    stamp: object,
    runtime: dict[str, object],
    worker: WorkerStats | None,
    state: str,
) -> DiagnosticArray:
    """A camera's /diagnostics status `<name>: mapping` (ERROR: two streams alternate on its topic; WARN: a
    TF gap or a refused TF edge, tf/camera_edge.py)."""
    conflict = camera.intake.guard.conflict()
    outputs = camera.outputs
    return diagnostic_array(
        name,
        hardware,
        stamp,
        runtime,
        worker,
        camera.session_diagnostics(),
        state,
        errors=[conflict] if conflict else [],
        warnings=outputs.tf.warnings() if outputs is not None else [],
    )


def camera_runtime(camera: CameraStream) -> dict[str, object]:
    """A camera's counters, intrinsics check and map/trajectory statistics for /diagnostics."""
    values: dict[str, object] = camera.stats.snapshot()
    values.update(camera.intrinsics)
    outputs = camera.outputs  # cleanup may clear it meanwhile
    if outputs is not None:
        values["map_points"] = outputs.map_size()
        values.update(outputs.trajectory_stats())
    return values
