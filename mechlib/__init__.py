"""mechlib: the mathematics behind Addition Machines, importable from a notebook (no Streamlit).

Importing it applies the device and precision policy once (see ``mechlib.device``).
"""

from mechlib import device  # noqa: F401  (sets device, IEEE float32 matmuls and thread count once)

__version__ = "0.1.0"
