"""mechlib is the notebook library: importing it, and every module in it, loads no Streamlit and nothing of the
app's (classroom/: the store, the training queue and its workers, the glossary, the lesson path)."""

import subprocess
import sys

import mechlib


def test_every_mechlib_module_imports_without_the_app_or_streamlit():
    code = ("import sys, importlib, mechlib\n"
            "for name in mechlib.MODULES: importlib.import_module(f'mechlib.{name}')\n"
            "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('streamlit', 'classroom')}))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert found == "[]"
    assert not {"store", "workers", "glossary"} & set(mechlib.MODULES)
