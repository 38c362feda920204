"""Small helpers for building specs in tests."""

from __future__ import annotations

from typing import Any

from costmodel.spec import Spec, spec_from_dict

#: A LLaMA-shaped decoder small enough to count by hand: d=8, h=2, k=1, d_h=4, f=12, V=10, L=2.
TINY: dict[str, Any] = dict(
    name="tiny",
    d_model=8,
    n_layers=2,
    n_heads=2,
    n_kv_heads=1,
    d_ff=12,
    vocab_size=10,
    max_seq_len=64,
    norm="rmsnorm",
    activation="swiglu",
    position="rope",
)


def tiny(**changes: Any) -> Spec:
    """TINY with some fields changed (None removes a field)."""
    data = {**TINY, **changes}
    return spec_from_dict({k: v for k, v in data.items() if v is not None})


def random_spec_data(draw: Any) -> dict[str, Any]:
    """A valid small spec mixing every design element, as the YAML mapping a user would write.

    Each element draws its own fields (``Element.sample``), in the registry's order; `draw` is
    hypothesis's draw (inside ``st.composite``). A new element is in this strategy by being in
    the registry.
    """
    from hypothesis import strategies as st

    from costmodel.components import ELEMENTS

    data: dict[str, Any] = {"name": "random"}
    for e in ELEMENTS:
        e.sample(lambda options: draw(st.sampled_from(list(options))), data)
    return data



#: The grid ``costmodel calibrate`` measures on this CPU (``costmodel.measure.calibrate.GRID["cpu"]``,
#: held equal by tests/test_timing_grid.py): M, N, K of the matmuls, bytes of the memory op,
#: sizes of the first-touch fills.
CALIBRATE_GRID: dict[str, list[int]] = {
    "M": [1, 2, 4, 8, 16, 32, 64, 256, 1024], "N": [64, 256, 1024, 4096, 16384], "K": [16, 64, 256, 1024,
                                                                                       4096],
    "bytes": [2**i for i in range(12, 29, 2)], "fresh": [2**i for i in range(20, 29)],
}


def calibrated_profile(dtypes: tuple[str, ...] = ("bf16", "fp32"), realistic: bool = False) -> Any:
    """A profile shaped as ``costmodel calibrate`` writes one on the CPU: a multi-point (M, N, K)
    matmul table per dtype, an interpolated memory table and a first-touch table over
    CALIBRATE_GRID, a floor above zero. Made-up values, for comparing two evaluations of the
    model and timing them, never for a prediction:

    - by default they vary along every axis, and not monotonically, so a lookup that took a
      wrong cell or axis would show;
    - `realistic`: they rise with size as a measured table does (a product's efficiency with
      each of M, N, K; an op's with its bytes; first touch from glibc's 32 MiB mmap threshold),
      at the peak, bandwidth and floor this machine's calibration measured (docs/measure.md:
      26.8 GFLOP/s, 3.34 GB/s, 10.9 us).
    """
    from costmodel.devices.efficiency import Efficiency, FirstTouchTable, MatmulTable, MemoryTable
    from costmodel.devices.hardware import Hardware

    g = CALIBRATE_GRID

    def value(i: int, j: int, k: int) -> float:
        if realistic:
            m, n, kk = g["M"][i], g["N"][j], g["K"][k]
            return round(0.95 * m / (m + 8) * n / (n + 48) * kk / (kk + 32), 5)
        return round(0.05 + 0.9 * ((7 * i + 3 * j + 5 * k + i * j * k) % 17) / 16, 5)

    table = MatmulTable(M=g["M"], N=g["N"], K=g["K"],
                        efficiency=[[[value(i, j, k) for k in range(len(g["K"]))] for j in range(len(g["N"]))]
                                    for i in range(len(g["M"]))])
    memory = MemoryTable(bytes=g["bytes"], efficiency=[
        round(0.9 * x / (x + 2**15), 5) if realistic else round(0.05 + 0.9 * ((3 * i) % 7) / 6, 5)
        for i, x in enumerate(g["bytes"])])
    fresh = FirstTouchTable(bytes=[float(n) for n in g["fresh"]], s_per_byte=[
        (3e-10 if n >= 2**25 else 0.0) if realistic else (0.0, 3e-10, 2.5e-10, 3.5e-10)[i % 4]
        for i, n in enumerate(g["fresh"])])
    peak, bandwidth, floor = (26.8e9, 3.34e9, 10.9e-6) if realistic else (2e12, 2e10, 4e-6)
    return Hardware(name="calibrated-style", peak_flops=dict.fromkeys(dtypes, peak),
                    memory_bandwidth=bandwidth,
                    memory_bytes=24e9, source="tests.helpers.calibrated_profile", measured=True,
                    efficiency=Efficiency(source="made-up values on calibrate's CPU grid", floor_s=floor,
                                          matmul=dict.fromkeys(dtypes, table), memory=memory,
                                          first_touch=fresh))


def is_layer(path: str) -> bool:
    """A leaf of a layer of a stack, read off its path (``layers/...``, ``layers[local]/...``,
    ``decoder/layers/...``): the package asks its ``Key.layer``."""
    return any(part == "layers" or part.startswith("layers[") for part in path.split("/")[:-1])



def generating_names() -> list[str]:
    """The bundled specs that decode (every one but the encoder-only models)."""
    from costmodel import catalog
    from costmodel.analysis import phases_of

    return [n for n in catalog.bundled_names() if "decode" in phases_of(catalog.load(n))]
