"""compat/librdkafka/run, a script (no .py), loaded as a module for the tests of its own logic;
loading it runs nothing (it re-executes itself in the project's virtualenv only as a program)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

RUN = Path(__file__).resolve().parents[1] / "compat" / "librdkafka" / "run"


def load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("librdkafka_run", str(RUN))
    run = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    sys.modules[loader.name] = run  # its dataclasses look their module up there
    loader.exec_module(run)
    return run
