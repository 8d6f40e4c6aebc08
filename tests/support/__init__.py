"""The tests' shared scaffolding, one copy of each piece: imported as `tests.support.NAME`
(the project root is on the path: `python -m pytest`, and pytest's `pythonpath`)."""
