"""The domain: types, errors and the rules of producers and transactions.

Nothing here touches HTTP or SQL; storage and api depend on this package, never the reverse.
"""
