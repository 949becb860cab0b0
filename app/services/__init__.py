"""Use cases: each public method is one request of the protocol, built from domain rules and
storage queries inside short database transactions. Routers and the worker call these; they
never touch storage themselves."""
