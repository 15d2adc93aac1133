//! Cutting text for messages and bounded outputs, and durations as messages say them.

/// `s` cut to at most `max` bytes, on a character boundary.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A duration as messages say it: whole seconds, else milliseconds (`30 s`, `3500 ms`).
pub fn duration(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_are_whole_seconds_else_milliseconds() {
        use std::time::Duration;
        assert_eq!(super::duration(Duration::from_secs(360)), "360 s");
        assert_eq!(super::duration(Duration::from_millis(3500)), "3500 ms");
    }

    #[test]
    fn cuts_on_character_boundaries() {
        assert_eq!(super::truncate("héllo", 2), "h");
        assert_eq!(super::truncate("héllo", 3), "hé");
        assert_eq!(super::truncate("abc", 10), "abc");
        assert_eq!(super::truncate("abc", 0), "");
    }
}
