"""Pre-processing: reproduces the reference's inputs; resize/crop mapping back to the original pixels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lingbot_map_ros.engine.stream.preprocess import preprocess, preprocess_geometry, resize_uint8

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
CASES = sorted((SHARED / "parity").glob("case_*"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reproduces_parity_inputs(case: Path) -> None:
    inputs = np.load(case / "inputs.npz")
    raw, expected = inputs["raw_frames"], inputs["images"]
    assert raw.shape[0] == expected.shape[0] > 0
    for frame, want in zip(raw, expected, strict=True):
        got, geometry = preprocess(frame, image_width=98)
        assert geometry.out_hw == (56, 98) and geometry.crop_top == 0
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_geometry_landscape_and_portrait() -> None:
    g = preprocess_geometry((294, 518), 518)
    assert (g.resized_hw, g.crop_top, g.out_hw) == ((294, 518), 0, (294, 518))
    g = preprocess_geometry((480, 640), 518)  # 4:3 → 518×392 (37×28 patches)
    assert g.out_hw == (392, 518)
    g = preprocess_geometry((300, 200), 98)  # portrait: 98 × round(10.5)·14 = 140 rows, crop to 98
    assert (g.resized_hw, g.crop_top, g.out_hw) == ((140, 98), 21, (98, 98))


def test_intrinsics_map_back_to_source_pixels() -> None:
    """A 3D point projects to source/network pixels related by the resize (+crop) pixel mapping."""
    rng = np.random.default_rng(0)
    for source_hw in ((294, 518), (300, 200), (720, 1280)):
        g = preprocess_geometry(source_hw, 98)
        k_net = np.array([[61.0, 0.0, 49.0], [0.0, 57.0, g.out_hw[0] / 2], [0.0, 0.0, 1.0]])
        k_src = g.intrinsics_to_source(k_net)
        sx, sy = g.scale_xy
        pts = rng.uniform([-1, -1, 2], [1, 1, 5], size=(20, 3))
        uv_net = (pts @ k_net.T)[:, :2] / pts[:, 2:]
        uv_src = (pts @ k_src.T)[:, :2] / pts[:, 2:]
        np.testing.assert_allclose(uv_src[:, 0] + 0.5, (uv_net[:, 0] + 0.5) / sx, rtol=1e-12)
        np.testing.assert_allclose(uv_src[:, 1] + 0.5, (uv_net[:, 1] + g.crop_top + 0.5) / sy, rtol=1e-12)
    # Hand-computed: 518 → 98 wide (s = 98/518), cx_net = 49 → (49.5)·518/98 − 0.5 = 261.1428…
    k = preprocess_geometry((294, 518), 98).intrinsics_to_source(
        np.diag([49.0, 49.0, 1.0]) + [[0, 0, 49], [0, 0, 28], [0, 0, 0]]
    )
    np.testing.assert_allclose(k[0], [49.0 * 518 / 98, 0.0, 49.5 * 518 / 98 - 0.5])
    np.testing.assert_allclose(k[1], [0.0, 49.0 * 294 / 56, 28.5 * 294 / 56 - 0.5])


def test_map_to_source_resamples_and_marks_cropped_rows() -> None:
    g = preprocess_geometry((294, 518), 98)
    cols = np.tile(np.arange(98, dtype=np.float32), (56, 1))
    up = g.map_to_source(cols)
    assert up.shape == (294, 518) and up.dtype == np.float32
    u = np.arange(20, 500)
    np.testing.assert_allclose(up[100, u], (u + 0.5) * 98 / 518 - 0.5, atol=1e-4)

    g = preprocess_geometry((300, 200), 98)  # crop_top 21 of 140 resized rows
    rows = np.tile(np.arange(98, dtype=np.float32)[:, None], (1, 98))
    up = g.map_to_source(rows)
    sy = 140 / 300
    y_net = (np.arange(300) + 0.5) * sy - 0.5 - 21
    inside = (y_net >= -0.5) & (y_net <= 97.5)
    assert np.isnan(up[~inside]).all() and np.isfinite(up[inside]).all()
    np.testing.assert_allclose(up[inside, 50], np.clip(y_net[inside], 0, 97), atol=1e-4)
    with pytest.raises(ValueError, match="shape"):
        g.map_to_source(np.zeros((56, 98), np.float32))


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (np.zeros((10, 10, 3), np.float32), "uint8"),
        (np.zeros((10, 10), np.uint8), r"\[H, W, 3\]"),
        ([[0, 0, 0]], "numpy.ndarray"),
        (np.zeros((2, 500, 3), np.uint8), "height"),
    ],
)
def test_bad_input_is_a_clear_error(image: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        preprocess(image, image_width=98)  # type: ignore[arg-type]


def test_width_must_be_a_multiple_of_14() -> None:
    with pytest.raises(ValueError, match="multiple of 14"):
        preprocess_geometry((294, 518), 100)


def test_network_sized_input_skips_the_resize_bit_exactly() -> None:
    """An input already at the network size is passed through: identical to PIL's same-size resize."""
    from PIL import Image

    rgb = np.random.default_rng(3).integers(0, 256, (378, 518, 3), dtype=np.uint8)
    geometry = preprocess_geometry(rgb.shape[:2], 518)
    assert geometry.out_hw == (378, 518) and geometry.crop_top == 0
    pil = np.asarray(Image.fromarray(rgb, mode="RGB").resize((518, 378), Image.Resampling.BICUBIC))
    assert np.array_equal(resize_uint8(rgb, geometry), pil)
