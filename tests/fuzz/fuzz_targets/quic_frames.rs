//! The QUIC frame decoder on both ends, fed the bytes in arbitrary chunks:
//! it buffers only what arrived and never panics.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use proto::quic::FrameDecoder;
use proto::{FromNode, ToNode};

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    // A small limit, so that over-long frames are exercised too.
    let mut decoder = FrameDecoder::new(1 << 16);
    let step = usize::from(split).max(1);
    for chunk in rest.chunks(step) {
        decoder.push(Bytes::copy_from_slice(chunk));
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    let _ = frame.clone().decode::<ToNode>("ToNode");
                    let _ = frame.decode::<FromNode>("FromNode");
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    let _ = decoder.finish();
});
