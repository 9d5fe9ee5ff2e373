"""Paths a command writes, a file or a folder: checked before any work, written all or nothing.

Every command that writes (``dse init``, ``report --out``, ``plot --out``, ``export --out``, ``compare --plot``,
``sweep --plot``, ``pipeline --trace``; the study storage and the surrogate cache for their folders) goes
through this module, so a path that cannot be written gets the same one-line :class:`~dse.errors.UsageError`
everywhere: the option, the path, and why (the file system is read-only, permission denied, the disk is full,
a folder where a file goes, a file where a folder goes, no such folder, a suffix the writer does not know).

- :func:`check_file` / :func:`check_folder`: the path judged before anything is computed (nothing is created;
  a probe file made in the nearest existing folder is removed at once).
- :func:`writing` / :func:`writing_folder`: a temporary file (folder) beside the target for the writer to
  fill; only when the writer returns is it moved into place (``os.replace``), so a refusal, an error or Ctrl-C
  never removes or truncates an existing file. The temporary file and any folder made for it are removed on
  every way out.
- :func:`fault_reason`: the text for an ``OSError`` (shared with :mod:`dse.search.storage`).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from dse.errors import UsageError

__all__ = ["ERRNO_FAULTS", "fault_reason", "file_fault", "folder_fault", "check_file", "check_folder", "writing",
           "writing_folder", "with_suffix"]

#: errno -> what is wrong, for faults of the storage medium (the study storage names these too)
ERRNO_FAULTS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EFBIG: "the file size limit is reached",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}


def fault_reason(exc: OSError, path: Path | None = None) -> str:
    """Why ``exc`` (raised writing at ``path``) happened, in words."""
    if exc.errno in ERRNO_FAULTS:
        return ERRNO_FAULTS[exc.errno]
    if exc.errno == errno.EISDIR:
        return "it is a folder, where a file goes"
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        blocker = _file_above(path) if path is not None else None
        return f"{blocker} is a file, where a folder goes" if blocker else "a file is where a folder goes"
    if exc.errno == errno.ENOENT:
        return "no file can be made in that folder"
    return exc.strerror or type(exc).__name__


def _file_above(path: Path) -> Path | None:
    """The first ancestor of ``path`` that exists and is not a folder (None: there is none)."""
    for a in Path(path).parents:
        if a.exists():
            return a if not a.is_dir() else None
    return None


def _refuse(option: str, path: Path, why: str) -> UsageError:
    return UsageError(f"{option} {path}: cannot be written ({why})")


def _folder_fault(path: Path) -> str | None:
    """What stops this process from making ``path`` in its nearest existing ancestor (None: nothing)."""
    a = path.parent
    while not a.exists() and a != a.parent:
        a = a.parent
    if not a.is_dir():
        return f"{a} is a file, where a folder goes"
    try:
        if os.statvfs(a).f_flag & os.ST_RDONLY:
            return ERRNO_FAULTS[errno.EROFS]
        # the file system's own verdict (permissions, ACLs, pseudo file systems such as /proc), from a file
        # without a name where the system allows (Linux's O_TMPFILE): a signal cannot leave it behind
        with tempfile.TemporaryFile(dir=a, prefix=".dse-probe-"):
            pass
    except OSError as e:
        return fault_reason(e, path)
    return None


def file_fault(path: Path) -> str | None:
    """Why a file cannot be written at ``path`` (None: it can, as far as can be told without writing it)."""
    path = Path(path)
    if path.is_dir():
        return "it is a folder, where a file goes"
    if path.exists() and not os.access(path, os.W_OK):
        return "permission denied"
    return _folder_fault(path)


def folder_fault(path: Path) -> str | None:
    """Why ``path`` cannot be (made) a folder this process writes into (None: it can)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        return "it is a file, where a folder goes"
    return _folder_fault(path / "x" if path.is_dir() else path)


def with_suffix(path: Path, option: str, suffixes: Sequence[str] | None, default: str | None = None) -> Path:
    """``path`` whose suffix is one of ``suffixes`` (lower case, with the dot); a path without a suffix gets
    ``default`` when given; any other suffix is refused naming the ones allowed."""
    path = Path(path)
    if not suffixes:
        return path
    suf = path.suffix.lower()
    if not suf and default is not None:
        return path.with_name(path.name + default)
    if suf not in suffixes:
        what = (f"the suffix {suf!r} names no format it can write" if suf else
                "a name without a suffix" + (" (a folder?)" if path.is_dir() else "") + " names no format")
        raise UsageError(f"{option} {path}: {what}; end the name in {', '.join(suffixes)}")
    return path


def check_file(path: Path, option: str, *, suffixes: Sequence[str] | None = None,
               default: str | None = None) -> Path:
    """``path`` (its suffix checked, see :func:`with_suffix`) if a file can be written there; else a one-line
    UsageError naming ``option``, the path and why. Creates nothing."""
    path = with_suffix(Path(path), option, suffixes, default)
    why = file_fault(path)
    if why:
        raise _refuse(option, path, why)
    return path


def check_folder(path: Path, option: str) -> Path:
    """``path`` if it is (or can be made) a folder this process writes into; else a one-line UsageError."""
    path = Path(path)
    why = folder_fault(path)
    if why:
        raise _refuse(option, path, why)
    return path


def _make_parents(folder: Path, option: str, path: Path) -> list[Path]:
    """Make ``folder`` and its missing ancestors; the ones made, deepest first."""
    made = []
    a = folder
    while not a.exists() and a != a.parent:
        made.append(a)
        a = a.parent
    try:
        for d in reversed(made):
            d.mkdir()
    except OSError as e:
        _remove_folders(made)
        raise _refuse(option, path, fault_reason(e, path)) from None
    return made


def _default_mode(full: int) -> int:
    """``full`` less this process's umask (what a plain ``open`` or ``mkdir`` would have given; temporary
    files and folders are made private)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return full & ~mask


def _remove_folders(made: list[Path]) -> None:
    for d in made:  # deepest first; only while empty
        try:
            d.rmdir()
        except OSError:
            break


@contextmanager
def writing(path: Path, option: str, *, suffixes: Sequence[str] | None = None,
            default: str | None = None) -> Iterator[Path]:
    """A temporary file beside ``path`` (ending in the same suffix, for writers that read the format from it)
    for the body to write; moved onto ``path`` when the body returns. ``path`` is checked first
    (:func:`check_file`; call that first to learn the final name when ``default`` may add a suffix). An OSError
    while writing becomes the one-line UsageError; the temporary file and the folders made for it are removed
    on every way out, and an existing ``path`` is replaced only when the body succeeds."""
    path = check_file(path, option, suffixes=suffixes, default=default)
    made = _make_parents(path.parent, option, path)
    tmp: Path | None = None
    try:
        try:
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}")
            os.close(fd)
            tmp = Path(name)
            yield tmp
            os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else _default_mode(0o666))
            os.replace(tmp, path)
            tmp = None
        except OSError as e:
            raise _refuse(option, path, fault_reason(e, path)) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if not path.exists():
                _remove_folders(made)


@contextmanager
def writing_folder(path: Path, option: str) -> Iterator[Path]:
    """A temporary folder beside ``path`` for the body to fill; its files are moved into ``path`` (made if
    needed; files of the same name replaced, others kept) when the body returns. Checked first
    (:func:`check_folder`); temporary files and folders made for it are removed on every way out."""
    path = check_folder(path, option)
    made = _make_parents(path.parent, option, path)
    tmp: Path | None = None
    created = False
    try:
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
            yield tmp
            if not path.exists():
                os.chmod(tmp, _default_mode(0o777))
                tmp.rename(path)
                created = True
                tmp = None
            else:
                for f in sorted(tmp.iterdir()):
                    os.replace(f, path / f.name)
        except OSError as e:
            raise _refuse(option, path, fault_reason(e, path)) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if not created and not path.exists():
            _remove_folders(made)

