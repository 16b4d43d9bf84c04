"""A seccomp filter (classic BPF, built here: no libseccomp needed) for the bwrap backend.

It refuses, with EPERM, the system calls an untrusted program has no business making and
that widen the kernel's attack surface — the same families Docker's default profile
blocks: new namespaces and mounts (``unshare``, ``setns``, ``mount``, the new mount API,
``clone`` with ``CLONE_NEWUSER``), tracing other processes (``ptrace``,
``process_vm_*``, ``pidfd_getfd``), kernel modules, kexec, BPF, perf events,
userfaultfd, io_uring, the kernel keyring, swap, reboot, host names, raw I/O ports, file
handles, quotas and the kernel log. ``clone3`` answers ENOSYS (its flags cannot be
inspected by BPF), so the C library falls back to ``clone``. Foreign system-call ABIs
(x32, i386) are refused too. x86-64 only; elsewhere the filter is skipped (reported by
``deciplane doctor``).
"""

from __future__ import annotations

import errno
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE = 56
CLONE3 = 435

# x86-64 numbers (checked against <asm/unistd_64.h>)
BLOCKED_X86_64 = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272,
    "setns": 308, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "move_mount": 429,
    "open_tree": 428, "fspick": 433, "mount_setattr": 442,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "keyctl": 250, "add_key": 248, "request_key": 249, "acct": 163, "swapon": 167,
    "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172,
    "ioperm": 173, "open_by_handle_at": 304, "name_to_handle_at": 303,
    "lookup_dcookie": 212, "quotactl": 179, "syslog": 103, "vhangup": 153,
}

# classic BPF opcodes
LD_W_ABS = 0x20     # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x15        # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x35        # BPF_JMP | BPF_JGE | BPF_K
JSET_K = 0x45       # BPF_JMP | BPF_JSET | BPF_K
RET_K = 0x06        # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def supported() -> tuple[bool, str]:
    if platform.machine() not in ("x86_64", "amd64"):
        return False, f"seccomp filter is x86-64 only (this is {platform.machine()})"
    return True, f"seccomp: {len(BLOCKED_X86_64)} system calls refused"


def filter_program() -> bytes:
    """The compiled filter (``struct sock_filter[]``), as bwrap's ``--seccomp FD`` wants.

    Layout: check arch; refuse x32; ``clone`` with CLONE_NEWUSER -> EPERM; ``clone3`` ->
    ENOSYS; each blocked number -> EPERM; everything else allowed."""
    eperm = RET_ERRNO | errno.EPERM
    prog = [
        _ins(LD_W_ABS, 0, 0, 4),                              # A = arch
        _ins(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        _ins(RET_K, 0, 0, RET_KILL_PROCESS),
        _ins(LD_W_ABS, 0, 0, 0),                              # A = nr
        _ins(JGE_K, 0, 1, X32_SYSCALL_BIT),
        _ins(RET_K, 0, 0, eperm),
        _ins(JEQ_K, 0, 1, CLONE3),
        _ins(RET_K, 0, 0, RET_ERRNO | errno.ENOSYS),
        _ins(JEQ_K, 0, 4, CLONE),
        _ins(LD_W_ABS, 0, 0, 16),                             # A = low word of flags
        _ins(JSET_K, 0, 1, CLONE_NEWUSER),
        _ins(RET_K, 0, 0, eperm),
        _ins(RET_K, 0, 0, RET_ALLOW),
    ]
    nrs = sorted(BLOCKED_X86_64.values())
    for i, nr in enumerate(nrs):
        # match -> jump to the shared EPERM at the end (offset counts the rest)
        prog.append(_ins(JEQ_K, len(nrs) - i, 0, nr))
    prog.append(_ins(RET_K, 0, 0, RET_ALLOW))
    prog.append(_ins(RET_K, 0, 0, eperm))
    return b"".join(prog)
