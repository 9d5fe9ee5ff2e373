"""Storages that fail safely: URLs parsed and masked, journal files that never keep a torn record, read-only
copies readable, and storage faults (disk full, read-only, permission) named for what they are.

- :func:`mask_url` hides every password in a URL or in a message quoting one, whatever characters the
  password holds (``@``, ``/``, ``:``, spaces): the user information of a URL ends at the *last* ``@``
  before the host, and the password of the storage in use is masked wherever a driver message repeats it.
- :func:`normalize_url` percent-encodes a password (or user name) typed raw, so that SQLAlchemy does not cut
  it at its first ``@`` and try to reach part of it as a host.
- :class:`SafeJournalFileBackend` is Optuna's journal file backend whose appends are all-or-nothing: a
  write cut short (disk full, file size limit) is truncated back before the error propagates.
  :func:`repair_journal` fixes a file damaged before (a crash mid-write, an older version): it keeps every
  complete record, drops the torn bytes (saved beside the file as ``<file>.dropped``) and says so; a file
  that does not begin as a journal does (a study file or a database given by mistake) is refused, untouched.
- :func:`readable_copy` gives a read-only command a private snapshot of a SQLite study that sits on a
  read-only file system or folder (SQLite's write-ahead log needs side files beside the database).
- :func:`fault_of` recognizes disk-full, quota, file-size-limit, read-only and permission errors in an
  exception chain (OS errors, SQLite messages, Optuna wrapping them) and :class:`StorageFault` reports one
  as bad input (exit code 2) naming the path and what to do.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import tempfile
import urllib.parse
from pathlib import Path

from dse.config.outputs import ERRNO_FAULTS, fault_reason, folder_fault
from dse.errors import UsageError

__all__ = ["mask_url", "normalize_url", "url_path", "secrets_of", "SafeJournalFileBackend", "repair_journal",
           "readable_copy", "fault_of", "StorageFault", "storage_fault", "check_writable_dir"]

_log = logging.getLogger("dse.search.storage")

#: query parameters that carry a password
_PASSWORD_KEYS = ("password", "passwd", "pwd")
#: characters that cannot appear raw in the user information of a URL
_RESERVED = set("@/?#[]: %")


# -- URLs --------------------------------------------------------------------------------------------------
def _split(url: str) -> tuple[str, str | None, str] | None:
    """``scheme://``, the user information (None when absent) and the rest (host, path, query) of a URL.

    The user information ends at the last ``@`` of the authority-and-path part: a host or a database name
    cannot hold one, a password can.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme or not all(c.isalnum() or c in "+-." for c in scheme):
        return None
    at = rest.rfind("@")
    if at >= 0 and ":" not in rest[:at] and any(c in rest[:at] for c in "/?#"):
        at = -1  # an "@" in the path or query (a user name alone holds no "/", "?" or "#")
    if at < 0:
        return scheme + sep, None, rest
    return scheme + sep, rest[:at], rest[at:]


def _query_secrets(query: str) -> list[str]:
    return [v for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)
            if k.lower() in _PASSWORD_KEYS and v]


def secrets_of(url: str) -> list[str]:
    """The password(s) a URL holds, as typed and percent-decoded / percent-encoded (longest first)."""
    parts = _split(url)
    if parts is None:
        return []
    _, userinfo, rest = parts
    found = _query_secrets(url.partition("?")[2]) + _query_secrets(rest.partition("?")[2])
    if userinfo is not None and ":" in userinfo:
        found.append(userinfo.partition(":")[2])
    out = set()
    for s in found:
        if s:
            out |= {s, urllib.parse.unquote(s), urllib.parse.quote(s, safe=""),
                    urllib.parse.quote(urllib.parse.unquote(s), safe="")}
    return sorted((s for s in out if s), key=len, reverse=True)


def _mask_one(url: str) -> str:
    parts = _split(url)
    if parts is None:
        return url
    head, userinfo, rest = parts
    if userinfo is not None and ":" in userinfo:
        userinfo = userinfo.partition(":")[0] + ":***"
    path, q, query = rest.partition("?")
    if q:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{k}={'***' if k.lower() in _PASSWORD_KEYS else urllib.parse.quote(v, safe='/:,')}"
                         for k, v in pairs)
        rest = path + q + query
    return head + (userinfo if userinfo is not None else "") + rest


#: a password at least this long is masked wherever a message repeats it, a shorter one in URLs only
MIN_LOOSE_SECRET = 4


def mask_url(text: str, url: str | None = None) -> str:
    """``text`` (a URL, or a message quoting URLs) with every password replaced by ``***``.

    With ``url`` (the storage in use), its password is masked wherever it appears, also outside a URL (a
    driver's message may repeat it, or part of a host name cut from it) -- unless it is shorter than
    ``MIN_LOOSE_SECRET`` characters: a password of one to three characters (no secret) is masked in URLs
    only, so that its letters stay readable in the rest of the message.
    """
    if url is None and _split(text.strip()) is not None:
        url = text.strip()  # the text is itself a URL
    for s in secrets_of(url) if url else []:
        if len(s) >= MIN_LOOSE_SECRET:
            text = text.replace(s, "***")
    out = []
    for word in text.split(" "):
        if "://" in word:
            lead = len(word) - len(word.lstrip("'\"(<["))
            trail = len(word) - len(word.rstrip("'\")>],;."))
            core = word[lead:len(word) - trail]
            word = word[:lead] + _mask_one(core) + word[len(word) - trail:]
        out.append(word)
    return " ".join(out)


def normalize_url(url: str) -> str:
    """``url`` with a user name or password that holds reserved characters (``@``, ``/``, ``:``, ``%``,
    spaces, ...) percent-encoded; one already percent-encoded is left as it is."""
    parts = _split(url)
    if parts is None or parts[1] is None:
        return url
    head, userinfo, rest = parts
    user, colon, pw = userinfo.partition(":")

    def enc(s: str) -> str:
        try:
            already = urllib.parse.quote(urllib.parse.unquote(s, errors="strict"), safe="") == s
        except UnicodeDecodeError:
            already = False
        if already or not (set(s) & _RESERVED):
            return s
        return urllib.parse.quote(s, safe="")

    return head + enc(user) + (colon + enc(pw) if colon else "") + rest


def url_path(url: str) -> Path | None:
    """The file behind a ``sqlite:///`` or ``journal:///`` URL (None for a server or an in-memory database)."""
    for prefix in ("sqlite:///", "journal:///"):
        if url.startswith(prefix):
            p = url[len(prefix):].split("?", 1)[0]
            if not p or p == ":memory:" or p.startswith("file:"):
                return None
            return Path(p)
    return None


# -- faults ------------------------------------------------------------------------------------------------
_MESSAGE_FAULTS = (
    ("database or disk is full", "the disk is full"),
    ("no space left on device", "the disk is full"),
    ("file too large", "the file size limit is reached"),
    ("disk quota exceeded", "the disk quota is exceeded"),
    ("attempt to write a readonly database", "the file system is read-only"),
    ("read-only file system", "the file system is read-only"),
    ("permission denied", "permission denied"),
)
_ADVICE = {
    "the disk is full": "free some space (or move the study to a larger disk) and run the same command again: "
                        "completed trials are kept",
    "the disk quota is exceeded": "free some space or raise the quota, then run the same command again: "
                                  "completed trials are kept",
    "the file size limit is reached": "raise the limit (ulimit -f) and run the same command again: completed "
                                      "trials are kept",
    "the file system is read-only": "copy the study to a writable folder to run it (status, pareto, plot and "
                                    "export read it where it is)",
    "permission denied": "make the folder and file writable for this user, or copy the study elsewhere",
}


#: the user attribute marking a strategy's own study beside a study (the hybrid's X.training): its value is
#: the study's name; a study file naming that study is refused (dse.search.study.check_identity)
HELPER_ATTR = "dse_helper_of"

#: a database server's connection lost while a run used it (stopped, restarted, the network gone)
CONNECTION_LOST = "the database server stopped answering"
_ADVICE[CONNECTION_LOST] = ("start it (or wait for it to come back) and run the same command again: completed "
                            "trials are kept")
#: drivers of server databases (a SQLite OperationalError, "database is locked", is not a lost server)
_SERVER_DRIVERS = ("psycopg", "psycopg2", "pg8000", "asyncpg", "pymysql", "MySQLdb", "mysql")


#: MySQL client errors of a lost connection: can't connect, server gone away, lost during a query, lost reading
_MYSQL_LOST = (2003, 2006, 2013, 2055)


def _connection_lost(e: BaseException) -> bool:
    """A lost connection to a database server: SQLAlchemy's wrapper says the connection was invalidated, or a
    server driver's error is a shutdown, or an operational/interface error with no SQL state of a statement
    (psycopg's 'server closed the connection', 'connection refused'). Not a deadlock, a serialization failure,
    a timeout or a lock: those carry the server's SQL state (MySQL: not one of the client's connection codes)."""
    if getattr(e, "connection_invalidated", False) is True:
        return True
    root = type(e).__module__.split(".")[0]
    if root not in _SERVER_DRIVERS:
        return False
    names = {c.__name__ for c in type(e).__mro__}
    if names & {"AdminShutdown", "CrashShutdown", "CannotConnectNow"}:
        return True
    if not names & {"OperationalError", "InterfaceError"}:
        return False
    if root in ("pymysql", "MySQLdb", "mysql"):
        return bool(e.args) and e.args[0] in _MYSQL_LOST
    return getattr(e, "sqlstate", None) is None and getattr(e, "pgcode", None) is None


def _chain(exc: BaseException):
    seen = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [getattr(e, "orig", None), e.__cause__, e.__context__]


def _probe(path: Path | None) -> str | None:
    """What is wrong with the folder of ``path``, judged by the file system itself (None: nothing seen)."""
    if path is None:
        return None
    folder = path.parent if not path.is_dir() else path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return "the file system is read-only"
    if st.f_bavail * st.f_frsize < 64 * 1024:
        return "the disk is full"
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "permission denied"
    try:  # a file size limit (ulimit -f) that the file or its write-ahead log has reached
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY:
            sizes = [os.path.getsize(f) for f in (path, Path(f"{path}-wal"), Path(f"{path}-journal"))
                     if f.is_file()]
            if sizes and max(sizes) + 256 * 1024 > soft:
                return "the file size limit is reached"
    except (ImportError, OSError, ValueError):
        pass
    return None


def fault_of(exc: BaseException, path: Path | None = None, *, connection: bool = True) -> str | None:
    """The storage fault behind ``exc`` ("the disk is full", "the file system is read-only", ...), or None.

    Looks through the whole exception chain (Optuna may raise an AssertionError or a StorageInternalError
    while handling the OS or SQLite error). With ``path``, a generic I/O error is checked against the file
    system holding it.
    """
    generic = False
    for e in _chain(exc):
        if connection and _connection_lost(e):
            return CONNECTION_LOST
        if isinstance(e, OSError) and e.errno in ERRNO_FAULTS:
            return ERRNO_FAULTS[e.errno]
        msg = str(e).lower()
        for needle, what in _MESSAGE_FAULTS:
            if needle in msg:
                if needle.endswith("readonly database"):  # a read-only file system, or a file or folder this
                    return _probe(path) or what  # user may not write: the file system tells which
                return what
        if "disk i/o error" in msg or "unable to open database file" in msg or isinstance(e, OSError):
            generic = True
    return _probe(path) if generic or path is not None and isinstance(exc, AssertionError) else None


class StorageFault(UsageError):
    """A storage that cannot be written: disk full, quota, file-size limit, read-only, permission."""


def storage_fault(exc: BaseException, url: str, *, connection: bool = True) -> StorageFault | None:
    """A :class:`StorageFault` naming the storage and what to do, if ``exc`` is one (else None); ``connection``:
    a lost server connection counts (False where the storage is being opened: a server that cannot be reached
    at all is said as such)."""
    path = url_path(url)
    what = fault_of(exc, path, connection=connection)
    if what is None:
        return None
    where = str(path) if path is not None else mask_url(url)
    return StorageFault(f"storage {where}: {what}; {_ADVICE[what]}")


def check_writable_dir(folder: Path, what: str, hint: str) -> None:
    """UsageError naming ``folder`` unless it is (or can be made) a folder this process can write into (the
    same judgement as every output folder: :func:`dse.config.outputs.folder_fault`); makes it."""
    folder = Path(folder)
    why = folder_fault(folder)
    if why is None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            why = fault_reason(e, folder)
    if why:
        raise UsageError(f"{what} {folder}: cannot be used ({why}); {hint}")


# -- journal files -----------------------------------------------------------------------------------------
def _lock(path: str):
    from optuna.storages.journal import JournalFileSymlinkLock

    return JournalFileSymlinkLock(path)


def _make_backend():
    from optuna.storages.journal import JournalFileBackend
    from optuna.storages.journal._file import get_lock_file

    class _Safe(JournalFileBackend):
        """Optuna's journal file backend with all-or-nothing appends (same format, same lock file)."""

        def append_logs(self, logs):
            data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode("utf-8")
            with get_lock_file(self._lock):
                fd = os.open(self._file_path, os.O_WRONLY | os.O_APPEND)
                try:
                    start = os.fstat(fd).st_size
                    try:
                        view = memoryview(data)
                        while view:
                            view = view[os.write(fd, view):]
                        os.fsync(fd)
                    except BaseException:
                        os.ftruncate(fd, start)  # never leave a torn record behind
                        raise
                finally:
                    os.close(fd)

    return _Safe


_BACKEND = None


def SafeJournalFileBackend(path: str):  # named like a class: its class is made on first use (Optuna imported late)
    """A journal file backend whose appends never leave a torn record (see the module docstring)."""
    global _BACKEND
    if _BACKEND is None:
        _BACKEND = _make_backend()
    return _BACKEND(path, lock_obj=_lock(path))


#: how every record of an Optuna journal begins (its first key)
_RECORD_START = b'{"op_code"'


def _salvage(line: bytes) -> bytes | None:
    """The complete record at the end of a damaged line (a torn record followed by a good one), if any."""
    start = line.rfind(_RECORD_START)
    while start > 0:
        try:
            json.loads(line[start:])
            return line[start:]
        except ValueError:
            start = line.rfind(_RECORD_START, 0, start)
    return None


def repair_journal(path: str | Path) -> str | None:
    """Drop the torn bytes of a journal file, keeping every complete record; returns what was done (None when
    the file is whole). The dropped bytes are appended to ``<file>.dropped``. A file that does not begin as a
    journal does (after any zero bytes or blank lines a crash may leave) raises :class:`UsageError`, untouched."""
    path = str(path)
    try:
        with open(path, "rb") as f:
            head = f.read(4096).lstrip(b"\0 \t\r\n")[:len(_RECORD_START)]
    except OSError:  # no such file (a new journal) or unreadable (the storage's open says so)
        return None
    if head != _RECORD_START[:len(head)]:  # not even a torn journal: never "repaired" (emptied)
        raise UsageError(f"--storage: {path} is not an Optuna journal (it does not begin with a journal record) and "
                         "was left as it is; give a journal file (new, or one a study wrote: journal:///FILE.log) "
                         "or another storage")
    if not os.access(path, os.W_OK):  # read-only: read as it is
        return None
    from optuna.storages.journal._file import get_lock_file

    with get_lock_file(_lock(path)):
        with open(path, "rb") as f:
            data = f.read()
        if not data:
            return None
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        kept, dropped, salvaged = [], [], 0
        for line in lines:
            try:
                json.loads(line)
                kept.append(line)
                continue
            except ValueError:
                pass
            good = _salvage(line)
            if good is not None:
                kept.append(good)
                dropped.append(line[:len(line) - len(good)])
                salvaged += 1
            else:
                dropped.append(line)
        if tail:
            try:
                json.loads(tail)
                kept.append(tail)  # complete, only its newline was lost
            except ValueError:
                dropped.append(tail)
        if not dropped and not tail:
            return None
        if dropped:
            try:
                with open(path + ".dropped", "ab") as f:
                    f.write(b"\n".join(dropped) + b"\n")
            except OSError:
                pass
        text = b"".join(line + b"\n" for line in kept)
        if data.startswith(text):  # only the tail is torn: cut it off in place
            os.truncate(path, len(text))
        else:
            with open(path + ".repair", "wb") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".repair", path)
    n = sum(len(d) for d in dropped)
    msg = (f"journal {path}: dropped {n} bytes of {len(dropped)} torn record(s) (a write cut short by a full "
           f"disk or a crash){f', recovered {salvaged} record(s) appended after one' if salvaged else ''}; "
           f"every complete record is kept (the dropped bytes: {path}.dropped)")
    if not dropped:
        msg = f"journal {path}: restored the newline after its last record"
    _log.warning(msg)
    return msg


# -- read-only copies --------------------------------------------------------------------------------------
def _writable(path: Path) -> bool:
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return True
    return not (st.f_flag & os.ST_RDONLY) and os.access(path.parent, os.W_OK) and os.access(path, os.W_OK)


def readable_copy(url: str) -> str:
    """For reading a SQLite study that sits where this process cannot write (a read-only file system or
    folder): a URL of a private snapshot (the database with its write-ahead log) in a temporary folder.
    Any other URL is returned as it is."""
    path = url_path(url)
    if path is None or not url.startswith("sqlite:///") or not path.exists() or _writable(path):
        return url
    tmp = Path(tempfile.mkdtemp(prefix="dse-readonly-"))
    atexit.register(shutil.rmtree, tmp, True)
    for suffix in ("", "-wal"):
        src = Path(str(path) + suffix)
        if src.exists():
            shutil.copyfile(src, tmp / (path.name + suffix))
    return f"sqlite:///{tmp / path.name}"
