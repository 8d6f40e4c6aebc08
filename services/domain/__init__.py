"""The domain: pure rules and values, no database, no framework (statuses, limits, scoring, events)."""
