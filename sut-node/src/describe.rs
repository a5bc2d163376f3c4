//! The node's self-description (`Describe`) and the network probe (`Probe`)
//! that `loadgen-node preflight` uses; neither touches the backend.

use proto::framing::ProbeReplyChunks;
use proto::{DescribeReply, ProbeRequest};

/// The largest probe answer: a sample of the largest benchmark input with
/// room to spare, so a probe cannot make the node allocate without bound.
pub const MAX_PROBE_REPLY: u64 = 256 << 20;

/// What this node runs on.
pub fn describe(node_name: &str, backend: &str) -> DescribeReply {
    let version = env!("CARGO_PKG_VERSION");
    DescribeReply {
        node_name: node_name.to_string(),
        node_version: format!("sut-node {version}"),
        backend: backend.to_string(),
        // In-process backends are part of this binary; a forwarder's server
        // is not known to the node.
        backend_version: match backend {
            "kserve" | "openai" => String::new(),
            _ => format!("built into sut-node {version}"),
        },
        os: facts::host::os_name(),
        kernel: facts::host::kernel(),
        nics: facts::host::nics(),
    }
}

/// Answers a probe: the payload is dropped, `reply_bytes` zero bytes go
/// back with the node's clock, as the chunks of one framed `ProbeReply`
/// (cut from one static buffer: a reply costs no memory, however large and
/// however slowly it is read).
pub fn probe(request: &ProbeRequest) -> Result<ProbeReplyChunks, String> {
    if request.reply_bytes > MAX_PROBE_REPLY {
        return Err(format!(
            "probe reply of {} bytes asked; at most {MAX_PROBE_REPLY}",
            request.reply_bytes
        ));
    }
    // At most MAX_PROBE_REPLY: fits a frame.
    ProbeReplyChunks::new(request.reply_bytes as usize, facts::host::unix_time_ns())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn probe_answers_the_asked_size_and_refuses_huge_ones() {
        let request = |reply_bytes| ProbeRequest {
            payload: Bytes::from_static(b"abc"),
            reply_bytes,
        };
        let chunks: Vec<Bytes> = probe(&request(1000)).unwrap().collect();
        let mut decoder = proto::framing::FrameDecoder::new(1 << 20);
        chunks.into_iter().for_each(|c| decoder.push(c));
        let reply: proto::ProbeReply = decoder
            .next_frame()
            .unwrap()
            .unwrap()
            .decode("ProbeReply")
            .unwrap();
        assert_eq!(reply.payload, vec![0u8; 1000]);
        assert!(reply.unix_time_ns > 0);
        let most: usize = probe(&request(MAX_PROBE_REPLY))
            .unwrap()
            .map(|c| c.len())
            .sum();
        assert!(most > MAX_PROBE_REPLY as usize);
        let err = probe(&request(MAX_PROBE_REPLY + 1)).unwrap_err();
        assert!(err.contains("at most"), "{err}");
        let d = describe("n", "synthetic");
        assert!(d.node_version.starts_with("sut-node "));
        assert!(d.nics.iter().any(|n| n.link_type == "loopback"));
    }
}
