//! Cutting text for messages and bounded outputs.

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

#[cfg(test)]
mod tests {
    #[test]
    fn cuts_on_character_boundaries() {
        assert_eq!(super::truncate("héllo", 2), "h");
        assert_eq!(super::truncate("héllo", 3), "hé");
        assert_eq!(super::truncate("abc", 10), "abc");
        assert_eq!(super::truncate("abc", 0), "");
    }
}
