//! The raw system calls the compromised-plugin test makes twice: in a plugin's place (the
//! `impostor` example) and as their allowed twins (`tests/compromised_plugin.rs`).

use std::io;

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
