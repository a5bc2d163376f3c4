//! The node's self-description (`Describe`) and the network probe (`Probe`)
//! that `loadgen-node preflight` uses; neither touches the backend.

use bytes::Bytes;
use proto::{DescribeReply, ProbeReply, ProbeRequest};

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
        os: proto::host::os_name(),
        kernel: proto::host::kernel(),
        nics: proto::host::nics(),
    }
}

/// Answers a probe: the payload is dropped, `reply_bytes` zero bytes go back.
pub fn probe(request: &ProbeRequest) -> Result<ProbeReply, String> {
    if request.reply_bytes > MAX_PROBE_REPLY {
        return Err(format!(
            "probe reply of {} bytes asked; at most {MAX_PROBE_REPLY}",
            request.reply_bytes
        ));
    }
    Ok(ProbeReply {
        payload: Bytes::from(vec![0u8; request.reply_bytes as usize]),
        unix_time_ns: proto::host::unix_time_ns(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_answers_the_asked_size_and_refuses_huge_ones() {
        let r = probe(&ProbeRequest {
            payload: Bytes::from_static(b"abc"),
            reply_bytes: 1000,
        })
        .unwrap();
        assert_eq!(r.payload.len(), 1000);
        assert!(r.unix_time_ns > 0);
        let err = probe(&ProbeRequest {
            payload: Bytes::new(),
            reply_bytes: MAX_PROBE_REPLY + 1,
        })
        .unwrap_err();
        assert!(err.contains("at most"), "{err}");
        let d = describe("n", "synthetic");
        assert!(d.node_version.starts_with("sut-node "));
        assert!(d.nics.iter().any(|n| n.link_type == "loopback"));
    }
}
