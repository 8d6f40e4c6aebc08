"""The domain: pure rules and values, no database, no framework (statuses, limits, scoring, events);
it imports only the configuration (config/) below it."""
