"""The walls of the process that runs a learner's code (:mod:`.sandbox_child` raises them before
the first line of it runs). Each wall stands on its own; where the kernel lacks one, the others
still hold, and :func:`lock` says which stand.

* **audit hook** (:func:`sys.addaudithook`, which cannot be removed): opening a file outside the
  Python installation, the libraries and the child's own folder, listing or changing files
  outside them, starting a process (fork, exec, spawn, ``subprocess``, ``os.system``), signals to
  other processes, sockets, ``ctypes`` and sub-interpreters are refused with a
  :class:`PermissionError` that says so;
* **import gate** (first on ``sys.meta_path``): only the standard library (without ``ctypes``,
  ``subprocess``, ``multiprocessing``, sockets, ``resource`` and sub-interpreters), NumPy and
  matplotlib import; the course (``fraglab``), IPython, Jupyter, pytest do not;
* **Landlock** (Linux 5.13+): the same folders, read-only but for the child's own, enforced by the
  kernel (root included); no TCP; no signals out of the sandbox;
* **seccomp** (x86-64, arm64): no fork, no exec, no ptrace, no sockets, no reading another
  process's memory, no mounts or namespaces, no kill of another process;
* **capabilities** dropped, **rlimits** (CPU time, file size, open files, no core files).

This module imports nothing of the course: the child loads it by its path.
"""
from __future__ import annotations

import ctypes
import os
import resource
import struct
import sys

#: Standard-library modules the learner's code may not import (nor the jail's own ctypes later).
DENIED = frozenset(["ctypes", "_ctypes", "subprocess", "_posixsubprocess", "multiprocessing",
                    "_multiprocessing", "socket", "_socket", "ssl", "_ssl", "pty", "resource",
                    "_xxsubinterpreters", "_xxinterpchannels", "_interpreters", "_interpchannels",
                    "_posixshmem", "asyncio", "concurrent", "selectors", "select", "mmap",
                    "_testcapi", "_testinternalcapi", "faulthandler", "tracemalloc"])
#: Third-party packages besides the standard library (matplotlib with what it imports).
EXTRA = frozenset(["numpy", "matplotlib", "mpl_toolkits", "PIL", "pyparsing", "cycler",
                   "kiwisolver", "dateutil", "packaging", "fontTools", "contourpy", "six"])
#: Audit events refused outright, and prefixes of event families refused.
REFUSED_EVENTS = {
    "os.system": "runs a shell command", "os.exec": "starts a program",
    "os.spawn": "starts a program", "os.posix_spawn": "starts a program",
    "os.fork": "starts a process", "os.forkpty": "starts a process",
    "subprocess.Popen": "starts a program", "os.startfile": "starts a program",
    "pty.spawn": "starts a program", "code.__new__": "builds bytecode by hand",
    "sqlite3.enable_load_extension": "loads native code",
    "sqlite3.load_extension": "loads native code",
    "os.setns": "changes namespace", "os.unshare": "changes namespace",
}
REFUSED_PREFIXES = {"ctypes.": "calls native code", "socket.": "opens a network connection",
                    "_xxsubinterpreters.": "starts an interpreter without these rules",
                    "cpython.PyInterpreterState_New": "starts an interpreter without these rules"}
#: Audit events that change the file system, with the index of their path arguments.
FS_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.replace": (0, 1),
             "os.mkdir": (0,), "os.chmod": (0,), "os.chown": (0,), "os.link": (0, 1),
             "os.symlink": (0, 1), "os.truncate": (0,), "os.utime": (0,), "os.mkfifo": (0,),
             "os.mknod": (0,), "os.chflags": (0,), "os.lchflags": (0,), "os.setxattr": (0,),
             "os.removexattr": (0,), "shutil.rmtree": (0,)}
LIST_EVENTS = ("os.listdir", "os.scandir")


def refuse(what: str) -> PermissionError:
    return PermissionError(f"grading refused {what}: code of an exercise runs with no access to "
                           "the course, its solutions, other processes or the network")


class Gate:
    """A meta-path finder that refuses every import outside the allowed top-level names."""

    def __init__(self, allowed: frozenset):
        self.allowed = allowed

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in self.allowed:
            return None
        what = ("the course's modules (an exercise gets only what its check hands it)"
                if top == "fraglab" else "the standard library, NumPy and matplotlib only")
        raise ImportError(f"grading refused to import {name}: {what}", name=name)

    def find_module(self, name, path=None):       # the older finder protocol, refused alike
        self.find_spec(name, path)


def _real(path) -> str | None:
    if isinstance(path, int):
        return None
    try:
        return os.path.realpath(os.fsdecode(os.fspath(path)))
    except (TypeError, ValueError):
        return "?"


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def audit_hook(read_roots, write_root: str, pid: int):
    """The audit hook: reads under ``read_roots`` (and ``write_root``), changes under
    ``write_root`` only."""
    read_roots = tuple(read_roots) + (write_root,)
    devices = ("/dev/null", "/dev/urandom", "/dev/zero")

    def hook(event, args):
        if event == "open":
            path = _real(args[0])
            if path is None:
                return                      # an open file descriptor (the pipe, /dev/null)
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT
                                                    | os.O_TRUNC | os.O_APPEND))
            if path in devices or _under(path, (write_root,)):
                return
            if not writing and _under(path, read_roots):
                return
            raise refuse(f"to open {path}")
        if event in FS_EVENTS:
            for i in FS_EVENTS[event]:
                path = _real(args[i]) if i < len(args) else None
                if path is not None and not _under(path, (write_root,)):
                    raise refuse(f"{event} on {path}")
            return
        if event in LIST_EVENTS:
            path = _real(args[0] if args and args[0] is not None else ".")
            if path is not None and not _under(path, read_roots):
                raise refuse(f"to list {path}")
            return
        if event in ("os.kill", "os.killpg", "signal.pthread_kill"):
            if event != "os.kill" or args[0] not in (pid, 0):
                raise refuse("to signal another process")
            return
        if event == "sqlite3.connect" and args and args[0] not in (":memory:", b":memory:", ""):
            path = _real(args[0])
            if path is not None and not _under(path, (write_root,)):
                raise refuse(f"to open the database {path}")
            return
        why = REFUSED_EVENTS.get(event)
        if why is None:
            why = next((w for p, w in REFUSED_PREFIXES.items() if event.startswith(p)), None)
        if why is not None:
            raise refuse(f"{event} ({why})")
    return hook


# ---- Landlock --------------------------------------------------------------------------------

_SYS = {"x86_64": dict(landlock_create_ruleset=444, landlock_add_rule=445, landlock_restrict_self=446,
                       arch=0xC000003E),
        "aarch64": dict(landlock_create_ruleset=444, landlock_add_rule=445,
                        landlock_restrict_self=446, arch=0xC00000B7)}
_FS_RIGHTS = [(1, (1 << 13) - 1), (2, (1 << 14) - 1), (3, (1 << 15) - 1), (5, (1 << 16) - 1)]
_READ = (1 << 2) | (1 << 3)                         # READ_FILE | READ_DIR
_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)   # rights a file rule may hold


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock(read_roots, write_root: str) -> str | None:
    """Restrict this process with Landlock: reads under ``read_roots``, everything under
    ``write_root``, no TCP, no signals or abstract sockets out of the sandbox. Returns
    ``"landlock vN"`` or None where the kernel has none."""
    nr = _SYS.get(os.uname().machine)
    if nr is None:
        return None
    libc = _libc()
    abi = libc.syscall(nr["landlock_create_ruleset"], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return None
    fs = next(r for v, r in reversed(_FS_RIGHTS) if abi >= v)
    if abi >= 4:
        attr = struct.pack("=QQQ" if abi >= 6 else "=QQ", fs, 3, *((3,) if abi >= 6 else ()))
    else:
        attr = struct.pack("=Q", fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    rfd = libc.syscall(nr["landlock_create_ruleset"], buf, ctypes.c_size_t(len(attr)),
                       ctypes.c_uint32(0))
    if rfd < 0:
        return None
    try:
        rules = [(p, _READ) for p in read_roots] + [(write_root, fs)]
        rules += [(d, (1 << 1) | (1 << 2)) for d in ("/dev/null", "/dev/zero", "/dev/urandom")]
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(path):
                    rights &= _FILE_RIGHTS
                rule = ctypes.create_string_buffer(struct.pack("=Qi", rights & fs, fd), 12)
                if libc.syscall(nr["landlock_add_rule"], ctypes.c_int(rfd), ctypes.c_int(1),
                                rule, ctypes.c_uint32(0)) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:                     # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "no_new_privs")
        if libc.syscall(nr["landlock_restrict_self"], ctypes.c_int(rfd), ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(rfd)
    return f"landlock v{abi}"


# ---- seccomp ---------------------------------------------------------------------------------

#: Syscalls refused with EPERM: their numbers on x86_64 and on aarch64 (None: no such call there).
_DENY_NR = dict(
    fork=(57, None), vfork=(58, None), execve=(59, 221), execveat=(322, 281), ptrace=(101, 117),
    process_vm_readv=(310, 270), process_vm_writev=(311, 271), socket=(41, 198),
    socketpair=(53, 199), connect=(42, 203), mount=(165, 40), umount2=(166, 39),
    pivot_root=(155, 41), chroot=(161, 51), unshare=(272, 97), setns=(308, 268),
    open_by_handle_at=(304, 265), name_to_handle_at=(303, 264), bpf=(321, 280),
    perf_event_open=(298, 241), userfaultfd=(323, 282), io_uring_setup=(425, 425),
    init_module=(175, 105), finit_module=(313, 273), kexec_load=(246, 104), reboot=(169, 142),
    keyctl=(250, 219), add_key=(248, 217), request_key=(249, 218), pidfd_open=(434, 434),
    pidfd_getfd=(438, 438))
_DENY = {arch: {name: nr[i] for name, nr in _DENY_NR.items() if nr[i] is not None}
         for i, arch in enumerate(("x86_64", "aarch64"))}                   # by architecture
_CLONE = {"x86_64": 56, "aarch64": 220}
_KILL = {"x86_64": (62, 200), "aarch64": (129, 130)}     # kill, tkill: only to this process


def seccomp(pid: int) -> str | None:
    """Install the seccomp filter (see the module's docstring); None where unsupported."""
    machine = os.uname().machine
    if machine not in _DENY:
        return None
    LD, JEQ, JSET, JGE, RET = 0x20, 0x15, 0x45, 0x35, 0x06
    ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    prog = []                                             # (code, jt, jf, k), jumps fixed below

    def add(code, k, jt=0, jf=0):
        prog.append([code, jt, jf, k])

    add(LD, 4)                                            # arch
    add(JEQ, _SYS[machine]["arch"], 1, 0)
    add(RET, EPERM)
    add(LD, 0)                                            # syscall number
    add(JGE, 0x40000000, 0, 1)                            # x32 calls
    add(RET, EPERM)
    for n in sorted(set(_DENY[machine].values())):
        add(JEQ, n, 0, 1)
        add(RET, EPERM)
    add(JEQ, 435, 0, 1)                                   # clone3: glibc falls back to clone
    add(RET, ENOSYS)
    add(JEQ, _CLONE[machine], 0, 4)                       # clone: threads only
    add(LD, 16)
    add(JSET, 0x00010000, 0, 1)                           # CLONE_THREAD
    add(RET, ALLOW)
    add(RET, EPERM)
    for n in _KILL[machine]:
        add(JEQ, n, 0, 4)
        add(LD, 16)
        add(JEQ, pid, 0, 1)
        add(RET, ALLOW)
        add(RET, EPERM)
        add(LD, 0)                                        # (skipped on a match: numbers again)
    add(RET, ALLOW)
    raw = b"".join(struct.pack("=HBBI", *p) for p in prog)
    filt = ctypes.create_string_buffer(raw, len(raw))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fp = Fprog(len(prog), ctypes.addressof(filt))
    libc = _libc()
    if libc.prctl(38, 1, 0, 0, 0) != 0:                   # PR_SET_NO_NEW_PRIVS
        return None
    if libc.prctl(22, 2, ctypes.byref(fp), 0, 0) != 0:    # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        return None
    return "seccomp"


def drop_capabilities() -> str | None:
    """Drop every capability (a root child keeps its uid, not its privileges)."""
    libc = _libc()
    header = struct.pack("=Ii", 0x20080522, 0)            # _LINUX_CAPABILITY_VERSION_3, this pid
    data = bytes(24)
    if libc.capset(ctypes.create_string_buffer(header, 8), ctypes.create_string_buffer(data, 24)):
        return None
    return "no capabilities"


def limits() -> str:
    for what, value in ((resource.RLIMIT_CPU, 600), (resource.RLIMIT_FSIZE, 64 << 20),
                        (resource.RLIMIT_NOFILE, 256), (resource.RLIMIT_CORE, 0)):
        soft, hard = resource.getrlimit(what)
        new = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(what, (new, new))
    return "rlimits"


def die_with_parent() -> None:
    _libc().prctl(1, 9, 0, 0, 0)                          # PR_SET_PDEATHSIG, SIGKILL


def lock(read_roots, write_root: str) -> list[str]:
    """Raise every wall (in this order: the kernel's, then Python's). Returns their names."""
    import signal
    pid = os.getpid()
    read_roots = sorted({os.path.realpath(r) for r in read_roots if os.path.isdir(r)})
    write_root = os.path.realpath(write_root)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)         # a write past the limit fails instead
    layers = [limits()]
    for wall in (lambda: landlock(read_roots, write_root), drop_capabilities,
                 lambda: seccomp(pid)):
        try:
            got = wall()
        except OSError:
            got = None
        if got:
            layers.append(got)
    allowed = frozenset((set(sys.stdlib_module_names) | EXTRA) - DENIED) | {"__main__"}
    for name in list(sys.modules):
        if name.partition(".")[0] in DENIED:
            del sys.modules[name]
    sys.meta_path.insert(0, Gate(allowed))
    sys.addaudithook(audit_hook(read_roots, write_root, pid))
    return layers + ["import gate", "audit hook"]
