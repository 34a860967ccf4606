"""Checks of the paths a user names (``--db``, ``--config``, a registry, ``--model``)
before any work starts: each bad path is one ConfigError line, and nothing is created
or changed by the check itself (so the store stays byte-identical after a refusal)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mirage.core.errors import ConfigError

# A DuckDB database file carries this magic at bytes 8-11 of its header.
DUCKDB_MAGIC = b"DUCK"
_MAGIC_AT = 8


def read_text_file(path: Path, what: str) -> str:
    """The UTF-8 text of ``path``; ConfigError if it is missing, not a file, unreadable
    or not UTF-8. ``what`` names the option in the message, e.g. ``--config``."""
    if not str(path):
        raise ConfigError(f"{what}: empty path")
    if not path.exists():
        raise ConfigError(f"{what} file {str(path)!r} does not exist")
    if not path.is_file():
        raise ConfigError(f"{what} {str(path)!r} is not a file")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"{what} {str(path)!r} cannot be read: {error.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{what} {str(path)!r} is not UTF-8 text (byte {error.start})") from None


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def _can_create_in(directory: Path) -> bool:
    """Whether a file can be created in ``directory``: tried, not guessed (``os.access``
    says yes to root on read-only mounts and pseudo file systems)."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            return True
    except OSError:
        return False


def check_store_path(path: Path, flag: str = "--db", *, write: bool = True) -> None:
    """Refuse a store path that is empty, a directory, a file that is not a DuckDB
    database, unreadable, or (with ``write``) in a place where it cannot be written or
    created. A missing file is fine when it can be created (its folders too)."""
    text = str(path)
    if not text or text == ".":
        raise ConfigError(f"{flag}: empty path; expected a DuckDB file such as runs/mirage.duckdb")
    if path.is_dir():
        raise ConfigError(f"{flag} {text!r} is a directory; expected a DuckDB file")
    if path.exists():
        if not path.is_file():
            raise ConfigError(f"{flag} {text!r} is not a regular file")
        try:
            with path.open("rb") as handle:
                header = handle.read(_MAGIC_AT + len(DUCKDB_MAGIC))
        except OSError as error:
            raise ConfigError(f"{flag} {text!r} cannot be read: {error.strerror}") from None
        if header[_MAGIC_AT:] != DUCKDB_MAGIC:
            raise ConfigError(f"{flag} {text!r} is not a DuckDB database file")
        if write and not (os.access(path, os.W_OK) and _can_create_in(path.parent)):
            # DuckDB writes a .wal file beside the database, so the folder must be writable.
            raise ConfigError(f"{flag} {text!r} cannot be written (read-only file or folder)")
        return
    if not write:
        raise ConfigError(f"{flag} {text!r} does not exist")
    base = _nearest_existing(path.parent)
    if not base.is_dir():
        raise ConfigError(f"{flag} {text!r}: {str(base)!r} is a file, not a folder")
    if not _can_create_in(base):
        raise ConfigError(f"{flag} {text!r} cannot be created: {str(base)!r} is not writable")


# What from_pretrained loads weights from (torch checkpoints, single file or sharded).
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin",
                   "pytorch_model*.bin.index.json")
_LISTED = 8  # names a message lists of what a directory holds


def gguf_file(path: Path) -> Path | None:
    """The GGUF file ``path`` names: ``path`` itself (a ``.gguf`` file), or the one
    ``.gguf`` in a directory without a config.json; None otherwise."""
    if path.is_file():
        return path if path.suffix == ".gguf" else None
    if path.is_dir() and not (path / "config.json").is_file():
        found = list(path.glob("*.gguf"))
        return found[0] if len(found) == 1 else None
    return None


def checkpoint_problem(path: Path, value: str) -> str | None:
    """Why the existing local path ``path`` (written ``value``) is not a Hugging Face
    checkpoint directory (a config.json and weights), listing what it holds; or None."""
    if gguf_file(path) is not None:  # a GGUF file, loaded through transformers (docs/warm-start.md)
        return None
    if not path.is_dir():
        return f"--model {value!r} is not a checkpoint directory"
    if len(list(path.glob("*.gguf"))) > 1 and not (path / "config.json").is_file():
        names = ", ".join(sorted(p.name for p in path.glob("*.gguf"))[:_LISTED])
        return f"--model {value!r} holds several .gguf files ({names}): name the one to load"
    if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        return (f"--model {value!r} holds LoRA adapters (model.lora), not a whole model: write one "
                "with the adapters merged in, core merge RUN@STEP --out DIR")
    lacks = [] if (path / "config.json").is_file() else ["config.json"]
    if not any(any(path.glob(pattern)) for pattern in WEIGHT_PATTERNS):
        lacks.append("weights (*.safetensors or pytorch_model*.bin)")
    if not lacks:
        return None
    names = sorted(child.name + ("/" if child.is_dir() else "") for child in path.iterdir())
    held = ("it is empty" if not names else "it holds " + ", ".join(names[:_LISTED])
            + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""))
    return (f"--model {value!r} is not a Hugging Face checkpoint: no {' and no '.join(lacks)}; "
            f"{held}")


def check_model_path(value: str) -> None:
    """A ``--model`` that is written as a local path (absolute, ``./``, ``../``, ``~``)
    must be an existing checkpoint directory (config.json and weights); anything else
    is taken as a hub id."""
    if not value.strip():
        raise ConfigError("--model: empty value; expected a checkpoint directory or hub id")
    local = value.startswith(("/", "./", "../", "~")) or Path(value).exists()
    if not local:
        return
    path = Path(value).expanduser()
    if not path.exists():
        raise ConfigError(f"--model {value!r} does not exist")
    problem = checkpoint_problem(path, value)
    if problem:
        raise ConfigError(problem)
