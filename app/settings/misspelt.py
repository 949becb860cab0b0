"""OUTBOX_ variables that are no setting but look like one misspelt: named in a WARNING by every
entry point that reads the settings (`outbox` commands, `uvicorn app.main`)."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping

from app.settings import Settings

# How near (difflib's ratio, 0 to 1) a variable's name must be to a setting's to be taken for it
# misspelt: OUTBOX_FETCH_MAX_WAIT is 0.93 from OUTBOX_FETCH_MAX_WAIT_MS, OUTBOX_LOGLEVEL 0.97 from
# OUTBOX_LOG_LEVEL; the project's other variables (OUTBOX_URL, OUTBOX_API_KEY, OUTBOX_SPARK_*)
# are at most 0.76 from any setting's.
MISSPELT_RATIO = 0.8


def misspelt_settings(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The OUTBOX_ variables of `environ` that are no setting but are so near a setting's name
    that they are likely it misspelt, each with that setting's variable, in the order found.
    pydantic-settings ignores a variable it does not know (other tools' OUTBOX_ variables, the
    admin commands' OUTBOX_URL, are no settings), so a misspelt one would leave its setting at
    the default without a word."""
    names = [f"OUTBOX_{name.upper()}" for name in Settings.model_fields]
    found = []
    for variable in environ:
        upper = variable.upper()
        if not upper.startswith("OUTBOX_") or upper in names:
            continue
        near = difflib.get_close_matches(upper, names, n=1, cutoff=MISSPELT_RATIO)
        if near:
            found.append((variable, near[0]))
    return found


def warn_of_misspelt_settings(environ: Mapping[str, str], logger: logging.Logger) -> None:
    """A WARNING for each variable of `environ` misspelt_settings finds, once the log is
    configured: the process would otherwise run with the setting meant at its default."""
    for variable, setting in misspelt_settings(environ):
        logger.warning("%s is no setting, and is ignored: %s misspelt?", variable, setting)
