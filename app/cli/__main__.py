"""`python -m app.cli`: the `outbox` command."""

import sys

from app.cli import main

sys.exit(main())
