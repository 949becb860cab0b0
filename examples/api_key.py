"""How the examples take the service's API key (authentication on: README, "Authentication and
ACLs"), and the line that says how to give it when the service refuses the call without one."""

from __future__ import annotations

import argparse
import os

from app.client import AuthenticationError

API_KEY_VARIABLE = "OUTBOX_API_KEY"


def add_api_key_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api-key", default=os.environ.get(API_KEY_VARIABLE),
                        help=f"with authentication on: the principal's API key (default: ${API_KEY_VARIABLE})")


def refused_line(error: AuthenticationError, api_key: str | None) -> str:
    """One line for a 401: the service's reason, and what to do about it."""
    if api_key is None:
        how = (f"give this example its principal's API key with --api-key KEY or {API_KEY_VARIABLE}=KEY "
               f"(`outbox principals create NAME` makes one)")
    else:
        how = f"the API key given (--api-key or {API_KEY_VARIABLE}) was refused: check it, or make another"
    return f"{error}; {how}"
