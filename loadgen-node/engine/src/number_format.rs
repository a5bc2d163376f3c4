//! Number formats of the official LoadGen's logs: C `printf("%g")` (iostream default)
//! and fixed-precision decimals.

/// C `printf("%g", x)`: 6 significant digits, the shorter of fixed and
/// exponent notation, trailing zeros removed (`1000`, `0.99`, `1e+06`).
pub fn g6(x: f64) -> String {
    g(x, 6)
}

/// C `printf("%.*g", precision, x)`.
pub(crate) fn g(x: f64, precision: usize) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    let p = precision.max(1);
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // The exponent after rounding to p significant digits decides the style.
    let sci = format!("{:.*e}", p - 1, x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= p as i32 {
        let m = strip_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.unsigned_abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        strip_zeros(&format!("{:.*}", decimals, x)).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// C `printf("%.2f")`.
pub(crate) fn fixed2(x: f64) -> String {
    format!("{x:.2}")
}

/// C `printf("%.1f")`.
pub(crate) fn fixed1(x: f64) -> String {
    format!("{x:.1}")
}

/// C `printf("%f")`.
pub(crate) fn fixed6(x: f64) -> String {
    format!("{x:.6}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g6_matches_printf() {
        let cases = [
            (1000.0, "1000"),
            (0.99, "0.99"),
            (1e6, "1e+06"),
            (519226.0, "519226"),
            (52929.9, "52929.9"),
            (190271.14, "190271"),
            (0.9, "0.9"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (123456789.0, "1.23457e+08"),
            (0.0, "0"),
            (-2.5, "-2.5"),
            (999999.5, "1e+06"),
            (0.9500000000000001, "0.95"),
        ];
        for (x, want) in cases {
            assert_eq!(g6(x), want, "g6({x})");
        }
    }
}
