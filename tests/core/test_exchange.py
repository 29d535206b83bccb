"""Arrays across the judge/contestant boundary, through real mapped slots.

The judge's `Arena` writes inputs, the contestant's `SlotTable` attaches the same files and
rebuilds them, writes its outputs, and the judge decodes them: both sides run here, on the
host, with numpy alone (torch blocked in a fresh interpreter, as on a plain install) and
with torch.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from nsight_core.runtime.exchange import Arena, SlotTable
from nsight_core.runtime.messages import SlotSpec


def _round_trip(arena_dir: Path, value: object, expected: object) -> tuple[object, object]:
    """(what the contestant sees of `value`, what the judge decodes of the contestant's
    output `value`, written into slots sized like `expected`)."""
    arena = Arena(arena_dir, cuda_ipc=False)
    new: list[SlotSpec] = []
    node = arena.encode_inputs(value, "c0", new)
    out_slots = arena.output_slots(expected, "c0", new)
    table = SlotTable()
    table.attach(new)
    seen = table.materialize(node)
    out_node = table.write_output(seen, out_slots)
    decoded = arena.decode_output(out_node, set(out_slots))
    arena.close()
    return seen, decoded


def test_numpy_arrays_cross_both_ways_bit_for_bit(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((33, 7)).astype(np.float32)
    cases: list[object] = [
        x,
        x.T,  # not contiguous: crosses in logical order
        np.arange(12, dtype=np.int64).reshape(3, 4),
        np.zeros((0, 5), dtype=np.float16),
        np.array([True, False, True]),
        (x[:4], {"scale": 2.5, "ids": np.arange(3, dtype=np.int32)}),
    ]
    for value in cases:
        seen, decoded = _round_trip(tmp_path / f"a{id(value)}", value, value)
        for got in (seen, decoded):
            for a, b in zip(_leaves(got), _leaves(value), strict=True):
                if isinstance(b, np.ndarray):
                    assert isinstance(a, np.ndarray) and a.dtype == b.dtype
                    np.testing.assert_array_equal(a, b)
                    assert not np.shares_memory(a, b)
                else:
                    assert a == b


def _leaves(x: object) -> list[object]:
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    if isinstance(x, tuple | list):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


def test_torch_tensors_cross_through_host_slots(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(16, 8, dtype=torch.float32)
    for value in (x, x.t(), x.to(torch.bfloat16), torch.empty(0, 3)):
        seen, decoded = _round_trip(tmp_path / f"t{id(value)}", value, value)
        for got in (seen, decoded):
            assert isinstance(got, torch.Tensor) and got.dtype == value.dtype
            assert torch.equal(got, value)
            assert got.data_ptr() != value.data_ptr() or value.numel() == 0


def test_numpy_jobs_need_no_torch(tmp_path: Path) -> None:
    """A plain install has no torch: the exchange must not reach for it on numpy arrays."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None  # as if not installed: `import torch` fails
        import numpy as np
        from tests.core.test_exchange import _round_trip
        x = np.arange(24, dtype=np.float64).reshape(4, 6)
        seen, decoded = _round_trip(__import__("pathlib").Path({str(tmp_path)!r}), (x, 3), (x,))
        assert (seen[0] == x).all() and seen[1] == 3, seen
        assert (decoded[0] == x).all() and decoded[1] == 3, decoded
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
        print("ok")
        """
    )
    repo = Path(__file__).resolve().parents[2]
    ran = subprocess.run(
        [sys.executable, "-c", script],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stderr


def test_masked_inputs_are_unreadable_in_their_slots_until_the_call_starts(tmp_path: Path) -> None:
    # Under events the judge masks a call's inputs: a thread polling a slot before the call
    # message arrives reads noise. A view stays masked until `unmask` (as the window opens);
    # a copy (a strided array) is made from the unmasked bytes at once; after the call the
    # judge reads the inputs back as they were (its mutation check compares them).
    import torch

    rng = np.random.default_rng(1)
    dense = rng.standard_normal((5, 9)).astype(np.float32)  # 180 bytes: 22 words and a tail
    tensor = torch.arange(10, dtype=torch.float64)
    inputs = (dense, {"t": tensor, "strided": tensor.reshape(2, 5).t()})
    arena = Arena(tmp_path / "arena", cuda_ipc=False)
    new: list[SlotSpec] = []
    node = arena.encode_inputs(inputs, "c0", new, mask=bytes.fromhex("0123456789abcdef"))
    table = SlotTable()
    table.attach(new)
    seen_dense, seen = table.materialize(node, bytes.fromhex("0123456789abcdef"))

    assert not np.array_equal(seen_dense, dense) and not torch.equal(seen["t"], tensor)
    assert torch.equal(seen["strided"], tensor.reshape(2, 5).t())  # a copy: unmasked now
    table.unmask()
    np.testing.assert_array_equal(seen_dense, dense)
    assert torch.equal(seen["t"], tensor)
    back_dense, back = arena.read_inputs(node, inputs)
    np.testing.assert_array_equal(back_dense, dense)
    assert torch.equal(back["t"], tensor)
    arena.close()
