"""Shared test settings: the project root on sys.path, and paths the tiers use."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
