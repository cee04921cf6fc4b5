"""Kernel confinement of the cell worker: namespaces, Landlock, no-new-privs, seccomp.

`confine()` runs inside the cell worker (agents/cellworker.py) once, before
the first cell, while the process is still single-threaded.  Each layer is a
mechanism of the Linux kernel that an unprivileged process can apply to
itself; each is tried in turn and reported as applied or not:

* ``user_namespace`` -- `unshare(CLONE_NEWUSER)`: the worker's capabilities
  exist only in a namespace of its own (and are then dropped), so nothing it
  does is privileged towards the rest of the machine, root's processes included;
* ``network`` -- `unshare(CLONE_NEWNET)`: a network namespace with nothing
  but a loopback device that is down: no address to reach, no name to resolve;
* ``filesystem`` -- Landlock: read-only access to the interpreter, the
  virtual environment and system libraries, read-write access in the
  episode's `work/` directory, nothing else (no `$HOME`, no other trace);
  no `execve` of any file;
* ``tcp`` -- Landlock (ABI >= 4): no TCP bind or connect, on any port;
* ``scopes`` -- Landlock (ABI >= 6): no signal to, and no abstract Unix socket
  of, any process outside the worker (the simulator process included);
* ``no_new_privs`` -- `PR_SET_NO_NEW_PRIVS`: no set-uid gain, ever;
* ``seccomp`` -- a BPF filter: `socket()` of any family, new processes
  (`fork`, `vfork`, `clone` without `CLONE_THREAD`, `clone3`), `io_uring`,
  `ptrace`, new namespaces, mounts, BPF, perf, keyrings and kernel modules
  fail with EPERM (`REFUSED_SYSCALLS`).  Threads still start.  The worker's one channel to
  the simulator is a socket pair created before confinement.

Mode `required` raises `SandboxUnavailable` naming the first layer that could
not be applied; `best_effort` applies what it can and reports the rest;
`off` applies nothing.  The environment variable `CELLBENCH_SANDBOX_UNAVAILABLE`
(comma-separated layer names) makes those layers report themselves
unavailable, to check how an episode behaves on a kernel without them.

The PyPI `landlock` package (1.0.0.dev5) handles filesystem rules only
(ABI 1's ruleset struct, no network rules, no scopes), so Landlock is
called here through its three system calls with ctypes.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys

MODES = ("required", "best_effort", "off")
LAYERS = ("user_namespace", "network", "filesystem", "tcp", "scopes", "no_new_privs", "seccomp")
UNAVAILABLE_ENV = "CELLBENCH_SANDBOX_UNAVAILABLE"

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_CLONE_THREAD = 0x00010000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

# Landlock (include/uapi/linux/landlock.h); the syscall numbers are the same on x86_64 and aarch64.
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1, 2, 4, 8
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 16, 32, 64, 128
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK, FS_MAKE_SYM = 256, 512, 1024, 2048, 4096
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 8192, 16384, 32768
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2

_READ = FS_READ_FILE | FS_READ_DIR
_WRITE = (FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SYM)


class SandboxUnavailable(RuntimeError):
    """Mode `required` and a layer could not be applied."""


def _fs_handled(abi: int) -> int:
    handled = (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_READ_DIR | FS_REMOVE_DIR | FS_REMOVE_FILE
               | FS_MAKE_CHAR | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_BLOCK
               | FS_MAKE_SYM)
    if abi >= 2:
        handled |= FS_REFER
    if abi >= 3:
        handled |= FS_TRUNCATE
    if abi >= 5:
        handled |= FS_IOCTL_DEV
    return handled


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where Landlock is absent or disabled."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    ret = libc.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                       ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    return int(ret) if ret > 0 else 0


def read_roots() -> list[str]:
    """What Python and numpy need to run and import: interpreter, venv, system libraries."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))}
    roots.update(p for p in sys.path if p and os.path.isdir(p) and "site-packages" in p)
    roots.update(("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo",
                  "/etc/ld.so.cache", "/etc/localtime", "/dev/urandom", "/dev/random", "/proc/self"))
    return sorted(r for r in roots if os.path.exists(r))


def _map_ids(uid: int, gid: int) -> None:
    """Inside the new user namespace, be the same uid and gid as outside."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def _drop_capabilities() -> None:
    """capset(2) with empty sets: the full set unshare() gave in the new namespace goes."""
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    libc = _libc()
    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    _check(libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _namespaces(want_user: bool, want_net: bool, map_ids) -> tuple[bool, bool]:
    libc = _libc()
    flags = (_CLONE_NEWUSER if want_user else 0) | (_CLONE_NEWNET if want_net else 0)
    if not flags:
        return False, False
    if want_net and not want_user and os.geteuid() != 0:
        return False, False  # a network namespace needs CAP_SYS_ADMIN: the user namespace gives it
    uid, gid = os.geteuid(), os.getegid()  # before: unmapped, they read as the overflow id
    _check(libc.unshare(flags), "unshare")
    if want_user:
        # Kernels may require CAP_SETFCAP outside the namespace to map uid 0: root's worker asks its parent.
        if uid != 0 or map_ids is None:
            _map_ids(uid, gid)
        else:
            map_ids()
        _drop_capabilities()
    return want_user, want_net


def _landlock(abi: int, workdir: str, reads: list[str], want_fs: bool, want_tcp: bool,
              want_scopes: bool) -> tuple[bool, bool, bool]:
    fs = _fs_handled(abi) if want_fs else 0
    net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if want_tcp and abi >= 4 else 0
    scoped = (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if want_scopes and abi >= 6 else 0
    if not (fs or net or scoped):
        return False, False, False
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    attr = struct.pack("=QQQ", fs, net, scoped)
    size = 24 if scoped else 16 if net else 8
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(libc.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), buf, ctypes.c_size_t(size),
                                  ctypes.c_uint32(0)), "landlock_create_ruleset")
    try:
        if fs:
            file_only = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
            rules = [(p, _READ) for p in reads]
            rules += [(workdir, _READ | _WRITE | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)),
                      ("/dev/null", FS_READ_FILE | FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0))]
            for path, access in rules:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    if not os.path.isdir(path):
                        access &= file_only
                    access &= fs
                    rule = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
                    _check(libc.syscall(ctypes.c_long(_SYS_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset),
                                        ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH), rule, ctypes.c_uint32(0)),
                           f"landlock_add_rule {path}")
                finally:
                    os.close(fd)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)),
               "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return bool(fs), bool(net), bool(scoped)


# seccomp-BPF: (arch, {syscall name: number}) of the machines the filter knows.
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYSCALLS = {
    "x86_64": {"socket": 41, "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "io_uring_setup": 425,
               "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "unshare": 272, "setns": 308,
               "mount": 165, "umount2": 166, "pivot_root": 155, "bpf": 321, "perf_event_open": 298,
               "userfaultfd": 323, "add_key": 248, "request_key": 249, "keyctl": 250, "init_module": 175,
               "delete_module": 176, "finit_module": 313, "kexec_load": 246, "kexec_file_load": 320},
    "aarch64": {"socket": 198, "clone": 220, "clone3": 435, "io_uring_setup": 425, "ptrace": 117,
                "process_vm_readv": 270, "process_vm_writev": 271, "unshare": 97, "setns": 268, "mount": 40,
                "umount2": 39, "pivot_root": 41, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
                "add_key": 217, "request_key": 218, "keyctl": 219, "init_module": 105, "delete_module": 106,
                "finit_module": 273, "kexec_load": 104, "kexec_file_load": 294},
}
#: Refused outright (EPERM): besides sockets and processes, the kernel's larger attack surface a cell never
#: needs (new namespaces, where it would regain capabilities; mounts; BPF; perf; keyrings; modules).
REFUSED_SYSCALLS = ("socket", "fork", "vfork", "io_uring_setup", "ptrace", "process_vm_readv",
                    "process_vm_writev", "unshare", "setns", "mount", "umount2", "pivot_root", "bpf",
                    "perf_event_open", "userfaultfd", "add_key", "request_key", "keyctl", "init_module",
                    "delete_module", "finit_module", "kexec_load", "kexec_file_load")
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JSET_K, _BPF_RET_K = 0x20, 0x15, 0x45, 0x06
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO, _SECCOMP_RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000


def _seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """BPF instructions (code, jt, jf, k): refuse sockets, new processes and `REFUSED_SYSCALLS`."""
    nrs = _SYSCALLS[machine]
    eperm = _SECCOMP_RET_ERRNO | errno.EPERM
    prog = [(_BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
            (_BPF_JEQ_K, 1, 0, _AUDIT_ARCH[machine]),
            (_BPF_RET_K, 0, 0, _SECCOMP_RET_KILL_PROCESS),  # a foreign ABI (int 0x80): no way around the filter
            (_BPF_LD_W_ABS, 0, 0, 0)]  # seccomp_data.nr
    if machine == "x86_64":
        prog += [(0x35, 0, 1, 0x40000000), (_BPF_RET_K, 0, 0, eperm)]  # JGE: x32 system calls
    # clone: a thread (CLONE_THREAD in the low word of args[0]) may start; a process may not.
    prog += [(_BPF_JEQ_K, 0, 4, nrs["clone"]),
             (_BPF_LD_W_ABS, 0, 0, 16),
             (_BPF_JSET_K, 1, 0, _CLONE_THREAD),
             (_BPF_RET_K, 0, 0, eperm),
             (_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW)]
    # clone3 passes its flags in memory the filter cannot read: ENOSYS makes glibc fall back to clone.
    prog += [(_BPF_JEQ_K, 0, 1, nrs["clone3"]), (_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | errno.ENOSYS)]
    for name in REFUSED_SYSCALLS:
        if name in nrs:
            prog += [(_BPF_JEQ_K, 0, 1, nrs[name]), (_BPF_RET_K, 0, 0, eperm)]
    prog.append((_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW))
    return prog


def _seccomp() -> bool:
    machine = platform.machine()
    if machine not in _SYSCALLS:
        return False
    prog = _seccomp_program(machine)
    filt = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *ins) for ins in prog), 8 * len(prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.cast(filt, ctypes.c_void_p))
    libc = _libc()
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "prctl(PR_SET_SECCOMP)")
    return True


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def write_id_maps(pid: int) -> None:
    """From the parent: map the worker's uid and gid (root's, which it cannot map itself) 1:1."""
    uid, gid = os.geteuid(), os.getegid()
    with open(f"/proc/{pid}/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open(f"/proc/{pid}/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def confine(workdir: str, mode: str = "best_effort", map_ids=None) -> dict:
    """Apply every layer this kernel offers to the calling process; report which were applied.

    `map_ids()` asks the parent to write the id maps (`write_id_maps`) where this
    process cannot.  Returns {layer: bool, ..., "mode": mode, "landlock_abi": n, "unavailable": {layer: why}}.
    Raises SandboxUnavailable in mode `required` when a layer is missing.
    """
    if mode not in MODES:
        raise ValueError(f"episode.sandbox must be one of {', '.join(MODES)}, got {mode!r}")
    applied = {layer: False for layer in LAYERS}
    why: dict[str, str] = {}
    report = {**applied, "mode": mode, "landlock_abi": 0, "unavailable": why}
    if mode == "off":
        return report
    switched_off = {s.strip() for s in os.environ.get(UNAVAILABLE_ENV, "").split(",") if s.strip()}
    for layer in switched_off & set(LAYERS):
        why[layer] = f"switched off by {UNAVAILABLE_ENV}"
    if _threads() != 1:  # unshare(CLONE_NEWUSER) and a one-thread seccomp filter need a single thread
        raise RuntimeError(f"confine() needs a single-threaded process, this one has {_threads()} threads")
    want = {layer: layer not in switched_off for layer in LAYERS}

    try:
        user, net = _namespaces(want["user_namespace"], want["network"], map_ids)
        applied["user_namespace"], applied["network"] = user, net
    except OSError as e:
        for layer in ("user_namespace", "network"):
            if want[layer]:
                why[layer] = str(e)
    abi = landlock_abi()
    report["landlock_abi"] = abi
    if abi == 0:
        for layer in ("filesystem", "tcp", "scopes"):
            if want[layer]:
                why[layer] = "Landlock is not available in this kernel"
    else:
        try:
            fs, tcp, scopes = _landlock(abi, os.path.realpath(workdir), read_roots(), want["filesystem"],
                                        want["tcp"], want["scopes"])
            applied["filesystem"], applied["tcp"], applied["scopes"] = fs, tcp, scopes
            if want["tcp"] and not tcp:
                why["tcp"] = f"Landlock ABI {abi} has no network rules (needs 4)"
            if want["scopes"] and not scopes:
                why["scopes"] = f"Landlock ABI {abi} has no scopes (needs 6)"
        except OSError as e:
            for layer in ("filesystem", "tcp", "scopes"):
                if want[layer]:
                    why[layer] = str(e)
    if want["no_new_privs"]:
        try:
            _check(_libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
            applied["no_new_privs"] = True
        except OSError as e:
            why["no_new_privs"] = str(e)
    if want["seccomp"]:
        try:
            applied["seccomp"] = _seccomp()
            if not applied["seccomp"]:
                why["seccomp"] = f"no seccomp filter for {platform.machine()}"
        except OSError as e:
            why["seccomp"] = str(e)
    report.update(applied)
    missing = [layer for layer in LAYERS if not applied[layer]]
    if mode == "required" and missing:
        first = missing[0]
        raise SandboxUnavailable(f"episode.sandbox is 'required' but the {first!r} layer is unavailable: "
                                 f"{why.get(first, 'not applied')}")
    return report
