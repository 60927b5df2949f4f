"""Lets ``pytest checks/`` run from a checkout: loads the plugin unless its installed entry point did."""

import importlib.metadata

if not any(ep.value == "preflight.plugin" for ep in importlib.metadata.entry_points(group="pytest11")):
    pytest_plugins = ["preflight.plugin"]
