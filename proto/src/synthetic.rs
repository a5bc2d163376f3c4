//! The answer of the `synthetic` backend: a deterministic function of the
//! input bytes, so an accuracy run can prove that every sample's data crossed
//! the network and came back to the right response id.

/// A multiplicative hash of the input taken 8 bytes at a time (inputs are
/// megabytes; this keeps the node's cost far below the network's), then a
/// splitmix64 stream: `len` bytes.
pub fn answer(input: &[u8], len: usize) -> Vec<u8> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ input.len() as u64;
    let mut words = input.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut out = Vec::with_capacity(len);
    let mut state = h;
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let take = (len - out.len()).min(8);
        out.extend_from_slice(&z.to_le_bytes()[..take]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depends_on_every_byte_and_has_the_asked_length() {
        let a = answer(b"sample one", 20);
        assert_eq!(a.len(), 20);
        assert_eq!(a, answer(b"sample one", 20));
        assert_ne!(a, answer(b"sample onf", 20));
        assert_ne!(answer(b"12345678abc", 8), answer(b"12345679abc", 8));
        assert_ne!(answer(b"\0", 8), answer(b"\0\0", 8));
        assert_eq!(&answer(b"x", 3)[..], &answer(b"x", 11)[..3]);
        assert!(answer(b"", 0).is_empty());
    }
}
