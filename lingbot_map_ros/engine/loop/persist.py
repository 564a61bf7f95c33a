"""The loop closure's keyframe map and pose graph in a session folder (``loop.npz`` and
``state["loop_closure"]``; engine/persistence/store.py owns the folder, docs/session.md the format).

`export_loop` flattens a `LoopCloser` into the arrays of `npz_input.SCHEMA["loop.npz"]` and a small JSON
state; `check_loop` validates what a session holds as untrusted input and builds the keyframes and edges
without touching any closer (so a load stays a transaction); `LoopCloser.restore` then swaps them in. The
descriptors are saved, so a loaded map relocalises by place recognition, and the verification images, so a
loop into it can be verified.

Poses are [13] float64: rotation row-major [9], translation [3], scale (exact round trip, checked on load).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..geometry import Sim3
from ..npz_input import SessionError
from .gtsam_import import gtsam
from .keyframes import Keyframe
from .pose_graph import Edge, EdgeSigma
from .similarity import between, to_gtsam

#: Physical bounds of a saved pose (issue 30: a re-hashed loop.npz with poses of scale 1e200 loaded and moved
#: the map by 1e200 m): |translation| (map units) and the scale's factor either way.
MAX_TRANSLATION = 1e6
MAX_SCALE = 1e6
#: A saved edge's whitened residual at the saved poses above this: the graph contradicts its own keyframes
#: (an optimised graph leaves stream edges within a few sigmas and loop edges under ~10, the outlier cut).
MAX_EDGE_RESIDUAL = 100.0
#: Largest saved edge sigma (a new epoch's loose edge is 100).
MAX_SIGMA = 1e3
#: Key of the closer's JSON state in a session's ``state``.
STATE_KEY = "loop_closure"
_STATS = ("candidates", "verified", "rejected", "graph_outliers", "optimizations")


@dataclass(frozen=True)
class LoopRestore:
    """A validated saved keyframe map and graph: keyframes (insertion order), edges, the graph's fixed node,
    `correction` (T_map_stream when saved), the newest loop's key, submap count and counters."""

    keyframes: list[Keyframe]
    edges: list[Edge]
    fixed: int | None
    correction: Sim3
    last_loop_key: int | None
    submaps: int
    counters: dict[str, int]


def pose_row(pose: Sim3) -> np.ndarray:
    """[13] float64 of a `Sim3` (module doc)."""
    return np.concatenate([np.ravel(pose.rotation), pose.translation, [pose.scale]]).astype(np.float64)


def pose_from_row(row: np.ndarray, what: str) -> Sim3:
    """The `Sim3` of a [13] row; `SessionError` unless finite, a proper rotation and a positive scale."""
    row = np.asarray(row, np.float64)
    rotation = row[:9].reshape(3, 3)
    if (
        not np.isfinite(row).all()
        or not 1.0 / MAX_SCALE <= row[12] <= MAX_SCALE
        or not np.linalg.norm(row[9:12]) <= MAX_TRANSLATION
        or not np.allclose(rotation @ rotation.T, np.eye(3), atol=1e-6)
        or np.linalg.det(rotation) < 0
    ):
        raise SessionError(
            f"loop.npz: {what} is not a Sim(3) pose within bounds (finite, a rotation, scale in "
            f"[{1 / MAX_SCALE:g}, {MAX_SCALE:g}], |translation| <= {MAX_TRANSLATION:g})"
        )
    return Sim3(rotation.copy(), row[9:12].copy(), float(row[12]))


def export_loop(closer: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:  # noqa: ANN401 - a LoopCloser
    """A closer's keyframe map and graph as (``loop.npz`` arrays, JSON state). Network images of one size."""
    keyframes = list(closer.map.keyframes.values())
    edges = closer.graph.edges
    shapes = {kf.image.shape for kf in keyframes if kf.image is not None}
    image_hw = next(iter(shapes))[:2] if shapes else (0, 0)
    if len(shapes) > 1 or len({kf.depth.shape for kf in keyframes}) > 1:
        raise SessionError("loop closure: keyframes of different image sizes cannot be saved")
    depth_hw = keyframes[0].depth.shape if keyframes else (0, 0)
    blank = np.zeros((*image_hw, 3), np.uint8)
    arrays = {
        "kf_keys": np.array([kf.key for kf in keyframes], np.int64),
        "kf_stamps_s": np.array([kf.stamp_s for kf in keyframes], np.float64),
        "kf_poses": np.array([pose_row(kf.pose) for kf in keyframes], np.float64).reshape(-1, 13),
        "kf_stream_poses": np.array([pose_row(kf.stream_pose) for kf in keyframes]).reshape(-1, 13),
        "kf_point_counts": np.array([len(kf.points) for kf in keyframes], np.int64),
        "kf_points": np.concatenate([kf.points for kf in keyframes] or [np.zeros((0, 3))]),
        "kf_colors": np.concatenate([kf.colors for kf in keyframes] or [np.zeros((0, 3))]),
        "kf_descriptors": np.stack([kf.descriptor for kf in keyframes]) if keyframes else np.zeros((0, 0)),
        "kf_has_image": np.array([kf.image is not None for kf in keyframes], np.uint8),
        "kf_images": np.stack([blank if kf.image is None else kf.image for kf in keyframes] or [blank])[
            : len(keyframes)
        ],
        "kf_depth": np.stack([kf.depth for kf in keyframes]) if keyframes else np.zeros((0, *depth_hw)),
        "kf_conf": np.stack([kf.conf for kf in keyframes]) if keyframes else np.zeros((0, *depth_hw)),
        "kf_merged_counts": np.array([len(kf.merged) for kf in keyframes], np.int64),
        "kf_merged": np.array([k for kf in keyframes for k in kf.merged], np.int64),
        "edge_nodes": np.array([(e.a, e.b) for e in edges], np.int64).reshape(-1, 2),
        "edge_measured": np.array([pose_row(e.measured) for e in edges], np.float64).reshape(-1, 13),
        "edge_sigmas": np.array(
            [(e.sigma.rotation, e.sigma.translation, e.sigma.scale) for e in edges], np.float64
        ).reshape(-1, 3),
        "edge_loop": np.array([e.loop for e in edges], np.uint8),
    }
    state = {
        "fixed": closer.graph.fixed,
        "correction": pose_row(closer.correction).tolist(),
        "last_loop_key": closer.last_loop_key,
        "submaps": int(closer.map.submaps),
        "depth_stride": int(closer.config.depth_stride),
        "counters": {name: int(getattr(closer.stats, name)) for name in _STATS},
    }
    return arrays, state


def check_loop(
    arrays: dict[str, np.ndarray],
    state: Any,  # noqa: ANN401
    depth_stride: int,
    descriptor_dim: int | None = None,
) -> LoopRestore | None:
    """Validate a saved keyframe map and graph (untrusted) and build it; None when the session holds none.
    Checked: shapes, indices in range, poses finite and within physical bounds (`MAX_TRANSLATION`,
    `MAX_SCALE`), every edge consistent with its keyframes' saved poses (`MAX_EDGE_RESIDUAL`), the
    descriptors' dimension.

    Args:
        arrays: ``loop.npz`` (dtypes and ranks checked by npz_input); state: ``state["loop_closure"]``.
        depth_stride: the loading closer's `LoopClosureConfig.depth_stride` (the saved depths' decimation).
        descriptor_dim: the loading closer's descriptor length (`LoopCloser.descriptor_dim`; None: unknown).
    Raises:
        SessionError: naming the first inconsistent array or field.
    """
    keys = arrays["kf_keys"]
    n = len(keys)
    if n == 0:
        if any(a.size for a in arrays.values()):
            raise SessionError("loop.npz: arrays without keyframes")
        return None
    if not isinstance(state, dict):
        raise SessionError(f"session state: {STATE_KEY} is missing beside a keyframe map")
    if len(np.unique(keys)) != n:
        raise SessionError("loop.npz: kf_keys are not unique")
    for name, shape in (
        ("kf_stamps_s", (n,)),
        ("kf_poses", (n, 13)),
        ("kf_stream_poses", (n, 13)),
        ("kf_point_counts", (n,)),
        ("kf_has_image", (n,)),
        ("kf_merged_counts", (n,)),
    ):
        if arrays[name].shape != shape:
            raise SessionError(f"loop.npz: {name} must be {list(shape)}, got {list(arrays[name].shape)}")
    counts, merged_counts = arrays["kf_point_counts"], arrays["kf_merged_counts"]
    points = arrays["kf_points"]
    if (
        (counts < 0).any()
        or points.shape != (int(counts.sum()), 3)
        or arrays["kf_colors"].shape != points.shape
    ):
        raise SessionError("loop.npz: kf_points / kf_colors must be [sum(kf_point_counts), 3]")
    if (merged_counts < 0).any() or arrays["kf_merged"].shape != (int(merged_counts.sum()),):
        raise SessionError("loop.npz: kf_merged must hold sum(kf_merged_counts) keys")
    descriptors, images = arrays["kf_descriptors"], arrays["kf_images"]
    depth, conf = arrays["kf_depth"], arrays["kf_conf"]
    if descriptors.shape[0] != n or descriptors.shape[1] < 1 or images.shape[0] != n or images.shape[3] != 3:
        raise SessionError(
            "loop.npz: kf_descriptors [K, D] and kf_images [K, h, w, 3] must hold every keyframe"
        )
    if descriptor_dim is not None and descriptors.shape[1] != descriptor_dim:
        raise SessionError(
            f"loop.npz: descriptors of {descriptors.shape[1]} values, this model's have {descriptor_dim}"
        )
    if depth.shape[0] != n or conf.shape != depth.shape:
        raise SessionError("loop.npz: kf_depth and kf_conf must both be [K, h, w]")
    if state.get("depth_stride") != depth_stride:
        raise SessionError(
            f"loop closure: depths saved every {state.get('depth_stride')!r} pixels, this closer keeps "
            f"every {depth_stride}"
        )
    norms = np.linalg.norm(descriptors, axis=1)
    if not (np.isfinite(points).all() and np.isfinite(arrays["kf_stamps_s"]).all()) or not np.allclose(
        norms, 1.0, atol=1e-3
    ):
        raise SessionError("loop.npz: non-finite points or stamps, or descriptors not of unit norm")
    keyframes = []
    ends, merged_ends = np.cumsum(counts), np.cumsum(merged_counts)
    for i in range(n):
        merged = tuple(
            int(k) for k in arrays["kf_merged"][merged_ends[i] - merged_counts[i] : merged_ends[i]]
        )
        if merged and merged[0] != keys[i]:
            raise SessionError(f"loop.npz: submap {int(keys[i])} does not list itself first")
        keyframes.append(
            Keyframe(
                key=int(keys[i]),
                stamp_s=float(arrays["kf_stamps_s"][i]),
                stream_pose=pose_from_row(
                    arrays["kf_stream_poses"][i], f"keyframe {int(keys[i])}'s stream pose"
                ),
                pose=pose_from_row(arrays["kf_poses"][i], f"keyframe {int(keys[i])}'s pose"),
                points=points[ends[i] - counts[i] : ends[i]].copy(),
                colors=arrays["kf_colors"][ends[i] - counts[i] : ends[i]].copy(),
                descriptor=descriptors[i].copy(),
                image=images[i].copy() if arrays["kf_has_image"][i] else None,
                depth=depth[i].copy(),
                conf=conf[i].copy(),
                depth_stride=depth_stride,
                merged=merged,
            )
        )
    edges = _edges(arrays, set(int(k) for k in keys))
    poses = {kf.key: kf.pose for kf in keyframes}
    for i, edge in enumerate(edges):
        residual = edge_residual(edge, poses[edge.a], poses[edge.b])
        if not residual <= MAX_EDGE_RESIDUAL:
            raise SessionError(
                f"loop.npz: edge {i} ({edge.a} -> {edge.b}) disagrees with its keyframes' poses (whitened "
                f"residual {residual:.3g} > {MAX_EDGE_RESIDUAL:g})"
            )
    return LoopRestore(keyframes, edges, *_state(state, set(int(k) for k in keys)))


def edge_residual(edge: Edge, a: Sim3, b: Sim3) -> float:
    """|Log(measured⁻¹ ∘ a⁻¹ ∘ b)| whitened by the edge's sigmas (inf when not finite)."""
    error = gtsam.Similarity3.Logmap(to_gtsam(edge.measured).between(to_gtsam(between(a, b))))
    value = float(np.linalg.norm(np.asarray(error) / edge.sigma.vector()))
    return value if math.isfinite(value) else math.inf


def _edges(arrays: dict[str, np.ndarray], keys: set[int]) -> list[Edge]:
    nodes, measured, sigmas = arrays["edge_nodes"], arrays["edge_measured"], arrays["edge_sigmas"]
    m = len(nodes)
    if (
        nodes.shape != (m, 2)
        or measured.shape != (m, 13)
        or sigmas.shape != (m, 3)
        or arrays["edge_loop"].shape != (m,)
    ):
        raise SessionError(
            "loop.npz: edge_nodes [E, 2], edge_measured [E, 13], edge_sigmas [E, 3], edge_loop [E]"
        )
    if not (np.isfinite(sigmas).all() and (sigmas > 0).all() and (sigmas <= MAX_SIGMA).all()):
        raise SessionError(f"loop.npz: edge sigmas must be in (0, {MAX_SIGMA:g}]")
    edges = []
    for i, (a, b) in enumerate(nodes.tolist()):
        if a not in keys or b not in keys or a == b:
            raise SessionError(f"loop.npz: edge {i} ({a} -> {b}) names a missing keyframe or itself")
        sigma = EdgeSigma(*(float(v) for v in sigmas[i]))
        edges.append(Edge(a, b, pose_from_row(measured[i], f"edge {i}"), sigma, bool(arrays["edge_loop"][i])))
    return edges


def _state(state: dict[str, Any], keys: set[int]) -> tuple[int | None, Sim3, int | None, int, dict[str, int]]:
    def key_or_none(name: str) -> int | None:
        value = state.get(name)
        if value is not None and (type(value) is not int or value not in keys):
            raise SessionError(f"session state: {STATE_KEY}.{name} {value!r} is not a saved keyframe")
        return value

    correction = state.get("correction")
    if not (isinstance(correction, list) and len(correction) == 13 and all(_number(v) for v in correction)):
        raise SessionError(f"session state: {STATE_KEY}.correction must be 13 numbers")
    counters = state.get("counters")
    if not isinstance(counters, dict) or set(counters) != set(_STATS):
        raise SessionError(f"session state: {STATE_KEY}.counters must hold {list(_STATS)}")
    submaps = state.get("submaps")
    for value in (*counters.values(), submaps):
        if type(value) is not int or value < 0:
            raise SessionError(f"session state: {STATE_KEY} counters must be integers >= 0")
    fixed = key_or_none("fixed")
    if fixed is None:
        raise SessionError(f"session state: {STATE_KEY}.fixed is missing")
    correction_pose = pose_from_row(np.array(correction, np.float64), "the correction")
    return fixed, correction_pose, key_or_none("last_loop_key"), submaps, dict(counters)


def _number(value: Any) -> bool:  # noqa: ANN401
    return type(value) in (int, float) and math.isfinite(value)
