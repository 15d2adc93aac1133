//! Whether a program is a static executable: no program interpreter (`ld.so`), nothing linked
//! at run time. `build.rs` includes this file too, to refuse a sandbox helper built otherwise.

/// The ELF machine number of the architecture this is compiled for.
pub const MACHINE: u16 = if cfg!(target_arch = "x86_64") {
    62
} else if cfg!(target_arch = "aarch64") {
    183
} else {
    0
};

/// Why `image` is not a static 64-bit little-endian executable for `machine`, if it is not.
pub fn not_static(image: &[u8], machine: u16) -> Option<String> {
    const ET_EXEC: u16 = 2;
    const PT_DYNAMIC: u32 = 2;
    const PT_INTERP: u32 = 3;
    let u16_at = |at: usize| Some(u16::from_le_bytes(image.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(image.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(image.get(at..at + 8)?.try_into().ok()?));
    if image.get(..6) != Some(b"\x7fELF\x02\x01") {
        return Some("not a 64-bit little-endian ELF file".into());
    }
    if u16_at(16) != Some(ET_EXEC) {
        return Some(format!("ELF type {:?}, not ET_EXEC", u16_at(16)));
    }
    if u16_at(18) != Some(machine) {
        return Some(format!("ELF machine {:?}, not {machine}", u16_at(18)));
    }
    let (Some(offset), Some(size), Some(count)) = (u64_at(32), u16_at(54), u16_at(56)) else {
        return Some("truncated ELF header".into());
    };
    for i in 0..count as usize {
        match u32_at(offset as usize + i * size as usize) {
            None => return Some("truncated program headers".into()),
            Some(PT_INTERP) => return Some("it has a program interpreter (PT_INTERP)".into()),
            Some(PT_DYNAMIC) => return Some("it is dynamically linked (PT_DYNAMIC)".into()),
            Some(_) => {}
        }
    }
    None
}
