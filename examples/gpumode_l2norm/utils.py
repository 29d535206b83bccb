"""The task's check helper: the reference's output within tolerance, as (good, message)."""

from collections.abc import Callable

import torch


def match_reference(
    reference: Callable[[torch.Tensor], torch.Tensor], rtol: float = 1e-5, atol: float = 1e-6
) -> Callable[[torch.Tensor, torch.Tensor], tuple[bool, str]]:
    def check(data: torch.Tensor, output: torch.Tensor) -> tuple[bool, str]:
        expected = reference(data)
        if output.shape != expected.shape:
            return False, f"shape {tuple(output.shape)}, expected {tuple(expected.shape)}"
        bad = (output - expected).abs() > atol + rtol * expected.abs()
        if bool(bad.any()):
            return False, f"{int(bad.sum())} of {bad.numel()} elements differ"
        return True, ""

    return check
