//! Every codec's decoder on arbitrary frames: an error or at most the limit
//! plus one byte, never a panic or an allocation of what a frame declares.
#![no_main]

use compression::CodecKind;
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    for kind in CodecKind::ALL {
        if let Ok(out) = compression::decompress(kind, data, LIMIT) {
            assert!(out.len() <= LIMIT, "{kind}: {} bytes", out.len());
        }
    }
});
