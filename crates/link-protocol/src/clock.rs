//! The clocks as the records on disk and on the wire keep them.

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Milliseconds on `CLOCK_MONOTONIC`, which every process of one runtime reads alike: they
/// run on one machine in one time namespace (no part of Link makes a time namespace), so a
/// deadline one process sets another can check ([`crate::message::NotAfter`]).
#[cfg(feature = "runtime")]
pub fn monotonic_ms() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // Both are non-negative on CLOCK_MONOTONIC.
    (t.tv_sec as u64) * 1000 + (t.tv_nsec as u64) / 1_000_000
}
