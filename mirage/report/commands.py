"""``core report``: render docs/reproduction.md from the study's results. A built-in
command plugin (listed in :mod:`mirage.builtins`): the ``core`` program asks it for its
command through ``mirage_register_commands``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from mirage.core.cli.common import check_readable_store, fail
from mirage.core.plugin_api.hookspecs import hookimpl


def report(
    results: Optional[Path] = typer.Option(
        None, help="exported study (Parquet) [default: ./results/reproduction, else the study "
        "shipped with the package]"),
    out: Path = typer.Option(Path("docs/reproduction.md"), help="the report to write"),
    figures: Path = typer.Option(Path("docs/img/reproduction"), help="folder for its figures"),
    notes: Path = typer.Option(Path("results/reproduction.notes.yaml"), help="the researcher's reading of each verdict"),
    from_store: Optional[list[Path]] = typer.Option(None, help="first export the finished runs of the --experiment experiments from this store into --results (repeatable: several stores are merged)"),
    experiment: Optional[list[str]] = typer.Option(None, help="with --from-store: a registry experiment to export (repeatable; default: every study experiment the report reads, those present: the reproduction studies, the collapse and template-collapse calibrations and studies, collapse_gradients)"),
    restore: Optional[Path] = typer.Option(None, help="only rebuild a run store at this new path from --results (for `core app --db`)"),
) -> None:
    """Render docs/reproduction.md (tables, figures, verdicts) from the committed study results."""
    from mirage.report.render import build_report
    from mirage.report.results import (
        STUDY_EXPERIMENTS, STUDY_RESULTS, default_results, export_study, restore_study,
    )

    if restore is None:
        _check_outputs(out, figures, notes)
    if restore is not None:
        results = results or default_results()
        try:
            restore_study(results, restore)
        except (FileNotFoundError, FileExistsError) as error:
            fail(str(error))
        typer.echo(f"restored {results} into {restore}")
        return
    if from_store:
        results = results or STUDY_RESULTS  # the export goes where a checkout keeps it
        for store in from_store:
            check_readable_store(store, "--from-store")
        try:
            counts = export_study(from_store, results, experiment or STUDY_EXPERIMENTS)
        except ValueError as error:
            fail(str(error))
        typer.echo(f"exported {sum(counts.values())} runs to {results} ("
                   + ", ".join(f"{name}: {count}" for name, count in counts.items()) + ")")
    results = results or default_results()
    if not (results / "runs.parquet").exists():
        fail(f"{results} holds no exported study; run the study and pass --from-store")
    findings = build_report(results, out, figures, notes)
    for finding in findings:
        typer.echo(f"finding {finding.key}: {finding.verdict}")
    typer.echo(f"wrote {out} and its figures in {figures}")


def _check_outputs(out: Path, figures: Path, notes: Path) -> None:
    """Refuse bad --out, --figures and --notes before anything is rendered or written."""
    import yaml

    from mirage.core.config.paths import read_text_file
    from mirage.core.errors import ConfigError

    for flag, path, folder in (("--out", out, False), ("--figures", figures, True)):
        if not str(path) or str(path) == ".":
            fail(f"{flag}: empty path")
        if path.exists() and path.is_dir() != folder:
            fail(f"{flag} {str(path)!r} is {'a file' if folder else 'a directory'}; expected "
                 f"{'a folder' if folder else 'a file'}")
    if not str(notes) or notes.exists():  # the notes are optional: a missing file is none
        try:
            readings = yaml.safe_load(read_text_file(notes, "--notes")) or {}
        except ConfigError as error:
            fail(str(error))
        except yaml.YAMLError as error:
            fail(f"--notes {str(notes)!r}: not valid YAML ({str(error).splitlines()[0]})")
        if not isinstance(readings, dict):
            fail(f"--notes {str(notes)!r}: expected a mapping of finding keys to readings")


@hookimpl
def mirage_register_commands(cli: typer.Typer) -> None:
    cli.command()(report)
