"""An array's bytes into and out of a slot's buffer, for torch, numpy and cupy arrays alike.

A slot's buffer is a uint8 torch CUDA tensor (a CUDA slot) or a uint8 numpy array over a
mapped file (a host slot). An array goes in as its bytes in logical (C) order and comes out
as an array (new, or a view of the slot) of its description's framework, dtype, shape and
strides; the XOR mask keeps a call's inputs unreadable in their slots until the call starts.

torch is used only for arrays that are torch's own or live in a CUDA slot: a numpy-only job
runs where torch is not installed, and cupy without torch crosses through host slots (CUDA
IPC here is torch's).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from nsight_core.runtime.messages import ArrayNode


def _torch() -> Any:
    """torch's module where this process imported it; a clear error where a torch array or a
    CUDA slot needs it and it is not installed."""
    torch = sys.modules.get("torch")
    if torch is None:
        raise ValueError("this array needs torch, which this process has not imported")
    return torch


def array_nbytes(x: Any, fw: str) -> int:
    return int(x.numel() * x.element_size()) if fw == "torch" else int(x.nbytes)


def _as_torch_bytes(x: Any, fw: str) -> Any:
    """A flat uint8 torch view of the array's bytes in logical (C) order."""
    torch = _torch()
    if fw == "torch":
        t = x.detach()
    elif fw == "cupy":
        t = torch.from_dlpack(x)
    else:
        t = torch.from_numpy(x)
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8) if t.numel() else t.new_empty(0, dtype=torch.uint8)


def _as_host_bytes(x: Any, fw: str) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A flat uint8 numpy array of the array's bytes in logical (C) order, on the host."""
    if fw == "torch":
        return np.asarray(_as_torch_bytes(x, fw).cpu().numpy())
    host = sys.modules["cupy"].asnumpy(x) if fw == "cupy" else x
    return np.ascontiguousarray(host).reshape(-1).view(np.uint8)


def _is_device_buf(buf: Any) -> bool:
    """A CUDA slot's buffer (a torch tensor) rather than a host slot's numpy bytes."""
    return not isinstance(buf, np.ndarray)


def copy_in(buf: Any, x: Any, fw: str) -> None:
    """Copy the array's bytes into the start of a slot's buffer."""
    if _is_device_buf(buf):
        data = _as_torch_bytes(x, fw)
        if data.numel():
            buf[: data.numel()].copy_(data)
        return
    host = _as_host_bytes(x, fw)
    buf[: host.size] = host


def xor_bytes(buf: Any, nbytes: int, key: bytes, tail: Any = None) -> None:
    """XOR a slot's first ``nbytes`` with ``key`` (8 bytes, repeated) in place: the mask
    that keeps a call's inputs unreadable in a shared slot until its call starts. Its own
    inverse. On a device buffer it queues at most two kernels on the current stream and
    never synchronizes, given ``tail`` (`xor_tail`) for the last ``nbytes % 8`` bytes."""
    n8 = nbytes // 8 * 8
    word = int.from_bytes(key, "little", signed=True)
    if n8 < nbytes and tail is None:
        tail = xor_tail(buf, nbytes, key)
    if _is_device_buf(buf):
        if n8:
            buf[:n8].view(_torch().int64).bitwise_xor_(word)
        if tail is not None:
            buf[n8:nbytes].bitwise_xor_(tail)
        return
    if n8:
        view = buf[:n8].view(np.int64)
        np.bitwise_xor(view, np.int64(word), out=view)
    if tail is not None:
        buf[n8:nbytes] ^= tail


def xor_tail(buf: Any, nbytes: int, key: bytes) -> Any:
    """The key's bytes for the last ``nbytes % 8`` bytes, where ``buf`` lives (None: no
    tail). Made ahead of time: on a device it is a host-to-device copy, which waits."""
    rest = key[: nbytes % 8]
    if not rest:
        return None
    if _is_device_buf(buf):
        return _torch().tensor(list(rest), dtype=_torch().uint8, device=buf.device)
    return np.frombuffer(rest, dtype=np.uint8)


def device_of(x: Any, fw: str) -> str:
    if fw == "torch":
        return "cuda" if x.is_cuda else str(x.device.type)
    return "cuda" if fw == "cupy" else "cpu"


def dense_stride(x: Any, fw: str) -> list[int] | None:
    """Strides to recreate when the array is a non-contiguous but dense permutation."""
    if fw != "torch" or x.is_contiguous() or x.numel() == 0:
        return None
    stride = list(x.stride())
    if any(s <= 0 for s in stride):
        return None  # broadcast views cross as contiguous copies
    return stride


def rebuild_array(node: ArrayNode, data: Any, *, fresh: bool) -> Any:
    """An array like ``node`` made from a slot's bytes ``data`` (copied when fresh)."""
    if node.framework == "numpy":
        raw = data.cpu().numpy() if _is_device_buf(data) else data
        view = np.asarray(raw).view(np.dtype(node.dtype)).reshape(node.shape)
        return view.copy() if fresh else view
    if node.framework == "cupy" and not _is_device_buf(data):
        cupy = sys.modules["cupy"]
        return cupy.asarray(data.view(np.dtype(node.dtype)).reshape(node.shape))
    torch = _torch()
    if not _is_device_buf(data):
        data = torch.from_numpy(data)
    dtype = getattr(torch, node.dtype)
    # The array goes where its description says, whatever memory the slot is in (a host
    # slot carries CUDA arrays when IPC is off).
    target = torch.device("cuda") if node.device == "cuda" else torch.device("cpu")
    flat = data.view(dtype) if node.nbytes else torch.empty(0, dtype=dtype, device=data.device)
    dense = flat.reshape(node.shape)
    if node.stride is not None:
        out = torch.empty_strided(node.shape, node.stride, dtype=dtype, device=target)
        out.copy_(dense)
    elif dense.device.type != target.type:
        out = dense.to(target)
    else:
        # Compare device *types*: "cuda" != "cuda:0" as devices, and `.to("cuda")` of a
        # tensor on cuda:0 returns the tensor itself, a view of the slot. A judge holding
        # views of a reused output slot saw a second call's output as the first's (the
        # determinism check passed whatever the candidate did).
        out = dense.clone() if fresh else dense
    if node.framework == "cupy":
        return sys.modules["cupy"].from_dlpack(out)
    if node.requires_grad:
        out.requires_grad_(True)
    return out


def data_ptr(x: Any) -> int | None:
    """Where an array's first element lives (torch, numpy, cupy); None for anything else."""
    if hasattr(x, "data_ptr"):
        return int(x.data_ptr())
    if hasattr(x, "__array_interface__"):
        return int(x.__array_interface__["data"][0])
    ptr = getattr(getattr(x, "data", None), "ptr", None)
    return int(ptr) if ptr is not None else None
