"""Metric scale of the model's up-to-scale output (`scale.source`: odometry, depth, fixed, none).

The model's poses and depths share one unknown unit. The estimator turns them into metres:

* `odometry`: keyframe pairs whose camera moved at least `min_baseline` metres in the odometry frame give one
  ratio `|Δc_odom| / |Δc_model|` (camera positions; rotation-free, so it needs no alignment); the scale is the
  median of the last `window` ratios.
* `depth`: per keyframe, the median of `sensor_depth / predicted_depth` over confident pixels where both are
  valid; the scale is the median of the last `window` per-keyframe ratios (smoothing).
* `fixed`: `factor`; `none`: 1 (model units).

Once converged, a sample more than `max_change` times above or below the current value is rejected and counted
(`rejected`): odometry jumping 2 km in one frame drove the scale to 5,069 (issue 20). Before convergence the
median of the window absorbs outliers.

`converged` once `min_samples` samples arrived (immediately for fixed/none). Spread: 1.4826 · MAD of the
samples over their median (a relative robust standard deviation). `reset()` after a reset (new epoch);
`restart()` after a long-stream re-anchor keeps the value but re-collects samples.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..settings import setting

SCALE_SOURCES = ("none", "fixed", "odometry", "depth")


@dataclass(frozen=True)
class ScaleConfig:
    """`scale.*` parameters. `min_conf`: confidence threshold of the depth ratio's pixels."""

    source: str = setting(
        "none",
        "Metric scale: odometry (odom -> base via TF), depth (depth_image topic), fixed (scale.factor), "
        "none (model units).",
        choices=SCALE_SOURCES,
    )
    factor: float = setting(1.0, "Metres per model unit with scale.source fixed.", bounds=(1e-6, 1e6))
    min_baseline: float = setting(
        0.1,
        "Metres the camera must move (odometry) between the two keyframes of a scale sample.",
        bounds=(0.0, 100.0),
    )
    min_samples: int = setting(
        5,
        "Samples before the scale counts as converged (map points are held until then).",
        bounds=(1, 1000),
        node_default=10,
    )
    window: int = setting(50, "Samples of the robust (median) estimate.", bounds=(1, 10000))
    min_conf: float = 1.5
    max_change: float = setting(
        3.0,
        "Once the scale has converged, a sample more than this factor above or below it is rejected and "
        "counted (/diagnostics scale_rejected): one odometry jump cannot rescale the map.",
        bounds=(1.01, 1000.0),
    )

    def __post_init__(self) -> None:
        if not self.max_change > 1.0:
            raise ValueError(f"scale.max_change must be > 1, got {self.max_change}")
        if self.source not in SCALE_SOURCES:
            raise ValueError(f"scale.source must be one of {SCALE_SOURCES}, got '{self.source}'")
        if not self.factor > 0:
            raise ValueError(f"scale.factor must be > 0, got {self.factor}")
        if self.min_samples < 1 or self.window < self.min_samples:
            raise ValueError(
                f"scale.window ({self.window}) must be >= scale.min_samples ({self.min_samples}) >= 1"
            )


@dataclass(frozen=True)
class ScaleState:
    """What /diagnostics reports: `value` (metres per model unit), `spread` (relative), `source`,
    `samples`, `converged`, `updated_s` (stamp of the last sample, or None)."""

    value: float
    spread: float
    source: str
    samples: int
    converged: bool
    updated_s: float | None


class ScaleEstimator:
    """Robust running estimate of the metric scale (module doc)."""

    def __init__(self, config: ScaleConfig) -> None:
        self.config = config
        self._samples: deque[float] = deque(maxlen=config.window)
        self._keyframes: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=256)  # (c_model, c_odom)
        self._value = config.factor if config.source == "fixed" else 1.0
        self._converged = config.source in ("none", "fixed")
        self._updated: float | None = None
        self.rejected = 0  # samples beyond max_change of the converged value, since the last reset

    def reset(self) -> None:
        """New epoch: forget the samples, the value and the rejected count."""
        self.__init__(self.config)

    def restart(self) -> None:
        """Long-stream re-anchor: re-collect samples (the current value is kept until then)."""
        self._samples.clear()
        self._keyframes.clear()

    def export(self) -> dict[str, object]:
        """JSON-able estimate for a saved session: value, converged, the window's samples, last stamp."""
        return {
            "value": self._value,
            "converged": self._converged,
            "samples": list(self._samples),
            "updated_s": self._updated,
            "source": self.config.source,
        }

    def restore(self, saved: dict[str, object]) -> None:
        """Continue from `export()` of a saved session (without keyframe pairs: odometry may have restarted).

        A saved estimate of another source is ignored (the configured source starts afresh); ValueError for
        malformed values."""
        self.reset()
        if saved.get("source") != self.config.source or self.config.source in ("none", "fixed"):
            return
        samples = [float(v) for v in saved.get("samples", [])]  # type: ignore[union-attr]
        value = float(saved["value"])  # type: ignore[arg-type]
        if not (np.isfinite(value) and value > 0 and all(np.isfinite(v) and v > 0 for v in samples)):
            raise ValueError(f"saved scale must be finite and > 0, got {value} / {samples[:3]}...")
        self._samples.extend(samples[-self.config.window :])
        self._value = value
        self._converged = bool(saved.get("converged")) or len(self._samples) >= self.config.min_samples
        updated = saved.get("updated_s")
        self._updated = float(updated) if updated is not None else None  # type: ignore[arg-type]

    @property
    def value(self) -> float:
        return self._value

    @property
    def converged(self) -> bool:
        return self._converged

    def state(self) -> ScaleState:
        samples = np.array(self._samples)
        spread = 0.0
        if samples.size >= 2:
            med = float(np.median(samples))
            spread = float(1.4826 * np.median(np.abs(samples - med)) / med)
        return ScaleState(
            self._value, spread, self.config.source, int(samples.size), self._converged, self._updated
        )

    def add_odometry(self, camera_model: np.ndarray, camera_odom: np.ndarray, stamp_s: float) -> bool:
        """A keyframe's camera position [3] in the model world and in the odometry frame (metres).

        Returns True when it produced a sample (a pair with enough baseline)."""
        if self.config.source != "odometry":
            return False
        c_m, c_o = np.asarray(camera_model, np.float64), np.asarray(camera_odom, np.float64)
        sampled = False
        for prev_m, prev_o in reversed(self._keyframes):
            base_o = float(np.linalg.norm(c_o - prev_o))
            if base_o >= self.config.min_baseline:
                base_m = float(np.linalg.norm(c_m - prev_m))
                if base_m > 1e-9:
                    self._add(base_o / base_m, stamp_s)
                    sampled = True
                break
        self._keyframes.append((c_m, c_o))
        return sampled

    def add_depth(self, predicted: np.ndarray, conf: np.ndarray, sensor: np.ndarray, stamp_s: float) -> bool:
        """A keyframe's predicted depth [H, W] (model units), its confidence [H, W] and the sensor's metric
        depth [H, W] (registered to the colour image; NaN / 0 = none). True when it gave a sample."""
        if self.config.source != "depth":
            return False
        pred = np.asarray(predicted, np.float64)
        meas = np.asarray(sensor, np.float64)
        if meas.shape != pred.shape:
            raise ValueError(f"sensor depth {meas.shape} must match the image {pred.shape}")
        ok = np.isfinite(pred) & np.isfinite(meas) & (pred > 0) & (meas > 0) & (conf > self.config.min_conf)
        if ok.sum() < 50:
            return False
        self._add(float(np.median(meas[ok] / pred[ok])), stamp_s)
        return True

    def _add(self, ratio: float, stamp_s: float) -> None:
        if not np.isfinite(ratio) or ratio <= 0:
            return
        limit = self.config.max_change
        if self._converged and not self._value / limit <= ratio <= self._value * limit:
            self.rejected += 1
            return
        self._samples.append(ratio)
        self._updated = stamp_s
        self._value = float(np.median(np.array(self._samples)))  # provisional until converged
        if len(self._samples) >= self.config.min_samples:
            self._converged = True
