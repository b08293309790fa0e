"""The history of checks: an embedded SQLite database, one row per check, in the user's data folder.

``$PORTABILITY_DATA_DIR/history.sqlite``, else ``$XDG_DATA_HOME/portability/history.sqlite``, else
``~/.local/share/portability/history.sqlite``. The history is the owner's alone: the data folder is
created 0700 and the database 0600 before SQLite opens it (SQLite gives its -wal and -shm files the
database's mode), whatever the umask; an existing database of wider mode is narrowed to 0600. WAL mode,
a busy timeout and short write transactions let several checks (separate processes) record at once. The
schema is versioned with ``PRAGMA user_version`` and upgraded by the ordered MIGRATIONS below, each in its
own transaction; a database made by a newer version of the tool is refused, never rewritten.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path

from portability.report.files import to_json
from portability.report.schema import Report

log = logging.getLogger(__name__)

BUSY_TIMEOUT_S = 30.0

#: MIGRATIONS[i] takes the schema from version i to i + 1. Append only; never edit a released step.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at TEXT NOT NULL,
        model_sha256 TEXT NOT NULL,
        model_path TEXT NOT NULL,
        passed INTEGER NOT NULL,
        report TEXT NOT NULL
    );
    CREATE INDEX runs_by_model ON runs (model_sha256, id);
    """,
    """
    ALTER TABLE runs ADD COLUMN env_key TEXT NOT NULL DEFAULT '';
    ALTER TABLE runs ADD COLUMN tool_version TEXT NOT NULL DEFAULT '';
    CREATE TABLE target_results (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        target_id TEXT NOT NULL,
        status TEXT NOT NULL,
        gating INTEGER NOT NULL,
        max_abs REAL,
        accuracy REAL,
        size_bytes INTEGER,
        p50_ms REAL,
        PRIMARY KEY (run_id, target_id)
    );
    CREATE INDEX runs_by_env ON runs (model_sha256, env_key, id);
    """,
    """
    CREATE TABLE outputs (
        run_id INTEGER PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
        data BLOB NOT NULL
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class HistoryError(Exception):
    """The history database cannot be opened, upgraded or read."""


@dataclass(frozen=True)
class RunSummary:
    id: int
    created_at: str
    model_path: str
    model_sha256: str
    passed: bool
    counts: dict[str, int]  # status -> number of targets
    env_key: str


def default_path() -> Path:
    base = os.environ.get("PORTABILITY_DATA_DIR")
    if base:
        return Path(base) / "history.sqlite"
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "portability" / "history.sqlite"


def env_key(environment: dict) -> str:
    """Environments that ran the same package versions on the same Python and platform share a key."""
    core = {k: environment.get(k) for k in ("python", "platform", "packages")}
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()[:16]


def _private_folder(folder: Path) -> None:
    """``folder`` created 0700 (its parents as usual); one that exists is left as it is (it may be shared)."""
    if folder.is_dir():
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:  # made by another process meanwhile
        return
    os.chmod(folder, 0o700)  # the umask may have taken more than group and others' bits


def _private_file(path: Path) -> None:
    """The database file created 0600 for SQLite to open; the owner's own database, -wal and -shm files that
    exist with wider modes narrowed to 0600."""
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT, 0o600))
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            st = p.stat()
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != 0o600:
                os.chmod(p, 0o600)
        except FileNotFoundError:
            continue


class History:
    """One connection to the history database (open it per command; it is not shared across threads)."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else default_path()
        try:
            _private_folder(self.path.parent)
            _private_file(self.path)
        except OSError as e:
            raise HistoryError(f"history database {self.path}: {e.strerror or e}") from None
        try:
            # autocommit mode: every write below opens its own short BEGIN IMMEDIATE transaction
            self.db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self.db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self._retry_locked(self._setup)
        except sqlite3.Error as e:
            raise HistoryError(f"history database {self.path}: {e}") from None

    def _setup(self) -> None:
        mode = self.db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            log.warning("history %s: journal mode %s (WAL unavailable on this file system)", self.path, mode)
        self.db.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    @staticmethod
    def _retry_locked(fn) -> None:
        """Switching a new database to WAL takes an exclusive lock, and SQLite answers "locked" at once
        (no busy handler) to the other processes that open it at the same instant: retry them."""
        import random
        import time

        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.005, 0.05))

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "History":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def version(self) -> int:
        return self.db.execute("PRAGMA user_version").fetchone()[0]

    def _migrate(self) -> None:
        while True:
            v = self.version()
            if v > SCHEMA_VERSION:
                raise HistoryError(f"history database {self.path} has schema version {v}, newer than this "
                                   f"portability knows ({SCHEMA_VERSION}): upgrade portability")
            if v == SCHEMA_VERSION:
                return
            self.db.execute("BEGIN IMMEDIATE")
            try:
                if self.version() == v:  # another process may have upgraded it meanwhile
                    for stmt in filter(str.strip, MIGRATIONS[v].split(";")):
                        self.db.execute(stmt)
                    self.db.execute(f"PRAGMA user_version = {v + 1}")
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def record(self, report: Report, outputs: bytes | None = None) -> int:
        """Store a report (and its kept outputs: ``report.golden``); returns its run id."""
        from portability.metrics import drift

        m = report.model
        rows = [(t.id, t.status, int(t.gating), drift.worst(t, "numbers")[0], (t.metrics or {}).get("accuracy"),
                 (t.artifact or {}).get("size_bytes"), ((t.metrics or {}).get("latency_ms") or {}).get("p50"))
                for t in report.targets]
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                cur = self.db.execute(
                    "INSERT INTO runs (created_at, model_sha256, model_path, passed, report, env_key, tool_version) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (report.created_at, m.get("sha256", ""), m.get("path", ""), int(report.passed), to_json(report),
                     env_key(report.environment), str(report.tool.get("version", ""))))
                run_id = cur.lastrowid
                self.db.executemany("INSERT INTO target_results VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                    [(run_id, *r) for r in rows])
                if outputs is not None:
                    self.db.execute("INSERT INTO outputs VALUES (?, ?)", (run_id, outputs))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise HistoryError(f"history database {self.path}: {e}") from None
        return int(run_id)

    def report(self, run_id: int) -> Report:
        row = self.db.execute("SELECT report FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise HistoryError(f"no run {run_id} in the history ({self.path})")
        return Report.from_dict(json.loads(row[0]))

    def outputs(self, run_id: int) -> bytes | None:
        """The kept outputs of a run (``report.golden``'s file bytes), None when it has none."""
        row = self.db.execute("SELECT data FROM outputs WHERE run_id = ?", (run_id,)).fetchone()
        return bytes(row[0]) if row else None

    def runs(self, model_sha256: str | None = None, model_path: str | None = None, limit: int = 50) -> list[RunSummary]:
        """The most recent runs first; of one model when its sha256 (or a prefix) or its path is given."""
        conds, args = [], []
        if model_sha256:
            conds.append("model_sha256 LIKE ?")
            args.append(model_sha256 + "%")
        if model_path:
            conds.append("model_path = ?")
            args.append(model_path)
        where = "WHERE " + " OR ".join(conds) if conds else ""
        rows = self.db.execute(f"SELECT id, created_at, model_path, model_sha256, passed, env_key FROM runs {where} "
                               "ORDER BY id DESC LIMIT ?", (*args, limit)).fetchall()
        counts: dict[int, dict[str, int]] = {r[0]: {} for r in rows}
        if rows:
            marks = ",".join("?" * len(rows))
            for run_id, status, n in self.db.execute(
                    f"SELECT run_id, status, COUNT(*) FROM target_results WHERE run_id IN ({marks}) "
                    "GROUP BY run_id, status", [r[0] for r in rows]):
                counts[run_id][status] = n
        return [RunSummary(r[0], r[1], r[2], r[3], bool(r[4]), counts[r[0]], r[5]) for r in rows]

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
