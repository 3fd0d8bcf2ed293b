"""``fedmc federate``: a real federation on Flower (``fedmc[flower]``).

``split`` writes the files a deployment hands out, ``local`` runs a whole deployment on this
machine (a SuperLink and one SuperNode per client, separate processes); across machines,
``certs`` makes the deployment's keys, certificates and roster, ``server`` runs the
SuperLink the safe way (:mod:`fedmc.deploy.server`) and ``node`` serves one client to it.
``split`` and ``local`` take ``fedmc run``'s data, run and algorithm options (declared once,
:mod:`fedmc.cli.options`). See ``docs/federation.md``.
"""

from __future__ import annotations

import inspect
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from fedmc.cli.display import progress, summary_table
from fedmc.cli.options import OPTIONS, resolved_run, with_options
from fedmc.errors import ConfigError
from fedmc.federation.defaults import GROWTH
from fedmc.flower.defaults import MAX_LOST_ROUNDS, NODE_CPUS, REPLY_TIMEOUT

federate_app = typer.Typer(no_args_is_help=True, add_completion=False,
                           pretty_exceptions_enable=False)
FLOWER = "Federation"
# fedmc run's options a federation does not take: its own --out, a split given as two files,
# the ranking evaluation and saving the user factors (they stay on the nodes; fedmc evaluate
# ranks with the published model); refit (a federation that stops early publishes its best
# round's model: RunSpec.without_refit)
RUN_ONLY = ("out_dir", "train", "test", "ranking_k", "save_user_factors", "refit", "backend",
            "workers", "ray_address")  # where a simulation's clients live: not a federation's
SPLIT_OPTIONS = tuple(name for name in OPTIONS if name not in (*RUN_ONLY, "overwrite", "quiet"))
"""``split`` takes the run's options too: ``run.toml`` holds the run they resolve to."""
NOTED = ("refused", "failed", "timed out", "skipped", "claim refused")  # told on stderr
PLAIN_MODE = ("note: plain mode (no --secagg): the server process receives every client's "
              "upload{clipped}; {guarantee} --secagg has the server see only sums "
              "(docs/privacy.md)")
"""What ``fedmc federate local`` says when it starts a federation without SecAgg+."""


def register(app: typer.Typer) -> None:
    """Add ``fedmc federate`` to ``app``."""
    app.add_typer(federate_app, name="federate",
                  help="A real federation on Flower: split the data, run a local deployment; "
                       "across machines, make the certificates, run the server, serve a node.")


def _option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=default)


@federate_app.command("split")
@with_options(*SPLIT_OPTIONS, extra=(_option("out", Annotated[Path, typer.Option(
    "--out", help="Folder for the files.")], inspect.Parameter.empty),))
def split(**typed: Any) -> None:
    """Write one ratings file per client (and its held-out ratings), the manifest, and
    the Flower app with a run configuration (run.toml: the run the options resolve to, as
    fedmc run and fedmc federate local resolve them): the files a real deployment hands out."""
    run = resolved_run(typed).without_refit()  # refused before Flower is imported
    out = typed["out"].resolve()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file: give the folder to write the files in")
    from fedmc.deploy.app import write_app, write_run_config
    from fedmc.deploy.split import write_split
    from fedmc.flower.settings import FederatedRun

    manifest = write_split(run.data, out)
    write_app(out / "app")
    federated = FederatedRun(spec=run, manifest=out / "manifest.json")
    write_run_config(out / "run.toml", federated.run_config())
    typer.echo(f"wrote {out}/manifest.json, {manifest.n_clients} clients' files under "
               f"{out}/clients, the app in {out}/app and {out}/run.toml", err=True)


_LOCAL_EXTRAS = (
    _option("out_dir", Annotated[Path | None, typer.Option(
        "--out", help="Output folder (default runs/<time>-<algorithm>-<data>-federated); "
        "locked while the run lasts.")], None),
    _option("secagg", Annotated[bool, typer.Option(
        "--secagg", help="Sum every upload and evaluation with SecAgg+ (with --dp-*, the "
        "clients add integer Skellam noise shares inside the secure sum: distributed DP).",
        rich_help_panel=FLOWER)], False),
    _option("timeout", Annotated[float | None, typer.Option(
        help=f"Seconds to wait for the replies of one exchange (default {REPLY_TIMEOUT:g}).",
        rich_help_panel=FLOWER)], None),
    _option("max_upload_norm", Annotated[float | None, typer.Option(
        min=0.0, help="A bound on the L2 norm of one client's whole upload: clients clip to it "
        "(as to --dp-clip), the server refuses a plain upload above it; 0: none (default: "
        f"auto, the server refuses a plain upload above {GROWTH:g} times its phase's typical "
        "norm; "
        "docs/federation.md).",
        rich_help_panel=FLOWER)], None),
    _option("max_lost_rounds", Annotated[int | None, typer.Option(
        min=1, help="Stop the run after this many exchanges in a row that lose every client "
        f"(default {MAX_LOST_ROUNDS}).", rich_help_panel=FLOWER)], None),
    _option("stock_nodes", Annotated[bool, typer.Option(
        "--stock-nodes", help="Flower's flower-supernode (a ClientApp process per message) "
        "instead of fedmc federate node.", rich_help_panel=FLOWER)], False),
    _option("simulation", Annotated[bool, typer.Option(
        "--simulation", help="Flower's simulation engine instead of processes: one virtual "
        "SuperNode per client, their ClientApps in Ray actors (needs fedmc[ray]; "
        "docs/federation.md).", rich_help_panel=FLOWER)], False),
    _option("node_cpus", Annotated[float | None, typer.Option(
        min=0.01, help="With --simulation: Ray's CPUs a virtual SuperNode takes while it "
        f"answers (default {NODE_CPUS:g}: as many nodes at once as CPUs).",
        rich_help_panel=FLOWER)], None),
    _option("work", Annotated[Path | None, typer.Option(
        help="Keep the deployment's files (split, logs, node state) here; default: a "
        "temporary folder, removed.", rich_help_panel=FLOWER)], None),
)


@federate_app.command("local")
@with_options(*(name for name in OPTIONS if name not in RUN_ONLY), extra=_LOCAL_EXTRAS)
def local(**typed: Any) -> None:
    """Train with a real deployment on this machine: a SuperLink and one SuperNode per
    client as separate processes (or, with ``--simulation``, Flower's simulation engine: one
    virtual SuperNode per client); writes config.json, history.csv, summary.json,
    model.npz and progress.jsonl.

    As ``fedmc run``, the settings are checked and the output folder claimed (checked,
    locked, an earlier run refused or, with ``--overwrite``, removed) before anything starts;
    the deployment checks the rest against the data before its first process starts.
    """
    spec = resolved_run(typed).without_refit()  # refused before Flower is imported
    if typed["simulation"] and typed["stock_nodes"]:
        raise ConfigError("--stock-nodes starts node processes; --simulation has none: "
                          "give one of them")
    if typed["node_cpus"] is not None and not typed["simulation"]:
        raise ConfigError("--node-cpus sets Ray's CPUs of a virtual SuperNode: it needs "
                          "--simulation")
    if typed["simulation"]:  # before the out folder is claimed
        from fedmc.sim.ray_shards import require_ray

        require_ray("--simulation")
    from fedmc.cli.interrupts import interrupt_marks
    from fedmc.deploy.local import run_local
    from fedmc.flower.out_folder import CHECKPOINT, RUN_FILES
    from fedmc.flower.settings import FederatedRun
    from fedmc.run.folder import RunFolder

    given = {name: typed[name] for name in ("timeout", "max_upload_norm", "max_lost_rounds")
             if typed[name] is not None}
    run = FederatedRun(spec=spec, secagg=typed["secagg"], **given)
    run.config()  # the settings that need no data, before anything is written
    name = f"{spec.algorithm}-{spec.data.source}-federated"
    folder = RunFolder(typed["out_dir"], name, typed["overwrite"], RUN_FILES)
    out = folder.claim()
    if not run.secagg and not typed["quiet"]:  # said as the federation starts
        dp = spec.schedule.dp
        promised = (" (--dp-epsilon is promised against the server only with --secagg)"
                    if dp is not None and dp.epsilon is not None and dp.against == "server"
                    else "")
        typer.echo(PLAIN_MODE.format(
            clipped=" (clipped, before any noise)" if dp else "",
            guarantee="the DP guarantee holds against those who read the published run, "
                      f"not against the server, which must be trusted{promised};" if dp else
                      "it must be trusted with them;"), err=True)
    run = run.model_copy(update={"out": out})
    label = f"{spec.algorithm} on {spec.data.source}, federated"
    work = typed["work"] or Path(tempfile.mkdtemp(prefix="fedmc-federate-"))
    try:
        with interrupt_marks(folder):
            work.mkdir(parents=True, exist_ok=True)
            try:
                with progress(typed["quiet"], spec.schedule.rounds, label) as callback:
                    if typed["simulation"]:
                        from fedmc.deploy.simulation import run_simulated

                        run_simulated(run, spec.data, work, typed["node_cpus"] or NODE_CPUS,
                                      lambda event: _report(event, callback))
                    else:
                        run_local(run, spec.data, work, typed["stock_nodes"],
                                  lambda event, _: _report(event, callback))
            finally:  # its deployment is gone: nothing could resume from it
                (out / CHECKPOINT).unlink(missing_ok=True)
    finally:
        if typed["work"] is None:
            shutil.rmtree(work, ignore_errors=True)
    if not typed["quiet"]:
        summary_table(json.loads((out / "summary.json").read_text()), label)
    typer.echo(f"wrote {out}/config.json, history.csv, summary.json, model.npz", err=True)


def _report(event: dict[str, Any], callback: Callable[[int, dict | None], None] | None,
            ) -> None:
    """Show a round's row on the progress bar; tell what happened to clients on stderr."""
    if event["event"] == "round" and callback is not None:
        callback(event["round"], event["row"])
    elif event["event"] in NOTED:
        why = event.get("reason", "why is withheld (a private run)")
        sys.stderr.write(f"fedmc: round {event['round']}, exchange {event['exchange']}: "
                         f"{event['event']}: {why}\n")


NODE_CONFIG_HELP = (
    "This client's settings, space-separated KEY=VALUE pairs: client=ID (its id, 0..p-1), "
    "manifest=\"PATH\" (the federation's manifest.json), ratings=\"PATH\" (its training "
    "ratings; for Boolean data its rows of ones), test=\"PATH\" (optional: its held-out "
    "ratings, or its rows of the signal), validation=\"PATH\" (optional: its validation "
    "cut, for early stopping), columns=\"user,item,rating\" (optional: the "
    "ratings files' column names), state=\"DIR\" (its private state, kept across restarts). "
    "Checked at start: a problem exits 2 naming it.")


@federate_app.command("node")
def node(
    superlink: Annotated[str, typer.Option(help="The SuperLink's Fleet API, HOST:PORT.")],
    node_config: Annotated[str, typer.Option(help=NODE_CONFIG_HELP)],
    root_certificates: Annotated[Path | None, typer.Option(
        help="CA certificate of the SuperLink's TLS certificate (TLS; or --insecure).")]
        = None,
    insecure: Annotated[bool, typer.Option(
        "--insecure", help="Speak to the SuperLink without TLS (a SuperLink on this host "
        "only: without TLS a node's signed requests can be read and replayed).")] = False,
    auth_key: Annotated[Path | None, typer.Option(
        help="This node's private key (OpenSSH, EC) for SuperNode authentication.")] = None,
    poll: Annotated[float, typer.Option(help="Seconds between polls once the next message is "
                                        "due (before that the node stays quiet for most of "
                                        "the usual gap between messages; the interval grows "
                                        "while idle).")] = 0.1,
) -> None:
    """Serve one client to a SuperLink, its ClientApp kept in this process. The node outlives
    runs and restarts: when a run is stopped, the SuperLink restarts or the connection is
    lost, it logs why and reconnects with backoff."""
    from fedmc.deploy.node import load_auth_key, run_node
    from fedmc.flower.client_app import NodeSettings

    NodeSettings.parse(node_config).check()
    if auth_key is not None:
        load_auth_key(auth_key)
    if root_certificates is not None and not root_certificates.is_file():
        raise ConfigError(f"{root_certificates}: no such file (--root-certificates)")
    if root_certificates is not None and insecure:
        raise ConfigError("--root-certificates and --insecure: choose one (TLS or not)")
    if root_certificates is None and not insecure:
        raise ConfigError("no --root-certificates: a node speaks TLS to its SuperLink "
                          "(give the CA certificate, or --insecure for a SuperLink without "
                          "TLS)")
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    run_node(superlink, node_config, root_certificates=root_certificates,
             auth_key=auth_key, poll=poll)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


@federate_app.command("certs")
def certs(
    out: Annotated[Path, typer.Option(help="Folder for the keys, certificates and roster.")],
    clients: Annotated[int, typer.Option(help="Number of clients p: a key pair for each of "
                                         "0..p-1.")],
    name: Annotated[list[str] | None, typer.Option(
        help="A DNS name or IP address the nodes use to reach the SuperLink (repeat for "
        "several); the loopback (127.0.0.1, localhost) is always added.")] = None,
    node_key: Annotated[list[str] | None, typer.Option(
        help="C=FILE: client C made its own key pair (ssh-keygen -t ecdsa -b 384); its "
        "public key FILE goes into the roster and no private key is written for C.")] = None,
    days: Annotated[int, typer.Option(help="Days the certificates are valid.")] = 365,
    overwrite: Annotated[bool, typer.Option(help="Replace the files of an earlier call.")]
        = False,
) -> None:
    """Make a deployment's CA, the SuperLink's TLS certificate, one authentication key pair
    per node and the roster (which key speaks for which client)."""
    from fedmc.deploy.certs import write_certs

    write_certs(out, clients, name or [], days, _node_keys(node_key or []), overwrite)
    typer.echo(f"wrote {out}/ca.crt, ca.key (keep offline), server.pem, server.key, "
               f"roster.json and client-C, client-C.pub per node", err=True)


def _node_keys(items: list[str]) -> dict[int, Path]:
    keys: dict[int, Path] = {}
    for item in items:
        client, sep, path = item.partition("=")
        if not sep or not client.strip().isdigit() or not path:
            raise ConfigError(f"--node-key {item!r}: expected C=FILE (a client id and a "
                              f"public key file)")
        if int(client) in keys:
            raise ConfigError(f"--node-key: client {int(client)} given twice")
        keys[int(client)] = Path(path)
    return keys


@federate_app.command("server")
def server(
    certs: Annotated[Path, typer.Option(help="The folder of fedmc federate certs (ca.crt, "
                                        "server.pem, server.key, roster.json).")],
    host: Annotated[str, typer.Option(help="Address of the Fleet API, the only API served "
                                      "to the network (0.0.0.0: every interface).")]
        = "0.0.0.0",
    port: Annotated[int, typer.Option(help="Port of the Fleet API (the nodes' --superlink).")]
        = 9092,
    control_port: Annotated[int, typer.Option(help="Port of the Control and Runtime APIs, on "
                                              "127.0.0.1 only (flwr run, ls, stop, log).")]
        = 9093,
    database: Annotated[Path, typer.Option(help="The SuperLink's state (runs, registered "
                                           "nodes), kept across restarts.")]
        = Path("superlink.db"),
    runs: Annotated[Path, typer.Option(help="The folder a run's relative out and manifest "
                                       "paths are taken in (default: this folder).")]
        = Path(),
) -> None:
    """Run a SuperLink for a deployment across machines: TLS, SuperNode authentication with
    the roster's keys, state on disk, no runtime dependency installation; the network reaches
    only the Fleet API, the Control API answers on this host only."""
    from fedmc.deploy.server import Certificates, serve

    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # after a graceful stop: status 0
    serve(Certificates.in_folder(certs), host, port, control_port, database,
          announce=lambda line: typer.echo(line, err=True), runs=runs)


@federate_app.command("resume")
def resume(
    out: Annotated[Path, typer.Argument(help="The run's out folder on the server host, where "
                                        "its checkpoint is.")],
    app_dir: Annotated[Path, typer.Option("--app", help="The Flower app (fedmc federate split "
                                          "writes it as SPLIT/app).")],
    connection: Annotated[str, typer.Option(help="The SuperLink connection of flwr run (its "
                                            "Control API, on the server host).")],
) -> None:
    """Resume a federated run after a crash of its SuperLink or ServerApp: submit it again from
    the checkpoint the server wrote after its last completed round (the nodes keep their
    committed states under the run's key); the result is the uninterrupted run's."""
    from fedmc.deploy.app import write_run_config
    from fedmc.flower.checkpoints import stored_run_config
    from fedmc.flower.out_folder import CHECKPOINT

    config = {**stored_run_config(out / CHECKPOINT), "resume": True}
    with tempfile.TemporaryDirectory(prefix="fedmc-resume-") as tmp:  # not in the run folder
        toml = write_run_config(Path(tmp) / "resume.toml", config)
        done = subprocess.run(["flwr", "run", str(app_dir), connection, "--run-config",
                               str(toml)], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ConfigError(f"flwr run failed: {' '.join((done.stderr or done.stdout).split())}")
    typer.echo(done.stdout.strip(), err=True)
