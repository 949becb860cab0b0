"""A migration's refusal to run on the data stored: what every migration raises when it must
not go on (a downgrade to a revision that cannot hold what is stored), and what
`outbox migrate` tells apart from a failure.

Here, beside the migrations, and importing nothing: a migration must not depend on
application code, which may change after it."""

from __future__ import annotations


class MigrationRefused(RuntimeError):
    """The migration did nothing, and says what to change before it can run. A RuntimeError, as
    these refusals were before they had a class of their own: code that caught them so still
    does."""
