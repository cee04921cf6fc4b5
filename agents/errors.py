"""User-facing errors: each names the bad key, file or task; the CLI prints them and exits 2."""


class CellbenchError(Exception):
    """A user-facing error: bad config key, unknown task, corrupt trace. Printed, exit 2."""
