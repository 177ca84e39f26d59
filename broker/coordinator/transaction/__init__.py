"""The transaction coordinator (KIP-98): ``txn_state`` (pure), ``txn_coordinator`` (the shell)."""
