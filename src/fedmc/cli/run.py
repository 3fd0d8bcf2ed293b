"""``fedmc run``: train one algorithm on one data set and write the run's folder."""

from __future__ import annotations

import os
from typing import Any, Literal, cast

from fedmc.cli.display import err, progress, scale_facts, summary_table, warning_lines
from fedmc.cli.options import OPTIONS, resolved_run, with_options


@with_options(*OPTIONS)  # every declared option
def run(**typed: Any) -> None:
    """Train one algorithm on one data set and write config.json, history.csv, summary.json.

    With no options: FedMC-ADMM on the embedded synthetic data, offline, in seconds.
    """
    spec = resolved_run(typed)  # options refused before the run's machinery is imported
    from fedmc.cli.interrupts import in_worker, interrupt_marks
    from fedmc.federation.history import History
    from fedmc.run.folder import RunFolder
    from fedmc.run.precompile import compile_in_background
    from fedmc.run.runner import execute, write_outputs

    label = f"{spec.algorithm} on {spec.data.source}"
    folder = RunFolder(typed["out_dir"], f"{spec.algorithm}-{spec.data.source}",
                       typed["overwrite"])
    target = folder.claim()
    rows: list[dict[str, Any]] = []  # the history so far, kept if the run is interrupted

    def record(k: int, row: dict | None) -> None:
        if row is not None:
            rows.append(dict(row))
        if shown is not None:
            shown(k, row)

    # the rounds done when a signal comes (the worker may still be adding one)
    partial = {"history.csv": lambda: History(list(rows)).csv_text() if rows else None}
    with interrupt_marks(folder, partial):
        with progress(typed["quiet"], spec.schedule.rounds, label) as shown, warning_lines():
            result = in_worker(lambda: execute(  # this thread hears the signals meanwhile
                spec, callback=record, progress_download=not typed["quiet"],
                kernels=cast(Literal["specialized", "auto"],
                             os.environ.get("FEDMC_KERNELS", "auto"))))
        write_outputs(target, result)
    if result.config["kernels"] == "generic":
        compile_in_background(spec.algorithm, result.config["params"],
                              spec.data.one_user)
    if not typed["quiet"]:
        summary_table(result.summary, label, scale_facts(result.config["data"]))
    model_files = ", model.npz, model.json" if result.artifact is not None else ""
    validation = ", validation_history.csv" if result.validation_history is not None else ""
    err.print(f"wrote {target}/config.json, history.csv, summary.json{validation}{model_files}",
              soft_wrap=True)
