//! The Probe and Describe requests as a sut-node reads them off either
//! transport (QUIC's frames, gRPC's messages, in arbitrary chunks, within a
//! message limit), answered by the node's own handlers: no panic; a probe
//! is answered or refused by its size alone, its reply exactly the bytes it
//! announces (prost's encoding of a `ProbeReply` of that many zeros) and cut
//! from one buffer however large; Describe answers whatever the request
//! holds.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use prost::Message;
use proto::framing::{Frame, FrameDecoder};
use proto::{DescribeRequest, ProbeReply, ProbeRequest};
use sut_node::describe::{describe, probe, MAX_PROBE_REPLY};

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    // The high bit picks the transport, the next the request, the rest the
    // chunk size.
    let max = 1 << 16;
    let mut decoder = if control & 0x80 == 0 {
        FrameDecoder::new(max)
    } else {
        FrameDecoder::grpc(max)
    };
    let describing = control & 0x40 != 0;
    let step = usize::from(control & 0x3f).max(1);
    for chunk in rest.chunks(step) {
        decoder.push(Bytes::copy_from_slice(chunk));
        loop {
            let frame = match decoder.next_frame() {
                Ok(Some(frame @ Frame::Message(_))) => frame,
                Ok(Some(Frame::Error(_))) | Ok(None) => break,
                Err(_) => return,
            };
            if describing {
                if frame.decode::<DescribeRequest>("request").is_ok() {
                    let d = describe("fuzz-node", "synthetic");
                    assert_eq!(d.node_name, "fuzz-node");
                }
                continue;
            }
            let Ok(request) = frame.decode::<ProbeRequest>("request") else {
                continue;
            };
            answer(&request);
            // The largest replies asked of real nodes, whatever the request.
            for reply_bytes in [MAX_PROBE_REPLY, MAX_PROBE_REPLY + 1, u64::MAX] {
                answer(&ProbeRequest {
                    reply_bytes,
                    ..request.clone()
                });
            }
        }
    }
});

/// The node's answer to `request`, checked.
fn answer(request: &ProbeRequest) {
    let Ok(chunks) = probe(request) else {
        assert!(request.reply_bytes > MAX_PROBE_REPLY);
        return;
    };
    assert!(request.reply_bytes <= MAX_PROBE_REPLY);
    let reply_bytes = request.reply_bytes as usize;
    let chunks: Vec<Bytes> = chunks.collect();
    // Exactly the frame its header announces: 5 bytes, then the message.
    let total: usize = chunks.iter().map(Bytes::len).sum();
    let head = &chunks[0];
    let announced = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    assert_eq!(total, 5 + announced);
    let expected = ProbeReply {
        payload: Bytes::new(),
        unix_time_ns: 1,
    }
    .encoded_len();
    assert!(announced >= reply_bytes && announced <= reply_bytes + expected + 16);
    if reply_bytes <= 1 << 16 {
        // Small enough to read back whole.
        let mut all = BytesMut::new();
        chunks.iter().for_each(|c| all.extend_from_slice(c));
        let mut decoder = FrameDecoder::new(1 << 20);
        decoder.push(all.freeze());
        let reply: ProbeReply = decoder
            .next_frame()
            .expect("a frame")
            .expect("whole")
            .decode("ProbeReply")
            .expect("a ProbeReply");
        assert_eq!(reply.payload.len(), reply_bytes);
        assert!(reply.payload.iter().all(|b| *b == 0));
    } else {
        // Larger ones: slices of the same zeros, never a copy.
        let zeros: Vec<&Bytes> = chunks[1..].iter().filter(|c| c.len() > 16).collect();
        assert!(zeros.windows(2).all(|w| w[0].as_ptr() == w[1].as_ptr()));
    }
}
