//! Strings in the logs, escaped as the official LoadGen escapes JSON
//! strings.

/// Appends `s` escaped as the official LoadGen escapes JSON strings: `"` and `\\` get a
/// backslash, `\b \f \n \r \t` their short forms, other bytes below 0x20
/// `\u00xx` (lower-case hex); everything else is copied. Text without those
/// characters is unchanged, so valid logs stay byte-identical, and no string
/// can end its record or start a forged one.
pub(crate) fn push_json_escaped(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// `s` escaped by [`push_json_escaped`].
pub(crate) fn json_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_json_escaped(&mut out, s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escaping_matches_the_official_loadgen() {
        assert_eq!(json_escaped("resnet50 node-1 (x)"), "resnet50 node-1 (x)");
        assert_eq!(json_escaped("é\u{7f}"), "é\u{7f}");
        assert_eq!(
            json_escaped("a\"b\\c\u{8}\u{c}\n\r\t\u{1}\u{1b}"),
            "a\\\"b\\\\c\\b\\f\\n\\r\\t\\u0001\\u001b"
        );
    }
}
