"""A large sweep is evaluated in blocks (``runtime.grid_blocks``): the same times, every point once."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import catalog
from costmodel.devices.hardware import load_hardware
from costmodel.runtime import grid_blocks
from costmodel.runtime.grid_blocks import in_blocks
from costmodel.runtime.timing import Kernels
from costmodel.runtime.timing_grid import predict_grid


def _sum(b: np.ndarray, s: np.ndarray, e: np.ndarray | None) -> np.ndarray:
    return np.asarray(b + 1000 * s + (0 if e is None else e), dtype=float)


@pytest.mark.parametrize("shapes", [((1, 700), (300, 1)), ((1700,), (1700,)), ((1, 5000), (1, 1)),
                                    ((3, 1, 40), (1, 50, 1))])
def test_blocks_cover_every_point_once_in_its_place(shapes) -> None:
    b = np.arange(np.prod(shapes[0])).reshape(shapes[0])
    s = np.arange(np.prod(shapes[1])).reshape(shapes[1]) + 7
    calls: list[int] = []

    def f(*xs):
        out = _sum(*xs)
        calls.append(out.size)
        return out

    whole = in_blocks(f, (b, s, None), limit=1000)
    assert whole is not None
    assert np.array_equal(whole, _sum(b, s, None))
    assert max(calls) <= 1000 and sum(calls) == whole.size


def test_a_grid_of_one_block_is_left_to_the_caller() -> None:
    assert in_blocks(_sum, (np.ones((1, 10)), np.ones((10, 1)), None), limit=100) is None


def test_a_swept_prefill_in_blocks_is_the_sweep_in_one_piece(monkeypatch) -> None:
    spec, hw = catalog.load("llama-3-8b"), load_hardware("h100-sxm")
    seq = np.rint(np.geomspace(512, 8192, 60))[:, np.newaxis]
    batch = np.arange(1, 61)[np.newaxis, :]
    for kernels in (Kernels(), Kernels(flash_attention=True)):
        monkeypatch.setattr(grid_blocks, "BLOCK", 10**9)
        whole = predict_grid(spec, "train", batch, seq, hw, "bf16", kernels)
        monkeypatch.setattr(grid_blocks, "BLOCK", 500)  # 8 rows of 60 a block
        blocked = predict_grid(spec, "train", batch, seq, hw, "bf16", kernels)
        assert blocked.shape == whole.shape == (60, 60)
        np.testing.assert_allclose(blocked, whole, rtol=1e-13, atol=0)
