"""Reading safetensors without mapping the file or copying its bytes.

The format: 8 bytes (little-endian) giving the header's length, the header (JSON: each tensor's dtype, shape and
``data_offsets`` [begin, end] into the data that follows, and optional ``__metadata__`` strings), then the data.

``safetensors.safe_open`` maps a file into memory: when the file is cut while it is mapped (``cp`` over a model in
the class's models folder truncates it, then writes), the next read of a page past the new end kills the process
with SIGBUS, and every student's session with it. Here a file is read with plain reads into memory the caller
owns: a file cut or replaced while it is read gives a short read or a changed size and time, each an error.

Each tensor is a copy in memory of its own (the allocator's alignment): a model whose weights were views at the
file's odd offsets computed the LSTM's gates 1e-6 away from the same weights copied (other SIMD paths), so one
model would not give one answer.
"""

import json
import math
import os
import struct
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import torch

__all__ = ["HeaderError", "Entry", "DTYPES", "MAX_HEADER_BYTES", "read_header", "check_spans", "tensors", "File"]

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
MAX_HEADER_BYTES = 16 * 1024 * 1024  # a header is a few kB per hundred tensors; safetensors' own limit is 100 MB


class HeaderError(ValueError):
    """Bytes that are not a safetensors file a model can be read from; the message says why in a sentence."""


@dataclass(frozen=True)
class Entry:
    """One tensor of the header: its dtype's name in the file ("F32"), its shape, and its bytes [begin, end) counted
    from the start of the file (the header included)."""

    dtype: str
    shape: list[int]
    begin: int
    end: int

    @property
    def torch_dtype(self) -> torch.dtype | None:
        return DTYPES.get(self.dtype)


def read_header(head: bytes, n_bytes: int) -> tuple[dict[str, str], dict[str, Entry], int]:
    """(metadata, entries by name, where the data starts) of a file of ``n_bytes`` bytes whose first bytes are
    ``head`` (at least the 8 of the header's length and the header). Every entry has a known dtype, a shape of
    whole numbers and two offsets; whether they fit the file is ``check_spans``'s, once the caller has checked the
    names and shapes it expects (its own messages are the clearer). Raises ``HeaderError``."""
    if n_bytes < 8 or len(head) < 8:
        raise HeaderError("it is too short to be safetensors")
    (length,) = struct.unpack("<Q", head[:8])
    if length > min(n_bytes - 8, MAX_HEADER_BYTES) or len(head) < 8 + length:
        raise HeaderError("its header length is impossible")
    try:
        header = json.loads(head[8 : 8 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise HeaderError("its header is not JSON") from None
    if not isinstance(header, dict):
        raise HeaderError("its header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(value, str) for value in metadata.values()):
        raise HeaderError("its metadata is not a JSON object of strings")
    start = 8 + length
    return metadata, {name: _entry(name, fields, start) for name, fields in header.items()}, start


def _entry(name: str, fields: object, start: int) -> Entry:
    shown = name[:60]
    if not isinstance(fields, dict):
        raise HeaderError(f"{shown} has no dtype, shape and offsets in the header")
    dtype, shape, offsets = fields.get("dtype"), fields.get("shape"), fields.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise HeaderError(f"{shown} has the dtype {str(dtype)[:20]!r}, which is not one of safetensors' numbers")
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                              for n in shape):
        raise HeaderError(f"{shown} has no shape of whole numbers in the header")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in offsets)):
        raise HeaderError(f"{shown} has no data offsets in the header")
    return Entry(dtype, shape, start + offsets[0], start + offsets[1])


def check_spans(entries: dict[str, Entry], start: int, n_bytes: int) -> None:
    """Each entry's bytes inside the file's data (from ``start`` to ``n_bytes``) and as many as its shape needs.
    Raises ``HeaderError``."""
    for name, entry in entries.items():
        size = math.prod(entry.shape) * DTYPES[entry.dtype].itemsize
        if not start <= entry.begin <= entry.end <= n_bytes or entry.end - entry.begin != size:
            raise HeaderError(f"{name[:60]}'s bytes ({entry.begin - start:,}–{entry.end - start:,}) do not fit its "
                              "shape and the file: the file is cut or damaged")


def tensors(data: bytes | bytearray, entries: dict[str, Entry]) -> dict[str, torch.Tensor]:
    """The tensors ``entries`` names, each copied out of ``data`` into memory of its own."""
    out = {}
    with warnings.catch_warnings():  # torch's note that a bytes object is not writable: it is only read, to copy
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        for name, entry in entries.items():
            dtype, count = entry.torch_dtype, math.prod(entry.shape)
            out[name] = (torch.frombuffer(data, dtype=dtype, count=count, offset=entry.begin).view(entry.shape).clone()
                         if count else torch.empty(entry.shape, dtype=dtype))
    return out


class File:
    """A safetensors file open for plain reads (``with File(path) as file``): its header read and checked at once,
    each tensor read when asked for (``tensor``), so a caller checks the header before any weight is read and holds
    one tensor's bytes at a time beside what it builds. ``unchanged`` compares the open file's size and modification
    time with those at opening: a file cut or written over meanwhile is refused, never used half-read (one renamed
    over it leaves this one whole, as it was when opened)."""

    def __init__(self, path: Path):
        self._file = open(path, "rb")
        try:
            self._stat = os.fstat(self._file.fileno())
            head = self._read(0, 8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
            if length <= min(self._stat.st_size - 8, MAX_HEADER_BYTES):
                head += self._read(8, length)
            self.metadata, self.entries, self.start = read_header(head, self._stat.st_size)
        except BaseException:
            self._file.close()
            raise

    def check_spans(self) -> None:
        """``check_spans`` for this file: after the caller's check of its names and shapes."""
        check_spans(self.entries, self.start, self._stat.st_size)

    def _read(self, offset: int, size: int) -> bytes:
        return os.pread(self._file.fileno(), size, offset)

    def tensor(self, name: str) -> torch.Tensor:
        """The tensor ``name``, read from the file now (its own memory: no view of anything the file maps)."""
        entry = self.entries[name]
        data = bytearray(entry.end - entry.begin)
        view, got = memoryview(data), 0
        while got < len(data):
            read = os.preadv(self._file.fileno(), [view[got:]], entry.begin + got)
            if not read:
                raise HeaderError("it was cut while it was read; open it again once it is written whole")
            got += read
        return tensors(data, {name: replace(entry, begin=0, end=len(data))})[name]

    def unchanged(self) -> None:
        """Raise ``HeaderError`` if the open file's size or modification time changed since it was opened."""
        now = os.fstat(self._file.fileno())
        if (now.st_size, now.st_mtime_ns) != (self._stat.st_size, self._stat.st_mtime_ns):
            raise HeaderError("it changed while it was read (written over on disk); open it again once it is "
                              "written whole")

    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()
