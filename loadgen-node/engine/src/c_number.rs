//! C number syntax, as the official LoadGen's config reader converts values
//! (`test_settings_internal.cc`, `TestSettings::FromConfig`).
//!
//! Config values are kept as text and converted at lookup time, as the
//! official LoadGen does; these scanners reproduce glibc's `strtoull` (base 0)
//! and `strtod` in the "C" locale, so that a value means what it meant to the
//! official LoadGen (`010` is octal, `1.9` given to an integer key is 1).

/// True when the whole token is one C integer (`strtoul`, base 0) or one C
/// floating-point number (`strtod`).
pub(crate) fn is_complete_number(token: &str) -> bool {
    let b = token.as_bytes();
    !b.is_empty()
        && (scan_integer(b).end == b.len() || scan_float(b).map(|f| f.end) == Some(b.len()))
}

/// True when the whole token is one C integer (`strtoull`, base 0): what
/// `strtoull` reads is then what it says.
pub(crate) fn is_complete_integer(token: &str) -> bool {
    let b = token.as_bytes();
    !b.is_empty() && scan_integer(b).end == b.len()
}

/// Result of scanning an integer prefix.
struct IntScan {
    /// Bytes consumed; 0 when there is no number at all.
    end: usize,
    /// The value as `strtoull` returns it (wrapped for `-`, saturated on
    /// overflow).
    value: u64,
}

/// A leading sign, as the C scanners take it: whether it is `-`, and where
/// the digits start.
fn sign(b: &[u8]) -> (bool, usize) {
    match b.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    }
}

fn scan_integer(b: &[u8]) -> IntScan {
    let (negative, mut i) = sign(b);
    let mut radix = 10;
    if b.get(i) == Some(&b'0') {
        if matches!(b.get(i + 1), Some(b'x' | b'X'))
            && b.get(i + 2).is_some_and(|c| c.is_ascii_hexdigit())
        {
            radix = 16;
            i += 2;
        } else {
            radix = 8;
        }
    }
    let start = i;
    let mut value: u64 = 0;
    let mut overflow = false;
    while let Some(d) = b.get(i).and_then(|&c| (c as char).to_digit(radix)) {
        match value
            .checked_mul(u64::from(radix))
            .and_then(|v| v.checked_add(u64::from(d)))
        {
            Some(v) => value = v,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start {
        return IntScan { end: 0, value: 0 };
    }
    let value = if overflow {
        u64::MAX
    } else if negative {
        value.wrapping_neg()
    } else {
        value
    };
    IntScan { end: i, value }
}

/// C `strtoull(text, NULL, 0)`: the longest integer prefix, 0 if none.
pub(crate) fn strtoull(text: &str) -> u64 {
    scan_integer(text.as_bytes()).value
}

/// C `strtod(text, NULL)`: the longest floating-point prefix, 0 if none.
pub(crate) fn strtod(text: &str) -> f64 {
    scan_float(text.as_bytes()).map_or(0.0, |f| f.value)
}

struct FloatScan {
    end: usize,
    value: f64,
}

fn scan_float(b: &[u8]) -> Option<FloatScan> {
    let (negative, i) = sign(b);
    let sign = if negative { -1.0 } else { 1.0 };
    let rest = &b[i..];

    if let Some(n) = scan_inf_nan(rest) {
        return Some(FloatScan {
            end: i + n.0,
            value: sign * n.1,
        });
    }
    if rest.len() >= 2 && rest[0] == b'0' && matches!(rest[1], b'x' | b'X') {
        if let Some((len, value)) = scan_hex_float(&rest[2..]) {
            return Some(FloatScan {
                end: i + 2 + len,
                value: sign * value,
            });
        }
        // "0x" without hex digits: only the "0" is a number.
    }

    // Decimal: digits [. digits] [e [sign] digits], with at least one digit.
    let mut j = i;
    let int_digits = count_while(&b[j..], |c| c.is_ascii_digit());
    j += int_digits;
    let mut frac_digits = 0;
    if b.get(j) == Some(&b'.') {
        frac_digits = count_while(&b[j + 1..], |c| c.is_ascii_digit());
        if int_digits + frac_digits > 0 {
            j += 1 + frac_digits;
        }
    }
    if int_digits + frac_digits == 0 {
        return None;
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        let mut k = j + 1;
        if matches!(b.get(k), Some(b'+' | b'-')) {
            k += 1;
        }
        let exp_digits = count_while(&b[k.min(b.len())..], |c| c.is_ascii_digit());
        if exp_digits > 0 {
            j = k + exp_digits;
        }
    }
    // The matched text is plain decimal syntax, which Rust converts with
    // correct rounding, as glibc does.
    let text = std::str::from_utf8(&b[i..j]).ok()?;
    let value: f64 = text.parse().ok()?;
    Some(FloatScan {
        end: j,
        value: sign * value,
    })
}

fn count_while(b: &[u8], f: impl Fn(u8) -> bool) -> usize {
    b.iter().take_while(|&&c| f(c)).count()
}

/// `inf`, `infinity`, `nan` and `nan(chars)`, case-insensitive.
fn scan_inf_nan(b: &[u8]) -> Option<(usize, f64)> {
    let starts =
        |word: &str| b.len() >= word.len() && b[..word.len()].eq_ignore_ascii_case(word.as_bytes());
    if starts("infinity") {
        return Some((8, f64::INFINITY));
    }
    if starts("inf") {
        return Some((3, f64::INFINITY));
    }
    if starts("nan") {
        let mut len = 3;
        if b.get(3) == Some(&b'(') {
            let inner = count_while(&b[4..], |c| c.is_ascii_alphanumeric() || c == b'_');
            if b.get(4 + inner) == Some(&b')') {
                len = 5 + inner;
            }
        }
        return Some((len, f64::NAN));
    }
    None
}

/// Significant bits of a hex float being scanned.
struct HexMantissa {
    /// Up to 60 leading significant bits.
    bits: u64,
    exp2: i64,
    /// Whether any non-zero bit was dropped below `bits` (for rounding).
    sticky: bool,
}

impl HexMantissa {
    fn push(&mut self, digit: u32, fractional: bool) {
        if self.bits >> 56 == 0 {
            self.bits = (self.bits << 4) | u64::from(digit);
            if fractional {
                self.exp2 -= 4;
            }
        } else {
            self.sticky |= digit != 0;
            if !fractional {
                self.exp2 += 4;
            }
        }
    }
}

fn hex_digit(b: &[u8], i: usize) -> Option<u32> {
    b.get(i).and_then(|&c| (c as char).to_digit(16))
}

/// Hex float body after `0x`: hex digits [. hex digits] [p [sign] digits],
/// with at least one hex digit. Returns the length and the positive value.
fn scan_hex_float(b: &[u8]) -> Option<(usize, f64)> {
    let mut m = HexMantissa {
        bits: 0,
        exp2: 0,
        sticky: false,
    };
    let mut i = 0;
    let mut digits = 0;
    while let Some(d) = hex_digit(b, i) {
        m.push(d, false);
        digits += 1;
        i += 1;
    }
    if b.get(i) == Some(&b'.') {
        let mut k = i + 1;
        while let Some(d) = hex_digit(b, k) {
            m.push(d, true);
            digits += 1;
            k += 1;
        }
        if digits > 0 {
            i = k;
        }
    }
    if digits == 0 {
        return None;
    }
    if matches!(b.get(i), Some(b'p' | b'P')) {
        let mut k = i + 1;
        let negative = matches!(b.get(k), Some(b'-'));
        if matches!(b.get(k), Some(b'+' | b'-')) {
            k += 1;
        }
        let n = count_while(&b[k.min(b.len())..], |c| c.is_ascii_digit());
        if n > 0 {
            // Clamped: anything this large is already 0 or infinity.
            let e = b[k..k + n].iter().fold(0i64, |acc, &c| {
                (acc * 10 + i64::from(c - b'0')).min(1 << 20)
            });
            m.exp2 += if negative { -e } else { e };
            i = k + n;
        }
    }
    Some((i, compose_binary(m.bits, m.sticky, m.exp2)))
}

/// `mantissa × 2^exp2` rounded to nearest-even, with `sticky` standing for
/// non-zero bits below the mantissa.
fn compose_binary(mut mantissa: u64, sticky: bool, mut exp2: i64) -> f64 {
    if mantissa == 0 {
        return 0.0;
    }
    let bits = 64 - i64::from(mantissa.leading_zeros());
    if bits > 53 {
        let shift = (bits - 53) as u32;
        let dropped = mantissa & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        mantissa >>= shift;
        exp2 += i64::from(shift);
        let above_half = dropped > half || (dropped == half && sticky);
        let tie = dropped == half && !sticky;
        if above_half || (tie && mantissa & 1 == 1) {
            mantissa += 1;
        }
    }
    // Scale in steps so intermediate powers of two stay finite.
    let mut value = mantissa as f64;
    while exp2 > 0 {
        let step = exp2.min(1000);
        value *= 2f64.powi(step as i32);
        exp2 -= step;
    }
    while exp2 < 0 {
        let step = (-exp2).min(1000);
        value *= 2f64.powi(-(step as i32));
        exp2 += step;
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_syntax() {
        for ok in [
            "0",
            "-1",
            "+7",
            "010",
            "0x1F",
            "0X1f",
            "1.5",
            ".5",
            "5.",
            "1e3",
            "1E+3",
            "2.5e-3",
            "08",
            "09.5",
            "inf",
            "-Infinity",
            "nan",
            "NAN(abc_1)",
            "0x1.8p3",
            "0x.8",
            "0x1p-2",
            "99999999999999999999999",
        ] {
            assert!(is_complete_number(ok), "{ok} should be a number");
        }
        for bad in [
            "", "abc", "1e", "1e+", "0x", "0xg", "1.2.3", "--1", "+-1", "1,5", "nan(", "infx",
            "1f", ".", "-", "#", "e5", "0x1p",
        ] {
            assert!(!is_complete_number(bad), "{bad} should not be a number");
        }
    }

    #[test]
    fn integer_conversion() {
        assert_eq!(strtoull("010"), 8);
        assert_eq!(strtoull("0x10"), 16);
        assert_eq!(strtoull("1.9"), 1);
        assert_eq!(strtoull("0.5"), 0);
        assert_eq!(strtoull("-1"), u64::MAX);
        assert_eq!(strtoull("-2"), u64::MAX - 1);
        assert_eq!(strtoull("99999999999999999999999"), u64::MAX);
        assert_eq!(strtoull("-99999999999999999999999"), u64::MAX);
        assert_eq!(strtoull("18446744073709551615"), u64::MAX);
        assert_eq!(strtoull("1e3"), 1);
        assert_eq!(strtoull("08"), 0);
        assert_eq!(strtoull("0x"), 0);
        assert_eq!(strtoull("inf"), 0);
        assert_eq!(strtoull(".5"), 0);
    }

    #[test]
    fn float_conversion() {
        assert_eq!(strtod("010"), 10.0);
        assert_eq!(strtod("0x10"), 16.0);
        assert_eq!(strtod("0x1.8p3"), 12.0);
        assert_eq!(strtod("0x.8"), 0.5);
        assert_eq!(strtod("5."), 5.0);
        assert_eq!(strtod(".25"), 0.25);
        assert_eq!(strtod("5.e1"), 50.0);
        assert_eq!(strtod("1e999"), f64::INFINITY);
        assert_eq!(strtod("-inf"), f64::NEG_INFINITY);
        assert!(strtod("nan").is_nan());
        assert_eq!(strtod("-0").to_bits(), (-0.0f64).to_bits());
        assert_eq!(strtod("0.1"), 0.1);
        assert_eq!(strtod("1e-320"), 1e-320);
        assert_eq!(strtod("0x1.fffffffffffff8p0"), 2.0);
        assert_eq!(strtod("0x1.fffffffffffff7p0"), 2.0 - f64::EPSILON);
        assert_eq!(strtod("0x1p-1074"), 5e-324);
    }
}
