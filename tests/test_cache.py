"""The kernel cache (polycomp/cache.py) and the build path through it (issue #12 item 6,
issue #14 item 7 and the cross-device ``os.replace`` failure).

Every test gets its own cache directory (``POLYCOMP_CACHE_DIR``).  The C sources are tiny
hand-written kernels so a build costs one short gcc run.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from polycomp import cache as pcache
from polycomp.hw.cpu import build as cbuild

SRC_ADD = "void kern(int *x) { *x += 1; }\n"
SRC_MUL = "void kern(int *x) { *x *= 3; }\n"     # another kernel, same function name
FLAGS = ("-O1", "-fPIC", "-shared")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(d))
    monkeypatch.delenv("POLYCOMP_CACHE_MAX_BYTES", raising=False)
    monkeypatch.delenv("POLYCOMP_CACHE_MAX_MB", raising=False)
    pcache._CACHES.clear()
    pcache._WARNED.clear()
    yield d
    pcache._CACHES.clear()


def build(src=SRC_ADD):
    return cbuild.build_shared(src, flags=FLAGS, libs=())


def run(path, value=10):
    x = ctypes.c_int(value)
    ctypes.CDLL(path).kern(ctypes.byref(x))
    return x.value


def entry_of(path):
    key = os.path.basename(path).split("-")[0]
    return os.path.join(os.path.dirname(os.path.dirname(path)), "entries", key + ".json")


def test_hit_in_process_and_on_disk(cache_dir):
    p1 = build()
    c = pcache.get_cache()
    assert (c.hits, c.misses) == (0, 1)
    assert build() == p1 and c.hits == 1
    assert str(p1).startswith(str(cache_dir)) and run(p1) == 11
    pcache._CACHES.clear()                 # a new process: the disk entry is verified
    assert build() == p1 and pcache.get_cache().hits == 1
    e = json.load(open(entry_of(p1)))
    assert e["size"] == os.path.getsize(p1) and e["kind"] == "c-so"


def test_key_covers_source_flags_and_compiler_version(cache_dir, monkeypatch):
    p_add, p_mul = build(SRC_ADD), build(SRC_MUL)
    assert p_add != p_mul and run(p_add) == 11 and run(p_mul) == 30
    assert cbuild.build_shared(SRC_ADD, flags=("-O2", "-fPIC", "-shared"), libs=()) != p_add
    monkeypatch.setattr(pcache, "compiler_version", lambda exe: "gcc 99.0 (another)")
    assert build(SRC_ADD) != p_add


@pytest.mark.parametrize("damage", ["truncate", "empty", "random", "foreign", "planted",
                                    "missing", "entry-garbage"])
def test_corrupt_entry_is_rebuilt_never_loaded(cache_dir, tmp_path, damage):
    """#14 item 7: a truncated .so (SIGBUS when loaded), an empty or random file (OSError),
    another kernel's .so with the same function name, a planted .so with a constructor:
    the hash check rejects each and the entry is rebuilt."""
    good = build(SRC_ADD)
    marker = tmp_path / "constructor_ran"
    data = open(good, "rb").read()
    if damage == "truncate":
        open(good, "wb").write(data[: len(data) // 2])
    elif damage == "empty":
        open(good, "wb").close()
    elif damage == "random":
        open(good, "wb").write(os.urandom(len(data)))
    elif damage == "foreign":
        other = build(SRC_MUL)
        open(good, "wb").write(open(other, "rb").read())
    elif damage == "planted":
        src = tmp_path / "evil.c"
        src.write_text(textwrap.dedent(f"""
            #include <stdio.h>
            __attribute__((constructor)) static void evil(void) {{
                FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}
            void kern(int *x) {{ *x = -1; }}
        """))
        subprocess.run(["gcc", *FLAGS, str(src), "-o", good], check=True)
    elif damage == "missing":
        os.unlink(good)
    else:
        open(entry_of(good), "w").write("{not json")
    pcache._CACHES.clear()                 # a later process
    again = build(SRC_ADD)
    assert run(again) == 11
    assert not marker.exists()
    c = pcache.get_cache()
    assert c.misses == 1 and c.rebuilt == 1
    pcache._CACHES.clear()
    assert build(SRC_ADD) == again and pcache.get_cache().hits == 1


def test_in_process_memo_notices_damage(cache_dir):
    p = build()
    open(p, "wb").write(b"\0" * 16)        # size and mtime change: re-verified
    q = build()
    assert run(q) == 11 and pcache.get_cache().rebuilt == 1


def test_truncated_so_in_a_later_process_does_not_crash(cache_dir):
    """The reported failure: every later process died with SIGBUS."""
    p = build()
    data = open(p, "rb").read()
    open(p, "wb").write(data[:4096])
    code = textwrap.dedent(f"""
        import ctypes
        from polycomp.hw.cpu.build import build_shared
        p = build_shared({SRC_ADD!r}, flags={FLAGS!r}, libs=())
        x = ctypes.c_int(1); ctypes.CDLL(p).kern(ctypes.byref(x)); print(x.value)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, POLYCOMP_CACHE_DIR=str(cache_dir)), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2"


def test_cross_filesystem_temp_dir(cache_dir, monkeypatch, tmp_path):
    """#14: build() failed with EXDEV when $TMPDIR and the cache are on different
    filesystems.  (1) a real tmpfs TMPDIR when the machine has one; (2) always: any
    rename across directories fails, as it would across devices."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        monkeypatch.setenv("TMPDIR", shm)
        monkeypatch.setattr("tempfile.tempdir", None)
        p = build(SRC_ADD)
        assert run(p) == 11
    real = os.replace

    def same_dir_only(src, dst, *a, **k):
        if os.path.dirname(os.path.abspath(src)) != \
                os.path.dirname(os.path.dirname(os.path.abspath(dst))) + "/tmp":
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", same_dir_only)
    p = build(SRC_MUL)
    assert run(p) == 30


def test_concurrent_builders_processes_and_threads(cache_dir):
    """Four processes and four threads build the same two kernels at once: each gets a
    verified library, and the cache ends with exactly one entry per kernel."""
    code = textwrap.dedent(f"""
        import ctypes, sys
        from polycomp.hw.cpu.build import build_shared
        src = {SRC_ADD!r} if sys.argv[1] == "0" else {SRC_MUL!r}
        x = ctypes.c_int(10)
        ctypes.CDLL(build_shared(src, flags={FLAGS!r}, libs=())).kern(ctypes.byref(x))
        print(x.value)
    """)
    env = dict(os.environ, POLYCOMP_CACHE_DIR=str(cache_dir))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i % 2)], env=env,
                              stdout=subprocess.PIPE, text=True) for i in range(4)]
    results: list[int] = []
    threads = [threading.Thread(target=lambda s=s: results.append(run(build(s))))
               for s in (SRC_ADD, SRC_MUL, SRC_ADD, SRC_MUL)]
    for t in threads:
        t.start()
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    for t in threads:
        t.join()
    assert [p.returncode for p in procs] == [0] * 4
    assert outs == ["11", "30", "11", "30"]
    assert sorted(results) == [11, 11, 30, 30]
    assert pcache.get_cache().info().entries == 2
    assert len(os.listdir(cache_dir / "tmp")) == 0


def test_builders_missing_the_same_key_build_it_once(cache_dir):
    """Two caches on one directory (two processes, e.g. pytest-xdist workers) miss the
    same key at once: the second waits for the first's build (its lock in ``locks/``)
    and hits; the lock file is gone afterwards.  (Before: both ran gcc; in
    tests/test_cpu_ops.py on two workers, 3 of 290 builds, each a 15-27 s SIMDe build.)"""
    calls: list[int] = []
    started = threading.Event()

    def slow_build(out: str) -> None:
        calls.append(1)
        started.set()
        threading.Event().wait(0.5)
        with open(out, "w") as f:
            f.write("artifact")

    caches = [pcache.KernelCache(str(cache_dir)), pcache.KernelCache(str(cache_dir))]
    paths: list[str] = []
    first = threading.Thread(target=lambda: paths.append(
        caches[0].get_or_build("k" * 64, ".bin", slow_build)))
    first.start()
    assert started.wait(30)
    paths.append(caches[1].get_or_build("k" * 64, ".bin", slow_build))
    first.join()
    assert len(calls) == 1 and paths[0] == paths[1]
    assert (caches[0].misses, caches[1].misses, caches[1].hits) == (1, 0, 1)
    assert os.listdir(cache_dir / "locks") == []


def test_unwritable_cache_dir_builds_privately(tmp_path, monkeypatch):
    """A cache path that cannot be created (its parent is a file: fails even for root)
    still builds, in a private per-process directory, with a warning."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(blocker / "cache"))
    pcache._CACHES.clear()
    with pytest.warns(UserWarning, match="not usable"):
        p = build()
    assert run(p) == 11 and not p.startswith(str(blocker))
    assert build() == p
    info = pcache.get_cache().info()
    assert info.private and info.entries == 0
    pcache._CACHES.clear()


def test_cache_writable_by_others_is_not_trusted(cache_dir):
    """A planted .so with a forged entry is only possible where others can write the
    directory: such a directory is not used at all."""
    good = build()
    os.chmod(cache_dir, 0o777)
    pcache._CACHES.clear()
    with pytest.warns(UserWarning, match="not usable"):
        p = build()
    assert p != good and run(p) == 11
    os.chmod(cache_dir, 0o700)
    pcache._CACHES.clear()


def test_size_cap_evicts_least_recently_used(cache_dir, monkeypatch):
    a = build(SRC_ADD)
    size = os.path.getsize(a)
    b = build(SRC_MUL)
    os.utime(entry_of(a), (1, 1))          # a: used long ago; b: just now
    os.utime(entry_of(b), (2, 2))
    build(SRC_ADD)                          # a hit: a becomes the most recent
    monkeypatch.setenv("POLYCOMP_CACHE_MAX_BYTES", str(2 * size + size // 2))
    pcache._CACHES.clear()
    c = build("void kern(int *x) { *x -= 5; }\n")
    assert run(c) == 5
    assert os.path.exists(a) and not os.path.exists(b)
    assert pcache.get_cache().info().entries == 2


def test_size_cap_in_mib_evicts_least_recently_used(cache_dir, monkeypatch):
    a = build(SRC_ADD)
    size = os.path.getsize(a)
    b = build(SRC_MUL)
    os.utime(entry_of(a), (2, 2))          # b: the least recently used
    os.utime(entry_of(b), (1, 1))
    monkeypatch.setenv("POLYCOMP_CACHE_MAX_MB", repr((2 * size + size // 2) / (1 << 20)))
    monkeypatch.setenv("POLYCOMP_CACHE_MAX_BYTES", "1")          # MiB wins when both set
    pcache._CACHES.clear()
    assert pcache.get_cache().max_bytes == 2 * size + size // 2
    c = build("void kern(int *x) { *x -= 5; }\n")
    assert run(c) == 5 and os.path.exists(a) and not os.path.exists(b)
    monkeypatch.setenv("POLYCOMP_CACHE_MAX_MB", "64")
    assert pcache.default_max_bytes() == 64 << 20


@pytest.mark.parametrize("value", ["abc", "-3", "0", "nan", "inf", "1e300", "12MB"])
def test_bad_cap_values_warn_and_fall_back(cache_dir, monkeypatch, value):
    monkeypatch.setenv("POLYCOMP_CACHE_MAX_MB", value)
    with pytest.warns(UserWarning, match=r"POLYCOMP_CACHE_MAX_MB=.* not a positive number"):
        assert pcache.default_max_bytes() == pcache.DEFAULT_MAX_BYTES
    pcache._CACHES.clear()
    assert run(build()) == 11                         # the cache still works


def test_entries_objects_and_directories_are_fsynced(cache_dir, monkeypatch):
    import stat
    synced = []
    real = os.fsync

    def spy(fd):
        st = os.fstat(fd)
        synced.append((stat.S_ISDIR(st.st_mode), st.st_ino))
        return real(fd)
    monkeypatch.setattr(pcache.os, "fsync", spy)
    p = build()
    dirs = {ino for is_dir, ino in synced if is_dir}
    files = [ino for is_dir, ino in synced if not is_dir]
    assert os.stat(os.path.dirname(p)).st_ino in dirs                    # objects/
    assert os.stat(os.path.dirname(entry_of(p))).st_ino in dirs          # entries/
    assert os.stat(p).st_ino in files and os.stat(entry_of(p)).st_ino in files


def test_key_has_the_compilers_realpath(cache_dir, tmp_path, monkeypatch):
    """Two compilers printing the same --version are told apart by their resolved path:
    a ``cc`` symlink moved to another compiler is another key."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("cc-a", "cc-b"):
        f = bindir / name
        f.write_text("#!/bin/sh\necho 'fakecc 1.0'\n")
        f.chmod(0o755)
    link = bindir / "fakecc"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    link.symlink_to(bindir / "cc-a")
    va = pcache.compiler_version("fakecc")
    link.unlink()
    link.symlink_to(bindir / "cc-b")
    vb = pcache.compiler_version("fakecc")
    assert va != vb and va.endswith("fakecc 1.0") and vb.endswith("fakecc 1.0")
    assert str(bindir / "cc-a") in va and str(bindir / "cc-b") in vb
    assert pcache.make_key("c-so", "src", "fakecc", va) != pcache.make_key("c-so", "src",
                                                                           "fakecc", vb)


def test_bytes_artifacts_for_cubins(cache_dir):
    calls = []

    def nvcc():
        calls.append(1)
        return b"\x7fELF fake cubin"
    c = pcache.get_cache()
    key = pcache.make_key("cubin", "__global__ void k(){}", "sm_80")
    assert c.get_or_build_bytes(key, ".cubin", nvcc) == b"\x7fELF fake cubin"
    assert c.get_or_build_bytes(key, ".cubin", nvcc) == b"\x7fELF fake cubin"
    assert calls == [1]


def test_cli_cache_info_and_clear(cache_dir, capsys):
    from polycomp.cli import main
    build(SRC_ADD), build(SRC_MUL)
    legacy = cache_dir / "pc_0123456789abcdef01234567.so"     # the layout before
    legacy.write_bytes(b"old")
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(cache_dir) in out and "entries: 2" in out
    assert main(["cache", "clear"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert not legacy.exists()
    assert main(["cache", "info"]) == 0
    assert "entries: 0" in capsys.readouterr().out
    assert run(build(SRC_ADD)) == 11


@pytest.mark.nvcc
def test_cuda_cubin_is_cached(cache_dir):
    from polycomp.hw.cuda.launcher import compile_cubin
    src = 'extern "C" __global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n'
    cubin = compile_cubin(src, 80)
    c = pcache.get_cache()
    assert cubin[:4] == b"\x7fELF" and c.misses == 1
    assert compile_cubin(src, 80) == cubin and c.hits == 1
    assert c.info().entries == 1


def test_stores_list_the_cache_rarely_and_still_keep_the_cap(cache_dir, monkeypatch):
    """A store lists the directory only at the process's first store, every
    ``RESCAN_STORES``-th, or when its running total passes the cap (listing at every
    store made each build cost O(entries) file reads); the cap still holds."""
    listings = []
    entries = pcache.KernelCache._entries

    def counted(self):
        listings.append(1)
        return entries(self)
    monkeypatch.setattr(pcache.KernelCache, "_entries", counted)
    monkeypatch.setattr(pcache, "RESCAN_STORES", 4)
    paths = [build(f"void kern(int *x) {{ *x += {v}; }}\n") for v in range(7)]
    assert len(listings) == 2                 # the first store and the fourth after it
    size = os.path.getsize(paths[0])
    monkeypatch.setenv("POLYCOMP_CACHE_MAX_BYTES", str(8 * size + size // 2))
    pcache._CACHES.clear()
    for v in range(7, 12):                    # the running total passes 8.5 objects
        build(f"void kern(int *x) {{ *x += {v}; }}\n")
    assert pcache.get_cache().info().entries == 8
    assert run(build("void kern(int *x) { *x += 11; }\n")) == 21   # kept: the newest
