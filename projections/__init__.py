"""Read models built from match events: settlement, ledger, views, metrics."""
