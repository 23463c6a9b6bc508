//! Number parsing: the exact fast path for plain decimals, and the slower forms a field may
//! also take (exponents, nan/inf, decimal commas).

/// Powers of ten that f32 represents exactly (5^10 < 2^24).
pub(super) const POW10: [f32; 11] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];

/// Parses plain decimals (`-12.345`) exactly and fast: with a mantissa below 2^24 and at most
/// ten fraction digits, both operands are exact f32 values and IEEE division rounds the
/// quotient correctly (Clinger's fast path). Anything else (exponents, long mantissas,
/// nan/inf, junk) returns None and goes to the standard parser.
#[inline]
pub(super) fn parse_plain_decimal(bytes: &[u8]) -> Option<f32> {
    let (negative, digits) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        b'+' => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    let mut mantissa: u32 = 0;
    let mut count = 0usize;
    let mut fraction = 0usize;
    let mut seen_dot = false;
    for &b in digits {
        match b {
            b'0'..=b'9' => {
                if count == 9 {
                    return None;
                }
                mantissa = mantissa * 10 + u32::from(b - b'0');
                count += 1;
                fraction += usize::from(seen_dot);
            }
            b'.' if !seen_dot => seen_dot = true,
            _ => return None,
        }
    }
    if count == 0 || mantissa >= 1 << 24 || fraction >= POW10.len() {
        return None;
    }
    let value = mantissa as f32 / POW10[fraction];
    Some(if negative { -value } else { value })
}

/// A number written with a decimal comma (`-0,125`, as spreadsheets in many locales export
/// `;`- and tab-separated files): exactly one comma, no dot, otherwise a plain decimal or an
/// exponent form. Only tried when the comma is not the delimiter.
pub(super) fn parse_decimal_comma(bytes: &[u8]) -> Option<f32> {
    if bytes.iter().filter(|&&b| b == b',').count() != 1 || bytes.contains(&b'.') {
        return None;
    }
    let dotted: Vec<u8> = bytes
        .iter()
        .map(|&b| if b == b',' { b'.' } else { b })
        .collect();
    // A comma must sit between digits: "1,5" is a number, ",5" and "1," are lists.
    let at = bytes.iter().position(|&b| b == b',')?;
    let digit = |i: Option<usize>| i.and_then(|i| bytes.get(i)).is_some_and(u8::is_ascii_digit);
    if !digit(at.checked_sub(1)) || !digit(Some(at + 1)) {
        return None;
    }
    parse_plain_decimal(&dotted).or_else(|| std::str::from_utf8(&dotted).ok()?.parse().ok())
}

/// Whether a header or units field reads as a number (any form the data parser accepts, so
/// that header and units detection agree with what the rows will hold).
pub(super) fn is_number(text: &str, delimiter: u8) -> bool {
    let text = text.trim();
    text.parse::<f32>().is_ok()
        || (delimiter != b',' && parse_decimal_comma(text.as_bytes()).is_some())
}

#[cfg(test)]
mod tests {
    use super::{parse_decimal_comma, parse_plain_decimal};

    #[test]
    fn the_fast_path_agrees_with_the_standard_parser() {
        for text in [
            "0", "-0", "1", "-1.5", "0.0001", "123456.7", "16777215", "+2.25", "5.", ".5",
            "-0.4321", "9999.999", "3.141592",
        ] {
            let fast = parse_plain_decimal(text.as_bytes());
            assert_eq!(fast, Some(text.parse::<f32>().unwrap()), "{text}");
        }
        for text in [
            "",
            "-",
            ".",
            "1e3",
            "nan",
            "inf",
            "1.2.3",
            "16777216",
            "1234567890",
            "0.12345678901",
            "1,5",
            "--1",
            "3.1415926",
            "99999.9999",
        ] {
            assert_eq!(parse_plain_decimal(text.as_bytes()), None, "{text}");
        }
        // Every 4-decimal value in a range, against the standard parser.
        for i in -200_000i32..200_000 {
            let text = format!("{:.4}", i as f64 / 10_000.0);
            assert_eq!(
                parse_plain_decimal(text.as_bytes()),
                Some(text.parse::<f32>().unwrap())
            );
        }
    }

    #[test]
    fn decimal_commas_are_numbers_only_between_digits() {
        assert_eq!(parse_decimal_comma(b"-0,125"), Some(-0.125));
        assert_eq!(parse_decimal_comma(b"1,5e-3"), Some(1.5e-3));
        assert_eq!(
            parse_decimal_comma(b"12,3456789"),
            "12.3456789".parse().ok()
        );
        for text in ["1,2,3", "1.5", ",5", "5,", "1,000.5", "a,b", "1,5x", ""] {
            assert_eq!(parse_decimal_comma(text.as_bytes()), None, "{text}");
        }
    }
}
