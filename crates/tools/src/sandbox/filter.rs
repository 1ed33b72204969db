//! The seccomp filter a command runs under, beside Landlock: the sockets Landlock cannot
//! judge. Landlock handles TCP `connect` and `bind` by port, nothing else, so:
//!
//! - **UNIX sockets.** `socket(AF_UNIX, …)` is refused (`EACCES`), whatever the
//!   network setting: a pathname socket such as PostgreSQL's
//!   (`/var/run/postgresql/.s.PGSQL.5432`, where local trust authentication hands out
//!   the whole database), Docker's or a session bus is a door to a service running as
//!   someone else, and Landlock does not judge `connect` on one. `socketpair`, which
//!   makes an unnamed connected pair (pipes between a command's own processes), stays
//!   allowed.
//! - **MPTCP.** `socket(…, IPPROTO_MPTCP)` is refused: Landlock's port rules judge
//!   plain TCP sockets only, and an MPTCP socket connects to any TCP server (it falls
//!   back to plain TCP), so it walked past the closed ports (measured on Linux 6.18).
//! - **`network = false`.** Every `socket()` but netlink (interface and route
//!   queries, no traffic) is refused: UDP, which Landlock does not cover, and every
//!   other family that could carry traffic out.
//! - **io_uring.** `io_uring_setup` is refused (`EPERM`): a ring makes sockets and
//!   connects without the system calls this filter sees.
//! - **Other system-call ABIs.** A call through another architecture's entry (32-bit
//!   `int 0x80`) kills the process, and an x32 call on x86-64 fails with `ENOSYS`: the
//!   numbers checked here are the native ones, and those entries would slip past them.
//!
//! The program is plain classic BPF, built in the server before the fork; the child
//! only hands it to the kernel with one raw `seccomp` system call (async-signal-safe, no
//! allocation). Architectures other than x86-64 and aarch64 get no filter, and
//! [`supported`] says so.

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use libc::{BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W, sock_filter};

/// `AUDIT_ARCH_*` of the native system-call entry (`linux/audit.h`; not in `libc`).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// `IPPROTO_MPTCP` (`linux/in.h`).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const IPPROTO_MPTCP: u32 = 262;

/// Offsets into `struct seccomp_data`: `nr` (int), `arch` (u32), then the instruction
/// pointer (u64) and `args[6]` (u64 each). Both supported architectures are little
/// endian, so an argument's low 32 bits are at its own offset.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const NR: u32 = 0;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const ARCH: u32 = 4;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const fn arg(index: u32) -> u32 {
    16 + 8 * index
}

/// Whether commands get the filter on this architecture.
pub(crate) const fn supported() -> bool {
    cfg!(any(target_arch = "x86_64", target_arch = "aarch64"))
}

/// The compiled filter: the instructions a child hands to `seccomp(2)`.
#[derive(Clone, Debug)]
pub(crate) struct Filter {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    program: std::sync::Arc<[sock_filter]>,
}

/// Where a jump goes: the next instruction, or one of the shared returns at the end.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[derive(Clone, Copy, PartialEq)]
enum To {
    Next,
    Allow,
    Refuse,
    RefusePerm,
    NoSys,
    Kill,
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
enum Op {
    Load(u32),
    Jump { code: u32, k: u32, yes: To, no: To },
}

impl Filter {
    /// The filter for commands; `network` is the `[sandbox] network` setting.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    pub(crate) fn new(network: bool) -> Filter {
        let eq = |k: u32, yes: To, no: To| Op::Jump { code: BPF_JEQ, k, yes, no };
        let nr = |n: libc::c_long| u32::try_from(n).expect("system-call numbers are small");
        let mut ops = vec![Op::Load(ARCH), eq(AUDIT_ARCH, To::Next, To::Kill), Op::Load(NR)];
        #[cfg(target_arch = "x86_64")]
        ops.push(Op::Jump { code: BPF_JGE, k: 0x4000_0000, yes: To::NoSys, no: To::Next });
        ops.extend([
            eq(nr(libc::SYS_io_uring_setup), To::RefusePerm, To::Next),
            eq(nr(libc::SYS_socket), To::Next, To::Allow),
            // socket(domain, type, protocol): the domain first.
            Op::Load(arg(0)),
            eq(libc::AF_UNIX as u32, To::Refuse, To::Next),
        ]);
        if !network {
            ops.push(eq(libc::AF_NETLINK as u32, To::Allow, To::Refuse));
        }
        ops.extend([Op::Load(arg(2)), eq(IPPROTO_MPTCP, To::Refuse, To::Allow)]);
        Filter { program: assemble(&ops).into() }
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub(crate) fn new(_network: bool) -> Filter {
        Filter {}
    }

    /// Installs the filter on the calling thread; it is inherited across fork and exec.
    /// Runs in the child between fork and exec: one raw system call, no allocation.
    /// The caller has set no-new-privileges, which an unprivileged filter needs.
    ///
    /// # Safety
    /// Only async-signal-safe work happens here; the caller must be in a state where a
    /// raw system call is allowed (any, in `pre_exec`).
    pub(crate) unsafe fn install(&self) -> std::io::Result<()> {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        {
            let program = libc::sock_fprog {
                len: u16::try_from(self.program.len()).expect("a short program"),
                filter: self.program.as_ptr().cast_mut(),
            };
            // SAFETY: the kernel copies the program; the pointer is live for the call.
            let installed = unsafe {
                libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &program as *const libc::sock_fprog)
            };
            if installed != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Lays the operations out with the five returns at the end and resolves the jumps to
/// them (classic BPF jumps forward only, at most 255 instructions: this is ~16).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn assemble(ops: &[Op]) -> Vec<sock_filter> {
    let returns = [To::Allow, To::Refuse, To::RefusePerm, To::NoSys, To::Kill];
    let at = |to: To, from: usize| -> u8 {
        let target = match to {
            To::Next => from + 1,
            _ => ops.len() + returns.iter().position(|r| *r == to).expect("a return"),
        };
        u8::try_from(target - from - 1).expect("a short program")
    };
    let action = |to: To| match to {
        To::Allow => libc::SECCOMP_RET_ALLOW,
        To::Refuse => libc::SECCOMP_RET_ERRNO | libc::EACCES as u32,
        To::RefusePerm => libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        To::NoSys => libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        To::Kill | To::Next => libc::SECCOMP_RET_KILL_PROCESS,
    };
    let insn = |code: u32, jt: u8, jf: u8, k: u32| sock_filter { code: code as u16, jt, jf, k };
    let mut program: Vec<sock_filter> = ops
        .iter()
        .enumerate()
        .map(|(i, op)| match *op {
            Op::Load(offset) => insn(BPF_LD | BPF_W | BPF_ABS, 0, 0, offset),
            Op::Jump { code, k, yes, no } => insn(BPF_JMP | code | BPF_K, at(yes, i), at(no, i), k),
        })
        .collect();
    program.extend(returns.iter().map(|&r| insn(BPF_RET | BPF_K, 0, 0, action(r))));
    program
}
