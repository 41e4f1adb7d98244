"""Bus bandwidth and verdicts (nccl-tests PERFORMANCE.md), shared by the NCCL and CPU allreduce gates.

algbw = bytes / time; allreduce busbw = algbw × 2(n−1)/n, which makes the figure comparable to
the per-node NIC bandwidth whatever the rank count. 1 GB/s here is 10⁹ bytes/s, as nccl-tests.
"""

from __future__ import annotations

from dataclasses import dataclass


def algbw_gbs(size_bytes: int, time_us: float) -> float:
    return size_bytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0


def allreduce_busbw_gbs(size_bytes: int, time_us: float, ranks: int) -> float:
    return algbw_gbs(size_bytes, time_us) * 2 * (ranks - 1) / ranks if ranks > 0 else 0.0


def gbps_to_gbs(gbps: float) -> float:
    """Link rate in Gb/s → GB/s (25 Gb/s NIC = 3.125 GB/s)."""
    return gbps / 8


@dataclass(frozen=True)
class Reference:
    """What the hardware can carry, and how that figure was worked out ("2 HCAs × 200 Gb/s ÷ 8")."""

    value: float
    formula: str
    what: str  # "the port rate", "the per-node NIC bandwidth"


@dataclass(frozen=True)
class Bounds:
    """A gate's settings: pass at fraction × reference (or an absolute minimum), warn below
    warn_fraction × reference, and fail above max_fraction × reference as a measurement error.
    A gate held to an absolute minimum has no warning band: the minimum is written where the
    reference cannot be reached (emulated SoftRoCE, an eRDMA instance's bandwidth cap), so a band
    under the reference would warn on every healthy run; its part's baseline still flags a slide."""

    fraction: float
    warn_fraction: float
    max_fraction: float
    minimum: float | None = None
    minimum_source: str = "the inventory's minimum"  # what the minimum is, as the verdict names it
    too_high: str = "not Ring, or the declared rate is wrong"  # why a figure above max_fraction is wrong

    def threshold(self, reference: Reference | None) -> float | None:
        """The figure a pass needs, as judge holds it: the absolute minimum, else fraction × reference."""
        if self.minimum is not None:
            return self.minimum
        return self.fraction * reference.value if reference is not None else None


@dataclass(frozen=True)
class Verdict:
    """pass, warn or fail; the figure; the threshold it was held to; a sentence with the arithmetic."""

    status: str
    measured: float | None
    threshold: float | None
    unit: str
    reason: str
    expected: float | None = None  # the reference (line rate), where known

    @property
    def passed(self) -> bool:
        return self.status != "fail"


def failed(reason: str, unit: str = "") -> Verdict:
    """A run that gave no figure to judge."""
    return Verdict("fail", None, None, unit, reason)


def judge(measured: float, unit: str, bounds: Bounds, reference: Reference | None) -> Verdict:
    """Hold `measured` to an absolute minimum, else to fraction × reference, showing the sums."""
    expected = reference.value if reference else None
    if bounds.minimum is not None:
        threshold, basis = bounds.minimum, f"{bounds.minimum_source} {bounds.minimum:g} {unit}"
    elif reference is not None:
        threshold = bounds.fraction * reference.value
        basis = f"{bounds.fraction:.2f} × {reference.what} ({reference.formula})"
    else:
        return Verdict(
            "fail",
            measured,
            None,
            unit,
            "no threshold: declare rdma.rate_gbps for the nodes or an absolute minimum in cluster.gates",
        )
    share = f" ({measured / reference.value:.1%} of {reference.what})" if reference else ""
    if reference is not None and measured > bounds.max_fraction * reference.value:
        return Verdict(
            "fail",
            measured,
            threshold,
            unit,
            f"measurement error: {measured:.4g} {unit}{share} is above "
            f"{bounds.max_fraction:.2f} × {reference.what} ({reference.formula}): {bounds.too_high}",
            expected,
        )
    passed = measured >= threshold
    reason = f"{measured:.4g} {unit}{share} {'>=' if passed else '<'} {threshold:.4g} {unit} = {basis}"
    if not passed:
        return Verdict("fail", measured, threshold, unit, reason, expected)
    if bounds.minimum is None and reference is not None and measured < bounds.warn_fraction * reference.value:
        return Verdict(
            "warn",
            measured,
            threshold,
            unit,
            f"{reason}; below the warning level {bounds.warn_fraction:.2f} × {reference.value:.4g} {unit}",
            expected,
        )
    return Verdict("pass", measured, threshold, unit, reason, expected)
