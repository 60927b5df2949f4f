"""The checks of a ``preflight rehearse`` session (never collected by a plain ``preflight`` run)."""
