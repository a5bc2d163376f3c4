//! The protobuf messages of both directions, as the gRPC transport hands
//! them over: decoding never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let _ = proto::ToNode::decode(data);
    let _ = proto::FromNode::decode(data);
    let _ = proto::SessionRequest::decode(data);
    let _ = proto::SessionReply::decode(data);
    let _ = proto::NameReply::decode(data);
    let _ = proto::HealthReply::decode(data);
});
