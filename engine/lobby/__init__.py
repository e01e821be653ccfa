"""The lobby as aggregates (issue 34): placeholder, rewritten below."""
