"""The Flower app that ``flwr run`` submits: a ``pyproject.toml`` naming fedmc's ServerApp and
ClientApp and declaring the run configuration's keys (:mod:`fedmc.flower.settings`).

The app holds no code: the server host and every node install ``fedmc[flower]`` (the same
version), and Flower loads ``fedmc.flower.server_app:app`` and
``fedmc.flower.client_app:app`` from it.
"""

from __future__ import annotations

import json
from pathlib import Path

import fedmc
from fedmc.flower.settings import RUN_CONFIG_DEFAULTS


def _toml_value(value: object) -> str:
    """``value`` as TOML; a JSON object (the run's spec) as a multi-line literal string of
    indented JSON, which needs no escapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith("{") and "'''" not in value:
        return "'''\n" + json.dumps(json.loads(value), indent=2) + "\n'''"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def write_app(folder: Path) -> Path:
    """Write the app's ``pyproject.toml`` into ``folder``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = "\n".join(f"{key} = {_toml_value(value)}"
                       for key, value in RUN_CONFIG_DEFAULTS.items())
    (folder / "pyproject.toml").write_text(f"""\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "fedmc-federation"
version = "{fedmc.__version__}"
description = "Federated matrix completion with fedmc (the ServerApp and ClientApp of fedmc)"
license = "MIT"
dependencies = ["fedmc[flower]=={fedmc.__version__}"]

[tool.flwr.app]
publisher = "fedmc"

[tool.flwr.app.components]
serverapp = "fedmc.flower.server_app:app"
clientapp = "fedmc.flower.client_app:app"

[tool.flwr.app.config]
{config}
""")
    return folder


def write_run_config(path: Path, config: dict[str, object]) -> Path:
    """A TOML file of run configuration values, for ``flwr run --run-config PATH``."""
    path.write_text("".join(f"{key} = {_toml_value(value)}\n" for key, value in
                            config.items()))
    return path
