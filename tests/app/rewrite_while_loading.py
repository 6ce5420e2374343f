"""The models folder's weights written over while they load, as ``cp new.safetensors folder/gpt2/model.safetensors``
does (it truncates the file, then writes it): ``python -m tests.app.rewrite_while_loading DIRECTORY LOADS``.

One thread writes the directory's ``model.safetensors`` over and over, truncating it first and leaving it whole for
0.1 s each time; the main thread loads the directory ``LOADS`` times meanwhile. Read through a mapping (safetensors'
``safe_open``), 200 loads of a 15 MB model died of SIGBUS in 4 runs of 4. Prints "loaded N refused M" and exits 0 when every load either read the
model whole or was refused with ``HFError``: a process killed by the fault of a mapped file cut underneath (SIGBUS)
exits with -7 instead. Run in a process of its own so that such a fault cannot take the test runner with it."""

import sys
import threading
from pathlib import Path

from mechlib import hf


def main(directory: Path, loads: int) -> None:
    weights = directory / "model.safetensors"
    original = weights.read_bytes()
    stop = threading.Event()

    def rewrite() -> None:
        while not stop.is_set():
            with open(weights, "wb") as file:  # truncated to 0 bytes here, then written 64 kB at a time
                for start in range(0, len(original), 1 << 16):
                    file.write(original[start : start + (1 << 16)])
                    file.flush()
            stop.wait(0.1)  # whole for a moment: a load opens it whole, and the next write cuts it under the load

    writer = threading.Thread(target=rewrite)
    writer.start()
    loaded = refused = 0
    try:
        for _ in range(loads):
            try:
                hf.from_transformers(directory)
                loaded += 1
            except hf.HFError:
                refused += 1
    finally:
        stop.set()
        writer.join()
    print(f"loaded {loaded} refused {refused}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
