"""The kernel cache: compiled shared objects (and CUDA cubins) memoised in process and on disk.

Layout of the cache directory (``$POLYCOMP_CACHE_DIR``, default ``~/.cache/polycomp``)::

    entries/<key>.json          {"key", "file", "sha256", "size", "kind"}; its mtime is the
                                last use (LRU order)
    objects/<key>-<sha16>.<ext> the artifact, named by its own content hash
    tmp/                        temporary files, always on the cache's filesystem
    locks/<key>.lock            held (``flock``) while a process builds ``key``: another
                                process missing the same key waits for it, then hits

Guarantees:

* **Key.**  ``key`` hashes the kind of artifact, polycomp's version, the compiler's
  resolved path (``realpath`` of the executable ``PATH`` finds, so a ``gcc`` symlink
  moved to another compiler is another key) and ``--version`` text, and every input of
  the build (the generated source, which encodes the kernel's structure, options and
  target, plus flags, include dirs, libs).
* **Atomic across filesystems.**  The compiler writes into the system temp dir (which may
  be another filesystem); the result is *copied* into ``tmp/`` of the cache and only then
  ``os.replace``-d into place, so every rename stays inside one directory tree on one
  filesystem and readers see either nothing or a complete file.  Objects are written
  before their entry, and an object's name carries its hash, so concurrent writers of one
  key never mix an entry with another writer's object.
* **Integrity.**  Before a path is handed out (to be ``dlopen``-ed), the object's SHA-256
  is compared with its entry.  A missing, truncated, empty, foreign or planted object,
  or an unreadable entry, is counted as *corrupt*, removed, and rebuilt: it is never
  loaded.  The cache directory must belong to the current user and not be writable by
  group or others; otherwise (and when it cannot be written at all) builds go to a
  private per-process directory instead, with a warning.
* **Durability.**  Objects and entries are ``fsync``-ed before their rename, and the
  directory after it, so a crash leaves either the old state or the complete new one.
* **Size cap.**  ``$POLYCOMP_CACHE_MAX_MB`` (MiB, default 1024; ``$POLYCOMP_CACHE_MAX_BYTES``
  is read when it is unset): after a store that brings the cache over the cap, the least
  recently used entries are evicted until the objects fit (the entry just stored is
  kept).  A value that is not a positive number is reported with a warning and the
  default is used.  The directory is listed (entries' mtimes, objects' sizes: one
  ``stat`` each, no entry is read) at a process's first store, at every
  ``RESCAN_STORES``-th and whenever the process's running total (the last listing plus
  what it stored since) passes the cap; so stores by *other* processes since the last
  listing can leave the cache over the cap by what they wrote until this process's next
  listing.  (Listing at every store made each build cost O(entries) file reads: a
  13 600-entry cache read 27 000 JSON files per kernel built, and the test suite, which
  fills a cold cache with thousands of kernels, spent minutes of CPU in it.)

``polycomp cache info`` and ``polycomp cache clear`` show and empty it.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

DEFAULT_MAX_BYTES = 1 << 30
RESCAN_STORES = 64           # a process re-lists the cache at least every this many stores
ORPHAN_AGE_S = 60.0          # objects without an entry older than this are swept
BUILD_LOCK_WAIT_S = 600.0    # a process waits this long for another's build of a key


def default_dir() -> str:
    """``$POLYCOMP_CACHE_DIR`` or ``~/.cache/polycomp``."""
    return os.environ.get("POLYCOMP_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "polycomp")


def default_max_bytes() -> int:
    """The size cap: ``$POLYCOMP_CACHE_MAX_MB`` (MiB), else ``$POLYCOMP_CACHE_MAX_BYTES``,
    else 1 GiB; a bad value warns and falls back to the default."""
    for var, unit in (("POLYCOMP_CACHE_MAX_MB", 1 << 20), ("POLYCOMP_CACHE_MAX_BYTES", 1)):
        v = os.environ.get(var)
        if v is None or not v.strip():
            continue
        try:
            n = float(v)
        except ValueError:
            n = float("nan")
        if not (n > 0 and n * unit < 1 << 62):       # NaN, 0, negative, inf, absurd
            _warn_once(f"polycomp: ${var}={v!r} is not a positive number; using the "
                       f"default cache cap of {DEFAULT_MAX_BYTES >> 20} MiB")
            return DEFAULT_MAX_BYTES
        return max(1, int(n * unit))
    return DEFAULT_MAX_BYTES


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)


def compiler_version(exe: str) -> str:
    """The compiler's identity in every key built with ``exe`` (a command, possibly with
    arguments: ``ccache gcc``): the resolved path of the executable ``PATH`` finds for
    its first word, its other words, and the ``--version`` text of the command."""
    try:
        words = shlex.split(exe) or [exe]
    except ValueError:
        words = [exe]
    found = shutil.which(words[0])
    real = os.path.realpath(found) if found else words[0]
    cmd = (real, *words[1:])
    return f"{' '.join(cmd)}\n{_version_text(cmd)}"


def precompiled_header_in(directory: str, name: str, text: str, argv: list[str]) -> str | None:
    """``directory/name`` holding ``text`` beside its precompiled form ``name.gch``, made
    once by ``argv + [header, "-o", header.gch]`` (a compiler command with its language
    and flags, e.g. ``["gcc", "-O3", "-x", "c-header"]``); None when the compiler cannot
    make one.  The pair is written in a private temporary directory and moved in
    atomically, the text first, so a concurrent process sees either no ``.gch`` or a
    complete pair (a ``.gch`` is never alone).  Callers key ``directory`` by compiler,
    flags and text: the compiler reads the ``.gch`` only when a compile's flags match."""
    header = os.path.join(directory, name)
    if os.path.exists(header + ".gch"):
        return header
    try:
        os.makedirs(directory, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=directory)
    except OSError:
        return None
    try:
        th = os.path.join(tmp, name)
        with open(th, "w") as f:
            f.write(text)
        r = subprocess.run([*argv, th, "-o", th + ".gch"], capture_output=True, text=True)
        if r.returncode != 0 or not os.path.isfile(th + ".gch"):
            return None
        if not os.path.exists(header):
            os.replace(th, header)
        os.replace(th + ".gch", header + ".gch")
    except OSError:
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return header


@functools.lru_cache(maxsize=None)
def _version_text(cmd: tuple[str, ...]) -> str:
    try:
        r = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=60)
        return (r.stdout or r.stderr).strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _fsync_dir(path: str) -> None:
    """Make a rename in directory ``path`` durable (no-op where directories cannot be
    opened, e.g. Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def make_key(kind: str, *parts: str) -> str:
    """The cache key of an artifact of ``kind`` built from ``parts`` (source, compiler,
    flags...); polycomp's version is always part of it."""
    from polycomp.version import __version__
    text = "\0".join([kind, __version__, *parts])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class CacheInfo:
    """What ``polycomp cache info`` prints."""
    directory: str
    entries: int
    bytes: int
    max_bytes: int
    hits: int
    misses: int
    rebuilt: int            # corrupt entries found (and rebuilt) by this process
    private: bool           # builds go to a per-process directory (cache unusable)

    def render(self) -> str:
        mode = " (not usable: builds go to a private per-process directory)" \
            if self.private else ""
        return (f"cache directory: {self.directory}{mode}\n"
                f"entries: {self.entries}\n"
                f"size: {self.bytes} bytes (cap {self.max_bytes} bytes = "
                f"{self.max_bytes / (1 << 20):g} MiB, $POLYCOMP_CACHE_MAX_MB)\n"
                f"this process: {self.hits} hits, {self.misses} misses, "
                f"{self.rebuilt} corrupt entries rebuilt")


@dataclass
class _Memo:
    path: str
    stat: tuple[int, int, int]      # (inode, size, mtime_ns) of the verified object


@dataclass
class KernelCache:
    """An on-disk artifact cache with an in-process memo (see the module docstring)."""
    root: str = field(default_factory=default_dir)
    max_bytes: int = field(default_factory=default_max_bytes)
    hits: int = 0
    misses: int = 0
    rebuilt: int = 0
    _memo: dict[str, _Memo] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _private: str | None = None
    #: the objects' total size at this process's last listing plus what it stored since
    #: (None: not listed yet), and its stores since that listing (see "Size cap")
    _running_total: int | None = None
    _stores_since_listing: int = 0

    # ----------------------------------------------------------------- layout
    def _dirs(self) -> tuple[str, str, str]:
        return (os.path.join(self.root, "entries"), os.path.join(self.root, "objects"),
                os.path.join(self.root, "tmp"))

    def _entry_path(self, key: str) -> str:
        return os.path.join(self.root, "entries", key + ".json")

    def usable(self) -> bool:
        """The cache directory exists (or was created), belongs to this user, is not
        writable by group/others, and can be written."""
        try:
            for d in (self.root, *self._dirs()):
                os.makedirs(d, mode=0o700, exist_ok=True)
            st = os.stat(self.root)
        except OSError:
            return False
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return False
        if st.st_mode & 0o022:
            return False
        return all(os.access(d, os.W_OK | os.X_OK) for d in self._dirs())

    # ----------------------------------------------------------------- lookup
    def _read_entry(self, key: str) -> dict | None:
        try:
            with open(self._entry_path(key)) as f:
                e = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return e if isinstance(e, dict) else {}

    def _verified(self, key: str) -> str | None:
        """The path of ``key``'s object if its hash matches its entry; a corrupt entry
        is removed (and counted) and None returned."""
        e = self._read_entry(key)
        if e is None:
            return None
        name = e.get("file")
        path = os.path.join(self.root, "objects", name) if isinstance(name, str) and \
            os.path.basename(name) == name else None
        memo = self._memo.get(key)
        try:
            if path is None:
                raise ValueError("entry without a valid object name")
            st = os.stat(path)
            sig = (st.st_ino, st.st_size, st.st_mtime_ns)
            if memo and memo.path == path and memo.stat == sig:
                return path
            if st.st_size != e.get("size") or _sha256_file(path) != e.get("sha256"):
                raise ValueError("hash mismatch")
        except (OSError, ValueError):
            self.rebuilt += 1
            self._memo.pop(key, None)
            self._remove(key, path)
            return None
        self._memo[key] = _Memo(path, sig)
        return path

    def _remove(self, key: str, path: str | None) -> None:
        for p in (self._entry_path(key), path):
            if p:
                with contextlib.suppress(OSError):
                    os.unlink(p)

    def _touch(self, key: str) -> None:
        with contextlib.suppress(OSError):
            os.utime(self._entry_path(key))

    # ----------------------------------------------------------------- store
    def _atomic_write(self, dest: str, write: Callable[[str], None]) -> None:
        """Write ``dest`` through a temporary file in the cache's ``tmp/`` (same
        filesystem) and one ``os.replace``."""
        fd, tmp = tempfile.mkstemp(dir=os.path.join(self.root, "tmp"))
        os.close(fd)
        try:
            write(tmp)
            os.chmod(tmp, 0o600 if dest.endswith(".json") else 0o700)
            with open(tmp, "rb+") as f:          # the data before the name
                os.fsync(f.fileno())
            os.replace(tmp, dest)
            _fsync_dir(os.path.dirname(dest))    # the name itself
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def store(self, key: str, built: str, ext: str, kind: str = "") -> str:
        """Copy the file ``built`` (anywhere, any filesystem) into the cache as ``key``;
        return the object's path."""
        digest = _sha256_file(built)
        size = os.path.getsize(built)
        obj = os.path.join(self.root, "objects", f"{key}-{digest[:16]}{ext}")

        def copy(tmp: str) -> None:
            shutil.copyfile(built, tmp)

        def entry(tmp: str) -> None:
            with open(tmp, "w") as f:
                json.dump({"key": key, "file": os.path.basename(obj), "sha256": digest,
                           "size": size, "kind": kind}, f)

        self._atomic_write(obj, copy)
        self._atomic_write(self._entry_path(key), entry)
        st = os.stat(obj)
        self._memo[key] = _Memo(obj, (st.st_ino, st.st_size, st.st_mtime_ns))
        self._stores_since_listing += 1
        if self._running_total is not None:
            self._running_total += size
        if self._running_total is None or self._running_total > self.max_bytes or \
                self._stores_since_listing >= RESCAN_STORES:
            self.evict(keep=key)
        return obj

    # ----------------------------------------------------------------- main API
    def get_or_build(self, key: str, ext: str, build: Callable[[str], None],
                     kind: str = "") -> str:
        """The path of a verified artifact for ``key``; on a miss (or a corrupt entry)
        ``build(path)`` writes it to ``path`` in a fresh system temp dir and it is stored."""
        with self._lock:
            if not self.usable():
                return self._build_private(key, ext, build)
            path = self._verified(key)
            if path is not None:
                self.hits += 1
                self._touch(key)
                return path
        with self._build_lock(key) as stored:
            if stored is not None:    # another process built it while this one waited
                return stored
            with self._lock:
                self.misses += 1
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "artifact" + ext)
                build(out)
                with self._lock:
                    try:
                        return self.store(key, out, ext, kind)
                    except OSError:     # the directory became unwritable meanwhile
                        def copy(p: str) -> None:
                            shutil.copyfile(out, p)
                        return self._build_private(key, ext, copy)

    @contextlib.contextmanager
    def _build_lock(self, key: str):
        """Hold ``locks/<key>.lock`` (``flock``, exclusive) while ``key`` is built, so
        that processes (pytest-xdist workers, a graph's parallel compiles) missing the
        same key build it once: a waiter that gets the lock looks again and yields the
        path the builder stored (a hit), else None (build it).  The lock file is removed
        after the store; a waiter that then locks the removed file finds the entry all
        the same, so at worst two processes build (as without the lock).  Waits at most
        ``BUILD_LOCK_WAIT_S``, then builds; without ``fcntl`` (Windows), no lock."""
        try:
            import fcntl
        except ImportError:
            yield None
            return
        path = os.path.join(self.root, "locks", key + ".lock")
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError:
            yield None
            return
        try:
            deadline = time.monotonic() + BUILD_LOCK_WAIT_S
            locked = False
            while not locked:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    locked = True
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
                except OSError:
                    break
            with self._lock:
                found = self._verified(key)
                if found is not None:
                    self.hits += 1
                    self._touch(key)
            if found is not None:
                yield found
                return
            yield None
            if locked:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        finally:
            os.close(fd)

    def get_or_build_bytes(self, key: str, ext: str, build: Callable[[], bytes],
                           kind: str = "") -> bytes:
        """Like :meth:`get_or_build` for an artifact produced in memory (a cubin)."""
        def write(path: str) -> None:
            with open(path, "wb") as f:
                f.write(build())
        with open(self.get_or_build(key, ext, write, kind), "rb") as f:
            return f.read()

    def _build_private(self, key: str, ext: str, build: Callable[[str], None]) -> str:
        if self._private is None:
            self._private = tempfile.mkdtemp(prefix="polycomp-private-")
            atexit.register(shutil.rmtree, self._private, True)
            warnings.warn(f"polycomp: kernel cache {self.root} is not usable (missing "
                          f"permission, or writable by others); building in "
                          f"{self._private} for this process only", stacklevel=3)
        out = os.path.join(self._private, key + ext)
        if key in self._memo and os.path.exists(out):
            self.hits += 1
            return out
        self.misses += 1
        build(out)
        st = os.stat(out)
        self._memo[key] = _Memo(out, (st.st_ino, st.st_size, st.st_mtime_ns))
        return out

    # ----------------------------------------------------------------- maintenance
    def _object_sizes(self) -> dict[str, int]:
        """Key -> total size of the objects named ``<key>-<sha16><ext>`` (one listing of
        ``objects/``; an entry's object is one of them)."""
        sizes: dict[str, int] = {}
        odir = os.path.join(self.root, "objects")
        with contextlib.suppress(OSError), os.scandir(odir) as it:
            for d in it:
                key = d.name.split("-", 1)[0]
                with contextlib.suppress(OSError):
                    sizes[key] = sizes.get(key, 0) + d.stat().st_size
        return sizes

    def _entries(self) -> list[tuple[float, str, int]]:
        """(last use, key, object size) of every entry: a listing of ``entries/`` (their
        mtimes) and of ``objects/`` (the sizes), no entry file is read."""
        out = []
        sizes = self._object_sizes()
        edir = os.path.join(self.root, "entries")
        with contextlib.suppress(OSError), os.scandir(edir) as it:
            for d in it:
                if not d.name.endswith(".json"):
                    continue
                key = d.name[:-5]
                try:
                    mtime = d.stat().st_mtime
                except OSError:
                    continue
                out.append((mtime, key, sizes.get(key, 0)))
        return out

    def evict(self, keep: str | None = None) -> int:
        """Remove least recently used entries until the objects fit ``max_bytes`` (never
        ``keep``), and sweep old objects no entry refers to; returns entries removed."""
        entries = sorted(self._entries())
        total = sum(s for _, _, s in entries)
        removed = 0
        for _, key, size in entries:
            if total <= self.max_bytes:
                break
            if key == keep:
                continue
            e = self._read_entry(key) or {}
            f = e.get("file")
            self._remove(key, os.path.join(self.root, "objects", f)
                         if isinstance(f, str) and os.path.basename(f) == f else None)
            self._memo.pop(key, None)
            total -= size
            removed += 1
        self._running_total, self._stores_since_listing = total, 0
        self._sweep_orphans({key for _, key, _ in entries})
        return removed

    def _sweep_orphans(self, keys: set[str]) -> None:
        """Remove objects and temporary files older than ``ORPHAN_AGE_S`` whose key has
        no entry (``keys``: the entries listed; an object is named after its key)."""
        now = time.time()
        odir, tdir = os.path.join(self.root, "objects"), os.path.join(self.root, "tmp")
        by_key: dict[str, list[str]] = {}
        for name in os.listdir(odir) if os.path.isdir(odir) else ():
            by_key.setdefault(name.split("-", 1)[0], []).append(name)
        stale = [os.path.join(tdir, n) for n in (os.listdir(tdir) if os.path.isdir(tdir)
                                                  else ())]
        for key, names in by_key.items():
            live: set[str] = set()
            if key in keys:      # one object: the entry's; several: read which one it is
                f = (self._read_entry(key) or {}).get("file") if len(names) > 1 \
                    else names[0]
                live = {f} if isinstance(f, str) else set()
            stale += [os.path.join(odir, n) for n in names if n not in live]
        for p in stale:
            with contextlib.suppress(OSError):
                if now - os.stat(p).st_mtime > ORPHAN_AGE_S:
                    os.unlink(p)

    def info(self) -> CacheInfo:
        entries = self._entries() if os.path.isdir(self.root) else []
        return CacheInfo(self.root, len(entries), sum(s for _, _, s in entries),
                         self.max_bytes, self.hits, self.misses, self.rebuilt,
                         self._private is not None or not self.usable())

    def clear(self) -> int:
        """Remove every entry and object (and the flat ``pc_<hash>.so`` files of the
        cache before this layout); returns the number of entries removed."""
        n = len(self._entries())
        with self._lock:
            for sub in ("entries", "objects", "tmp", "pch", "locks"):   # pch: preludes
                shutil.rmtree(os.path.join(self.root, sub), ignore_errors=True)
            for name in os.listdir(self.root) if os.path.isdir(self.root) else ():
                if name.startswith("pc_") and name.endswith(".so"):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(self.root, name))
            self._memo.clear()
        return n


_CACHES: dict[tuple[str, int], KernelCache] = {}


def get_cache() -> KernelCache:
    """The process's cache for the current ``$POLYCOMP_CACHE_DIR`` / size cap."""
    k = (os.path.abspath(default_dir()), default_max_bytes())
    c = _CACHES.get(k)
    if c is None:
        c = _CACHES[k] = KernelCache(k[0], k[1])
    return c


# --------------------------------------------------------------------------- CLI


def add_cli(sub, parents) -> None:
    """Register ``polycomp cache info|clear`` on the CLI's subparsers."""
    p = sub.add_parser("cache", parents=parents, help="show or empty the kernel cache",
                       description="`info`: directory, entries, size and cap of the kernel "
                       "cache; `clear`: remove every entry.")
    p.add_argument("action", choices=["info", "clear"])
    p.set_defaults(func=cmd_cache)


def cmd_cache(args) -> int:
    c = get_cache()
    if args.action == "clear":
        print(f"removed {c.clear()} entries from {c.root}")
    else:
        print(c.info().render())
    return 0
