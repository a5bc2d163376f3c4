//! Reading `.npy` files (NumPy's array format), the form MLPerf's
//! preprocessing scripts write their inputs in. Only the raw tensor bytes go
//! over the network; the header is checked and dropped.

use std::path::{Path, PathBuf};

/// Why a `.npy` file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The read's error.
        source: std::io::Error,
    },
    #[error("{path}: not a .npy file: {reason}")]
    /// The file's bytes are not a `.npy` array this reader takes.
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// One array: its dtype descriptor (e.g. `<f4`), shape and raw data.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray {
    pub(crate) descr: String,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<u8>,
}

/// Reads an `.npy` file: C-order arrays of a fixed-size dtype.
pub fn read(path: &Path) -> Result<NpyArray, NpyError> {
    let bytes = std::fs::read(path).map_err(|source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&bytes).map_err(|reason| NpyError::Format {
        path: path.to_path_buf(),
        reason,
    })
}

/// Parses the bytes of an `.npy` file.
pub fn parse(bytes: &[u8]) -> Result<NpyArray, String> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("missing the \\x93NUMPY magic".into());
    }
    let major = bytes[6];
    let (header_len, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated header".into());
            }
            let n = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            (n as usize, 12)
        }
        v => return Err(format!("unsupported format version {v}")),
    };
    let end = start + header_len;
    let header = bytes
        .get(start..end)
        .ok_or("truncated header")
        .and_then(|h| std::str::from_utf8(h).map_err(|_| "header is not text"))?;
    let descr = dict_value(header, "descr")
        .and_then(|v| v.strip_prefix('\'').and_then(|v| v.split('\'').next()))
        .ok_or("header has no 'descr'")?
        .to_string();
    let fortran = dict_value(header, "fortran_order").ok_or("header has no 'fortran_order'")?;
    if fortran.starts_with("True") {
        return Err("Fortran-order arrays are not supported; save it in C order".into());
    }
    let shape_text = dict_value(header, "shape")
        .and_then(|v| v.strip_prefix('('))
        .and_then(|v| v.split(')').next())
        .ok_or("header has no 'shape'")?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("bad shape entry `{s}`"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let item_size = item_size(&descr)?;
    // Checked: a crafted shape must not wrap to a small (or empty) sample.
    let expected = shape
        .iter()
        .try_fold(item_size, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("shape {shape:?} of {descr} has more bytes than memory can hold"))?;
    let data = &bytes[end..];
    if data.len() != expected {
        return Err(format!(
            "shape {shape:?} of {descr} needs {expected} data bytes, the file has {}",
            data.len()
        ));
    }
    Ok(NpyArray {
        descr,
        shape,
        data: data.to_vec(),
    })
}

/// The text after `'key':` in the header's dict literal.
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'"))?;
    let rest = &header[at + key.len() + 2..];
    Some(rest.trim_start().strip_prefix(':')?.trim_start())
}

fn item_size(descr: &str) -> Result<usize, String> {
    let digits: String = descr.chars().skip_while(|c| !c.is_ascii_digit()).collect();
    let kind = descr
        .trim_start_matches(['<', '>', '|', '='])
        .chars()
        .next();
    match (kind, digits.parse::<usize>()) {
        (Some('f' | 'i' | 'u' | 'b' | 'c'), Ok(n)) if n > 0 => Ok(n),
        _ => Err(format!("unsupported dtype `{descr}`")),
    }
}

/// Bytes of an `.npy` file holding `data` (for tests and tools).
pub fn encode(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let mut out = facts::benchmarks::npy_header(descr, shape);
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let data: Vec<u8> = (0..24).collect();
        let a = parse(&encode("<f4", &[2, 3], &data)).unwrap();
        assert_eq!(a.descr, "<f4");
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.data, data);
        let a = parse(&encode("|u1", &[5], &data[..5])).unwrap();
        assert_eq!(a.shape, vec![5]);
    }

    #[test]
    fn numpy_written_header() {
        // As numpy 1.x writes a (1, 2) int64 array.
        let mut f =
            b"\x93NUMPY\x01\x00v\x00{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2), }"
                .to_vec();
        while f.len() < 127 {
            f.push(b' ');
        }
        f.push(b'\n');
        f.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]);
        let a = parse(&f).unwrap();
        assert_eq!((a.shape, a.data.len()), (vec![1, 2], 16));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert!(parse(b"hello world").unwrap_err().contains("magic"));
        let bad = encode("<f4", &[4], &[0; 8]);
        assert!(parse(&bad).unwrap_err().contains("needs 16 data bytes"));
        let mut fortran = encode("<f4", &[1], &[0; 4]);
        let at = fortran.windows(5).position(|w| w == b"False").unwrap();
        fortran[at..at + 5].copy_from_slice(b"True ");
        assert!(parse(&fortran).unwrap_err().contains("Fortran"));
        assert!(parse(&encode("<U3", &[1], &[0; 12]))
            .unwrap_err()
            .contains("dtype"));
    }

    #[test]
    fn shapes_whose_size_overflows_are_refused() {
        // 2^62 * 2^62 * 4 wraps to 0 in 64-bit arithmetic.
        let big = 1usize << 62;
        let e = parse(&encode("<f4", &[big, big], &[])).unwrap_err();
        assert!(e.contains("more bytes than memory can hold"), "{e}");
        let e = parse(&encode("<f18446744073709551615", &[2], &[])).unwrap_err();
        assert!(e.contains("more bytes than memory can hold"), "{e}");
        assert_eq!(parse(&encode("<f4", &[0, big], &[])).unwrap().data.len(), 0);
    }
}
