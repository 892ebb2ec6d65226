"""Heightfields for adaptive-terrain-diffusion's one-step consistency UNet (`terrain_diffusion`):
the model turns Gaussian noise at sigma_max into a 128 x 128 terrain for a robot's training course,
conditioned on a difficulty from 1 to 100.

The feeds are the package's own sampling (TerrainGenerator._sample_native with no source): noise
times sigma_max (80) from the seed's generator, `sigma` 80, and each difficulty as its label
(difficulty - 1) / 99. A generator's input is noise: what means something here is the range of
difficulties, which the tune and report sets spread over (two terrains a sample, 13 apart; the
report set's difficulties between the tune set's). Decision (decisions.
height_steps): each cell's height in 0.25 m steps above the terrain's floor, as the package's
_from_model_space converts it (the asinh scale, 22.17 m of range), the unit a legged robot climbs.
"""

from __future__ import annotations

import numpy as np

from zoo.sources import seeded

SIGMA_MAX, SIZE = 80.0, 128


def terrain_noise(model, seed, n):
    rng = seeded(seed)
    feeds = []
    for i in range(n):
        low = 1 + 25 * (i % 4) + (0 if seed == 0 else 6)  # tune 1, 14, 26, 39...89; report 7, 20, 32...95
        difficulty = np.array([low, low + 13], np.float64)
        noise = rng.standard_normal((2, 1, SIZE, SIZE), dtype=np.float32) * np.float32(SIGMA_MAX)
        feeds.append({"noisy": noise, "sigma": np.full(2, SIGMA_MAX, np.float32),
                      "difficulty": ((difficulty - 1) / 99).astype(np.float32)})
    return feeds
