//! Node names. A node's name goes into the LoadGen node's MLPerf logs, its
//! summary and its metrics, where a reader must see exactly what is there:
//! like host names and label values, a name holds only ASCII letters,
//! digits, `.`, `-` and `_`. Anything else could change what a reader sees
//! (control characters, bidirectional overrides such as U+202E, zero-width
//! characters, letters of other scripts that look like ASCII ones) and is
//! refused, the character named.

/// The longest node name accepted, in bytes.
pub const MAX_BYTES: usize = 128;

/// The characters a node name may hold.
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')
}

/// Why `name` is no node name, if it is not: "is empty", "is 200 bytes
/// long (at most 128)", "holds U+202E (RIGHT-TO-LEFT OVERRIDE) at byte 4
/// (...)".
pub fn problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty".into());
    }
    if name.len() > MAX_BYTES {
        return Some(format!(
            "is {} bytes long (at most {MAX_BYTES})",
            name.len()
        ));
    }
    let (at, c) = name.char_indices().find(|&(_, c)| !allowed(c))?;
    Some(format!(
        "holds {} at byte {at} (a node name holds only ASCII letters, digits, '.', '-' and '_')",
        describe(c)
    ))
}

/// A character as a message names it: its code point, its name for those
/// that hide or reorder text, and itself when it shows as itself.
fn describe(c: char) -> String {
    let name = match c {
        ' ' => Some("SPACE"),
        '\u{00A0}' => Some("NO-BREAK SPACE"),
        '\u{00AD}' => Some("SOFT HYPHEN"),
        '\u{061C}' => Some("ARABIC LETTER MARK"),
        '\u{200B}' => Some("ZERO WIDTH SPACE"),
        '\u{200C}' => Some("ZERO WIDTH NON-JOINER"),
        '\u{200D}' => Some("ZERO WIDTH JOINER"),
        '\u{200E}' => Some("LEFT-TO-RIGHT MARK"),
        '\u{200F}' => Some("RIGHT-TO-LEFT MARK"),
        '\u{2028}' => Some("LINE SEPARATOR"),
        '\u{2029}' => Some("PARAGRAPH SEPARATOR"),
        '\u{202A}' => Some("LEFT-TO-RIGHT EMBEDDING"),
        '\u{202B}' => Some("RIGHT-TO-LEFT EMBEDDING"),
        '\u{202C}' => Some("POP DIRECTIONAL FORMATTING"),
        '\u{202D}' => Some("LEFT-TO-RIGHT OVERRIDE"),
        '\u{202E}' => Some("RIGHT-TO-LEFT OVERRIDE"),
        '\u{2060}' => Some("WORD JOINER"),
        '\u{2066}' => Some("LEFT-TO-RIGHT ISOLATE"),
        '\u{2067}' => Some("RIGHT-TO-LEFT ISOLATE"),
        '\u{2068}' => Some("FIRST STRONG ISOLATE"),
        '\u{2069}' => Some("POP DIRECTIONAL ISOLATE"),
        '\u{FEFF}' => Some("ZERO WIDTH NO-BREAK SPACE"),
        c if c.is_control() => Some("a control character"),
        _ => None,
    };
    let code = format!("U+{:04X}", c as u32);
    match name {
        Some(name) => format!("{code} ({name})"),
        None if c.is_ascii_graphic() => format!("{code} ('{c}')"),
        None => code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_host_name_characters_pass_and_the_rest_is_named() {
        for ok in ["node-a", "gpu01.example.com", "rack_3-node.7", "N"] {
            assert_eq!(problem(ok), None, "{ok}");
        }
        for (name, why) in [
            ("", "is empty"),
            (
                "admin\u{202E}gnp.exe",
                "U+202E (RIGHT-TO-LEFT OVERRIDE) at byte 5",
            ),
            ("node\u{200B}a", "U+200B (ZERO WIDTH SPACE) at byte 4"),
            ("a\n:::MLLOG", "U+000A (a control character) at byte 1"),
            ("node a", "U+0020 (SPACE) at byte 4"),
            ("node,b", "U+002C (',') at byte 4"),
            // A Cyrillic 'а' that looks like an ASCII 'a'.
            ("nod\u{0435}", "U+0435 at byte 3"),
        ] {
            let p = problem(name).unwrap_or_default();
            assert!(p.contains(why), "{name:?}: {p}");
        }
        let long = "n".repeat(MAX_BYTES + 1);
        assert_eq!(
            problem(&long).as_deref(),
            Some("is 129 bytes long (at most 128)")
        );
    }
}
