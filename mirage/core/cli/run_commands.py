"""The ``core`` commands that treat runs as objects: list, show, label, compare, export and
delete them. Every command takes a run by its id, its name or a unique id prefix; bad
input is one ``error:`` line, exit status 2, and the store unchanged."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import typer
import yaml

from mirage.core.analysis import signature
from mirage.core.cli import rollout_view
from mirage.core.cli.common import DB_HELP, check_readable_store, fail, store_path
from mirage.core.config.nested import MISSING
from mirage.core.config.overrides import parse_value, split_pair
from mirage.core.errors import ConfigError
from mirage.core.store.export import FORMATS, export_runs
from mirage.core.store.file import WRITE_LOCK_TIMEOUT
from mirage.core.store.heartbeat import CRASHED, effective_status, liveness
from mirage.core.store.labels import check_label
from mirage.core.store.run_index import differences, find_run, matches, render_table, table_row
from mirage.core.store.run_store import STATUSES, RunStore

_DB = typer.Option(None, help=DB_HELP)
_RUN = typer.Argument(..., help="run id, name or unique id prefix")


def _store(db: Optional[Path]) -> RunStore:
    path = store_path(db)
    if not path.exists():
        fail(f"no run store at {path}")
    check_readable_store(path)
    # A run writing every step keeps taking the file; a command waits as long as a
    # writer would (WRITE_LOCK_TIMEOUT) rather than fail after a reader's 10 s.
    return RunStore(path, lock_timeout=WRITE_LOCK_TIMEOUT)


def _label(kind: str, value: str) -> None:
    try:
        check_label(kind, value)
    except ConfigError as error:
        fail(str(error))


def _resolve(store: RunStore, refs: list[str]) -> list[dict[str, Any]]:
    runs = store.list_runs()
    try:
        return [dict(find_run(runs, ref)) for ref in refs]
    except ConfigError as error:
        fail(str(error))


def _jsonable(run: dict[str, Any]) -> dict[str, Any]:
    return {**{k: v.isoformat() if isinstance(v, datetime) else v for k, v in run.items()},
            "status": effective_status(run), "stored_status": run["status"]}


def runs(
    where: list[str] = typer.Option([], "--where", help="config PATH=VALUE the run has (repeatable), e.g. filter.name=top_p"),
    status: Optional[str] = typer.Option(None, help=f"only runs with this status ({', '.join(sorted(STATUSES | {CRASHED}))})"),
    tag: list[str] = typer.Option([], "--tag", help="only runs with this tag (repeatable: all of them)"),
    experiment: Optional[str] = typer.Option(None, help="only runs of this registry experiment"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list of the runs (config included)"),
    db: Optional[Path] = _DB,
) -> None:
    """List runs, oldest first, with their effective status (a run whose process is gone is `crashed`)."""
    if status is not None and status not in STATUSES | {CRASHED}:
        fail(f"unknown status {status!r}; valid: {', '.join(sorted(STATUSES | {CRASHED}))}")
    for text in tag:
        _label("tag", text)
    if experiment is not None and not experiment.strip():
        fail("--experiment: empty; expected a registry experiment's name (core experiments)")
    try:
        wanted = {path: parse_value(path, raw, "--where")
                  for path, raw in (split_pair(pair, "--where") for pair in where)}
    except ConfigError as error:
        fail(str(error))
    chosen = [r for r in _store(db).list_runs()
              if matches(r, where=wanted, status=status, tags=tag, experiment=experiment)]
    if as_json:
        typer.echo(json.dumps([_jsonable(r) for r in chosen], indent=1, default=str))
    else:
        typer.echo(render_table([table_row(r) for r in chosen]))


def show(run: str = _RUN, as_json: bool = typer.Option(False, "--json", help="print it as JSON"),
         rollouts: Optional[int] = typer.Option(None, "--rollouts", metavar="STEP", help="also print the rollout turns stored at this step: reward, pictures, reasoning and action"),
         pictures: Optional[Path] = typer.Option(None, "--pictures", help="write the pictures of the stored turns (those of the --rollouts step, else all) into this folder as PNG files"),
         db: Optional[Path] = _DB) -> None:
    """A run's labels, status, reproducibility record, plugins, config, last metrics, events
    and stored rollouts (a turn of an image run names its picture)."""
    if rollouts is not None and rollouts < 0:
        fail(f"--rollouts: step {rollouts} is negative; expected a step the run stored rollouts at")
    if pictures is not None:
        _check_output_folder(pictures, "--pictures")
    store = _store(db)
    (row,) = _resolve(store, [run])
    run_id = row["run_id"]
    turns = store.rollouts(run_id)
    shown = _stored_turns(run_id, turns, rollouts)
    if pictures is not None and not any(t["images"] for t in shown):
        at = "" if rollouts is None else f" at step {rollouts}"
        fail(f"--pictures: run {run_id} stored no pictures{at} (its stored turns are text)"
             if turns else f"--pictures: run {run_id} stored no rollouts")
    names = sorted({name for _, name, _ in store.metrics(run_id)})
    last = store.final_metrics(run_id, names)
    events = store.events(run_id)
    regimes = signature.run_checks(store, run_id)
    written = [] if pictures is None else rollout_view.write_pictures(shown, pictures)
    if as_json:
        record = _jsonable(row) | {"last_metrics": last, "events": events,
                                   "regimes": [asdict(c) for c in regimes],
                                   "rollouts": rollout_view.summary(turns)}
        if rollouts is not None:
            record["rollout_turns"] = rollout_view.jsonable(shown)
        typer.echo(json.dumps(record, indent=1, default=str))
        for path in written:  # stdout stays one JSON document
            typer.echo(f"wrote {path}", err=True)
        return
    status = effective_status(row)
    lines = [f"run      {run_id}", f"name     {row.get('name') or '-'}",
             f"status   {status}" + (f" (stored: {row['status']}; {liveness(row)})" if status == CRASHED
                                      else f" ({liveness(row)})" if status == "running" else ""),
             f"tags     {', '.join(row['tags']) or '-'}", f"note     {row.get('note') or '-'}",
             f"labels   experiment {row.get('experiment') or '-'}, cell {row.get('cell') or '-'}",
             f"created  {row['created_at']:%Y-%m-%d %H:%M:%S} UTC; last step {row.get('last_step')}"]
    if row.get("error"):
        lines.append(f"error    {row['error']}")
    lines.append(f"git      {row.get('git_commit') or 'unknown'}")
    sections = {"environment": row["environment"] or "not recorded (a run from before schema 3)",
                "plugins": {p["name"]: p.get("version") for p in row["plugins"]},
                "config": row["config"], "last metrics": last}
    for title, body in sections.items():
        lines.append(f"{title}:")
        text = yaml.safe_dump(body, sort_keys=True, default_flow_style=False) if isinstance(body, dict) else f"{body}\n"
        lines += ["  " + line for line in text.rstrip("\n").splitlines()]
    lines.append(f"regime   {signature.describe(regimes)}")
    if regimes:
        lines.append(f"         ({signature.rule()})")
    lines.append("events:")
    lines += [f"  step {e['step']} {e['kind']}: {e['message']}" for e in events]
    lines.append(rollout_view.summary_line(turns))
    if rollouts is not None:
        lines += rollout_view.turn_lines(rollouts, shown)
    lines += [f"wrote {path}" for path in written]
    typer.echo("\n".join(lines))


def _check_output_folder(folder: Path, flag: str) -> None:
    """Refuse a folder to write that is empty or is a file."""
    if not str(folder) or str(folder) == ".":
        fail(f"{flag}: empty path; expected a folder to write into")
    if folder.exists() and not folder.is_dir():
        fail(f"{flag} {folder} is a file, not a folder")


def _stored_turns(run_id: str, turns: list[dict[str, Any]], step: Optional[int]) -> list[dict[str, Any]]:
    """The turns stored at ``step`` (all of them for None); refuses a step without any."""
    if step is None:
        return turns
    steps = rollout_view.stored_steps(turns)
    if step not in steps:
        fail(f"--rollouts: run {run_id} stored no rollouts at step {step}; "
             + (f"it stored them at steps {', '.join(map(str, steps))}" if steps else "it stored none"))
    return [t for t in turns if t["step"] == step]


def tag(run: str = _RUN, tags: list[str] = typer.Argument(..., help="tags to add"),
        db: Optional[Path] = _DB) -> None:
    """Add tags to a run."""
    for text in tags:
        _label("tag", text)
    store = _store(db)
    (row,) = _resolve(store, [run])
    store.update_run(row["run_id"], tags=list(dict.fromkeys(row["tags"] + tags)))
    typer.echo(f"{row['run_id']}: tags {', '.join(dict.fromkeys(row['tags'] + tags))}")


def untag(run: str = _RUN, tags: list[str] = typer.Argument(..., help="tags to remove"),
          db: Optional[Path] = _DB) -> None:
    """Remove tags from a run."""
    store = _store(db)
    (row,) = _resolve(store, [run])
    absent = [t for t in tags if t not in row["tags"]]
    if absent:
        fail(f"run {row['run_id']} has no tag {', '.join(map(repr, absent))}; "
             f"its tags: {', '.join(row['tags']) or 'none'}")
    kept = [t for t in row["tags"] if t not in tags]
    store.update_run(row["run_id"], tags=kept)
    typer.echo(f"{row['run_id']}: tags {', '.join(kept) or 'none'}")


def note(run: str = _RUN, text: str = typer.Argument(..., help="the note (\"\" clears it)"),
         db: Optional[Path] = _DB) -> None:
    """Set a run's free-text note."""
    if text:  # "" clears it
        _label("note", text)
    store = _store(db)
    (row,) = _resolve(store, [run])
    store.update_run(row["run_id"], note=text or None)
    typer.echo(f"{row['run_id']}: note {'set' if text else 'cleared'}")


def check_new_name(store: RunStore, name: str, run_id: str | None = None) -> None:
    """Refuse a name another run has, or one that is a run id (names must name one run)."""
    for other in store.list_runs():
        if other["run_id"] != run_id and name in (other.get("name"), other["run_id"]):
            fail(f"name {name!r} is taken by run {other['run_id']}")


def rename(run: str = _RUN, name: str = typer.Argument(..., help="the new name"),
           db: Optional[Path] = _DB) -> None:
    """Name a run (names are unique: `core show NAME` finds it)."""
    _label("name", name)
    store = _store(db)
    (row,) = _resolve(store, [run])
    check_new_name(store, name, row["run_id"])
    store.update_run(row["run_id"], name=name)
    typer.echo(f"{row['run_id']}: name {name}")


def delete(run: list[str] = typer.Argument(..., help="runs to delete"),
           yes: bool = typer.Option(False, "--yes", help="do not ask"), db: Optional[Path] = _DB) -> None:
    """Delete runs with all their rows and their checkpoints (checkpoints/RUN_ID beside the store)."""
    from mirage.core.run.checkpoints import checkpoint_root

    store = _store(db)
    rows = _resolve(store, run)
    live = [r["run_id"] for r in rows if effective_status(r) == "running"]
    if live:
        fail(f"run {', '.join(live)} is still running; stop it first")
    ids = list(dict.fromkeys(r["run_id"] for r in rows))
    if not yes:
        try:
            agreed = typer.confirm(f"delete {len(ids)} run(s) {', '.join(ids)} and their checkpoints?")
        except typer.Abort:  # no answer (end of input)
            agreed = False
        if not agreed:
            fail("nothing deleted")
    for run_id in ids:
        store.delete_run(run_id)
        shutil.rmtree(checkpoint_root(store, run_id), ignore_errors=True)
        typer.echo(f"deleted {run_id}")


def export(run: list[str] = typer.Argument(..., help="runs to export"),
           fmt: str = typer.Option("parquet", "--format", help=f"file format: {', '.join(FORMATS)}"),
           out: Path = typer.Option(Path("export"), help="folder for runs.EXT, metrics.EXT and rollouts.EXT"),
           db: Optional[Path] = _DB) -> None:
    """Write runs' rows, their metrics (long format: run_id, step, name, value) and their
    stored rollout turns (pictures included) to files."""
    if fmt not in FORMATS:
        fail(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    if not str(out) or str(out) == ".":
        fail("--out: empty path; expected a folder for the exported files, e.g. export")
    if out.exists() and not out.is_dir():
        fail(f"--out {out} is a file, not a folder")
    store = _store(db)
    ids = list(dict.fromkeys(r["run_id"] for r in _resolve(store, run)))
    for path in export_runs(store.path, ids, out, fmt):
        typer.echo(f"wrote {path}")


def diff(left: str = _RUN, right: str = _RUN, db: Optional[Path] = _DB) -> None:
    """What differs between two runs: config, environment record, last metrics."""
    store = _store(db)
    a, b = _resolve(store, [left, right])
    typer.echo(f"--- {a['run_id']}\n+++ {b['run_id']}")

    def shown(value: Any) -> str:
        return "(absent)" if value is MISSING else json.dumps(value, default=str)

    finals = []
    for row in (a, b):
        names = sorted({name for _, name, _ in store.metrics(row["run_id"])})
        finals.append(store.final_metrics(row["run_id"], names))
    for title, pair in (("config", (a["config"], b["config"])),
                        ("environment", (a["environment"], b["environment"])),
                        ("last metrics", tuple(finals))):
        found = differences(*pair)
        typer.echo(f"{title}: {'same' if not found else ''}".rstrip())
        for path, x, y in found:
            typer.echo(f"  {path}: {shown(x)} -> {shown(y)}")


def register(app: typer.Typer) -> None:
    for command in (runs, show, tag, untag, note, rename, delete, export, diff):
        app.command()(command)
