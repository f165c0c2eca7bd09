"""Where a study lives and what it is called (the module docstring of gluon.tuning.tuner says how they
are used).

    open_storage(storage, study_name, tuning_root) -> (optuna storage, description)
    storage_claims(storage, description, study_name, tuning_root) -> the cross-process claim lock
    study_name_for(spec, arch, device, shapes, dtypes, objective) -> the study's name

A path is a JournalStorage file (`journal_storage`); an SQLAlchemy URL an RDBStorage (`rdb_storage`),
described with its password masked (`describe_storage_url`). Claims: flock on a file beside a journal
or SQLite file (`_FileClaims`), a transaction-level advisory lock in PostgreSQL (`_PostgresClaims`), else
a lock file under tuning_root. A storage that cannot be opened raises TuneError.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from pathlib import Path

from .template import shape_str


class TuneError(RuntimeError):
    """The tuner cannot go on: a storage that cannot be opened (the CLI prints it without a traceback)."""


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(s)).strip("-") or "x"


def _space_signature(space) -> str:
    try:
        d = space.distributions()
        items = sorted((k, repr(v)) for k, v in d.items())
    except Exception:                                   # noqa: BLE001
        items = sorted((k, repr(v)) for k, v in getattr(space, "params", {}).items())
    return json.dumps(items)


def study_name_for(spec, arch: str, device: str, shapes, dtypes, objective: str) -> str:
    shp = "_".join(shape_str(s) for s in shapes)
    if len(shp) > 48:
        shp = f"{len(shapes)}shapes"
    h = hashlib.sha256(json.dumps([[list(s) for s in shapes], list(dtypes), _space_signature(spec.space),
                                   objective]).encode()).hexdigest()[:8]
    return _slug(f"{spec.name}.{arch}.{device}.{shp}.{'-'.join(dtypes)}.{h}")


def journal_storage(path: str | os.PathLike):
    """optuna JournalStorage on a file (optuna >= 4: JournalFileBackend; 3.x: JournalFileStorage)."""
    from optuna.storages import JournalStorage
    try:
        from optuna.storages.journal import JournalFileBackend as Backend
    except ImportError:                                 # optuna 3.x
        from optuna.storages import JournalFileStorage as Backend
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(Backend(str(path)))


def is_storage_url(storage) -> bool:
    """An SQLAlchemy URL (an Optuna RDB storage) rather than a journal file path."""
    return isinstance(storage, str) and "://" in storage


def describe_storage_url(url: str) -> str:
    """The URL with its password masked (what messages and summaries show)."""
    try:
        from sqlalchemy.engine import make_url
        return make_url(url).render_as_string(hide_password=True)
    except Exception:                                   # noqa: BLE001 - a malformed URL: hide what may be one
        return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def rdb_storage(url: str):
    """optuna RDBStorage on an SQLAlchemy URL. SQLite: the database's folder is created and writers wait
    up to 60 s for the file's lock (the tuner's threads and other processes share it); other databases:
    pooled connections are checked before use (a study outlives idle connections)."""
    import optuna
    from sqlalchemy.engine import make_url
    desc = describe_storage_url(url)
    try:
        u = make_url(url)
    except Exception as e:                              # noqa: BLE001
        raise TuneError(f"storage {desc}: not a database URL ({e}); write sqlite:///path.db or "
                        "postgresql://user@host/db, or give a journal file path") from None
    if u.get_backend_name() == "sqlite":
        db = u.database or ""
        if db and db != ":memory:" and not db.startswith("file:"):
            Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kw = {"connect_args": {"timeout": 60}}
    else:
        kw = {"pool_pre_ping": True}
    from sqlalchemy import exc
    for attempt in range(6):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kw)
        except ImportError as e:
            raise TuneError(f"storage {desc}: the database driver is missing ({e}); postgresql:// needs "
                            "`pip install 'psycopg[binary]'` with SQLAlchemy >= 2.1 (psycopg2 with older ones, "
                            "or write postgresql+psycopg2://), mysql:// needs `pip install PyMySQL`") from None
        except exc.NoSuchModuleError:
            raise TuneError(f"storage {desc}: not a database URL SQLAlchemy knows ({u.drivername}); write "
                            "sqlite:///path.db or postgresql://user@host/db, or give a journal file path") from None
        except Exception as e:                          # noqa: BLE001 - connection refused, bad credentials, ...
            text = str(e)
            # tuners started together on a fresh database race to create Optuna's tables: the loser retries
            racing = isinstance(e, exc.IntegrityError) or (isinstance(e, exc.DBAPIError) and any(
                w in text for w in ("already exists", "database is locked", "duplicate key")))
            if racing and attempt < 5:
                time.sleep(0.1 * 2 ** attempt)
                continue
            first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
            raise TuneError(f"storage {desc}: cannot open the database: {first}") from None


def open_storage(storage, study_name: str, tuning_root: str | os.PathLike):
    """(storage object for optuna, description). None -> the journal file <tuning_root>/<study>.log; a
    path -> that journal file; an SQLAlchemy URL -> an RDB storage (`rdb_storage`); a BaseStorage as is.
    The description is the journal's path or the URL with its password masked."""
    from optuna.storages import BaseStorage
    if storage is None:
        p = Path(tuning_root) / f"{study_name}.log"
        return journal_storage(p), str(p)
    if isinstance(storage, BaseStorage):
        return storage, type(storage).__name__
    s = str(storage)
    if is_storage_url(s):
        return rdb_storage(s), describe_storage_url(s)
    return journal_storage(s), s


class _FileClaims:
    """Claims serialized by flock on a file: every process that reaches the file (one host, or hosts
    sharing a file system whose flock works across them)."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def __call__(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


class _PostgresClaims:
    """Claims serialized by a PostgreSQL transaction-level advisory lock on a key derived from the study
    name: every machine that reaches the database. The lock ends with its transaction (commit, rollback,
    or the connection dropped when a tuner dies), so a killed tuner never holds it."""

    path = None

    def __init__(self, engine, study_name: str):
        self.engine = engine
        self.key = int.from_bytes(hashlib.sha256(f"gluon-claims:{study_name}".encode()).digest()[:8], "big",
                                  signed=True)

    @contextlib.contextmanager
    def __call__(self):
        from sqlalchemy import text
        with self.engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": self.key})
            yield


def storage_claims(storage, storage_desc: str, study_name: str, tuning_root: str | os.PathLike):
    """The cross-process part of the claim lock for this storage (see the module docstring): a callable
    returning a context manager."""
    import optuna
    rdb = storage if isinstance(storage, optuna.storages.RDBStorage) else None
    if rdb is not None:
        dialect = rdb.engine.dialect.name
        if dialect == "postgresql":
            return _PostgresClaims(rdb.engine, study_name)
        db = rdb.engine.url.database or ""
        if dialect == "sqlite" and db and db != ":memory:" and not db.startswith("file:"):
            p = Path(db).expanduser()
            tag = hashlib.sha256(study_name.encode()).hexdigest()[:12]
            return _FileClaims(p.parent / f".{p.name}.{tag}.claims.lock")
        import warnings
        warnings.warn(f"storage {storage_desc}: claims on a {dialect} database use a lock file under "
                      f"{tuning_root}/, safe within this host only: tuners on other machines sharing the "
                      "study may measure a config twice (PostgreSQL, SQLite and journal files are claimed "
                      "across processes)", stacklevel=3)
    elif isinstance(storage, optuna.storages.JournalStorage) and storage_desc and Path(storage_desc).parent.is_dir():
        journal = Path(storage_desc)
        return _FileClaims(journal.parent / f".{journal.name}.claims.lock")
    return _FileClaims(Path(tuning_root) / f".{study_name}.claims.lock")
