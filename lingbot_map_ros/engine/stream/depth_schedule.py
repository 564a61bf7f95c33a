"""`DepthSchedule`: which streaming frames run the depth head (`SessionConfig.depth_every_n`, issue 22).

The depth head costs ≈ 2.7 ms of a ≈ 31 ms step on the H200 (docs/performance.md) and nothing of the pose
depends on it, so a session can skip it where nobody uses the depth: streaming frame j (0-based since the
last (re-)anchor) runs it when ``j % every_n == 0``, when the caller asks for it (``push(..., depth=True)``,
e.g. the node while ``~/depth`` has subscribers), and on a keyframe that would otherwise leave the last
``scale_frames`` keyframes without any depth (a re-anchor estimates its scale from the kept keyframes'
depths: engine/stream/reanchor.py). Anchor phases and re-anchors always run it.
"""

from __future__ import annotations


class DepthSchedule:
    """Per-stream decision "depth head or not" for each streaming step, in step order.

    Args:
        every_n: run the depth head on every n-th streaming frame (1: on every frame).
        scale_frames: S0, the keyframes a re-anchor keeps; at least one of any S0 consecutive keyframes
            gets a depth.
    """

    def __init__(self, every_n: int, scale_frames: int) -> None:
        self.every_n = every_n
        self.scale_frames = scale_frames
        self._keyframes_without_depth = 0

    def decide(self, streaming_index: int, keyframe: bool, demanded: bool) -> bool:
        """Whether streaming frame ``streaming_index`` (a keyframe or not) runs the depth head; call once per
        step, in step order (it counts the keyframes without depth)."""
        depth = (
            demanded
            or streaming_index % self.every_n == 0
            or (keyframe and self._keyframes_without_depth >= self.scale_frames - 1)
        )
        if keyframe:
            self._keyframes_without_depth = 0 if depth else self._keyframes_without_depth + 1
        return depth
