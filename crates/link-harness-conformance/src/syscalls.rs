//! The raw system calls the compromised-plugin test makes twice: in a plugin's place (the
//! `impostor` example) and as their allowed twins (`tests/compromised_plugin.rs`), and the
//! fork-connect-exit race on the host's control socket.

use std::io;
use std::os::unix::net::UnixStream;

/// `keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, create)`: the user's keyring.
pub fn keyring() -> io::Result<()> {
    const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
    const KEY_SPEC_USER_KEYRING: libc::c_long = -4;
    // SAFETY: keyctl with integer arguments only; nothing is read or written through them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_USER_KEYRING,
            1,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `process_vm_readv` of one byte at address 0 of `pid`: `EPERM` when the call is refused,
/// `EFAULT` when it is allowed (and the address checked).
pub fn read_memory(pid: i32) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let local = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 1,
    };
    // SAFETY: one local iovec over a live one-byte buffer; the remote one is only read by the
    // kernel, which checks it.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A Unix stream socket connected to `path` by a child this process forks, which exits and is
/// reaped before this returns: the connection's credentials (`SO_PEERCRED`) name a process
/// that no longer exists, and whose pid another may take. The race a compromised plugin ran
/// on the host's control socket (issue 42); this process keeps the connection and may send.
pub fn connect_in_reaped_child(path: &std::path::Path) -> io::Result<UnixStream> {
    use std::os::fd::FromRawFd;
    let addr = unix_address(path)?;
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just made and nothing else owns it.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    // SAFETY: the child makes connect(2) and _exit(2) only, both async-signal-safe, so forking
    // a process with other threads is sound; `addr` was prepared before the fork.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    if child == 0 {
        // SAFETY: see the fork above; the address and its length are the prepared ones.
        unsafe {
            let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            let ok = libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len);
            libc::_exit(if ok == 0 { 0 } else { 1 });
        }
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked, into a local int.
    if unsafe { libc::waitpid(child, &mut status, 0) } != child {
        return Err(io::Error::last_os_error());
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err(io::Error::other(format!(
            "the child could not connect to {}",
            path.display()
        )));
    }
    Ok(stream)
}

/// `path` as a `sockaddr_un`; an error when it does not fit.
fn unix_address(path: &std::path::Path) -> io::Result<libc::sockaddr_un> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: all zeroes is a valid sockaddr_un (an empty path).
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is too long for a socket address", path.display()),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (to, from) in addr.sun_path.iter_mut().zip(bytes) {
        *to = *from as libc::c_char;
    }
    Ok(addr)
}
