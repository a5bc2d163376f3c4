//! The frame decoder of both transports (QUIC's frames, gRPC's messages),
//! fed the bytes in arbitrary chunks: it buffers only what arrived, never
//! panics, and hands out the bytes of each frame it accepts exactly.
#![no_main]

use bytes::{Buf, Bytes};
use libfuzzer_sys::fuzz_target;
use proto::framing::{Frame, FrameDecoder};
use proto::{FromNode, ToNode};

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    // A small limit, so that over-long frames are exercised too. The high
    // bit picks the transport, the rest the chunk size.
    let max = 1 << 16;
    let mut decoder = if control & 0x80 == 0 {
        FrameDecoder::new(max)
    } else {
        FrameDecoder::grpc(max)
    };
    let step = usize::from(control & 0x7f).max(1);
    for chunk in rest.chunks(step) {
        decoder.push(Bytes::copy_from_slice(chunk));
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    if let Frame::Message(pieces) = &frame {
                        // The pieces read as a `Buf` give the same bytes as
                        // the contiguous copy.
                        let mut buf = pieces.clone();
                        let joined = pieces.to_bytes();
                        assert_eq!(buf.remaining(), joined.len());
                        assert_eq!(buf.copy_to_bytes(joined.len()), joined);
                    }
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
