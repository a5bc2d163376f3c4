//! The server-sent event parser of the openai forwarder, fed in arbitrary
//! chunks: it never panics, and no event holds more than was sent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sut_node::backend::openai::SseParser;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let mut sse = SseParser::default();
    let step = usize::from(split).max(1);
    for chunk in rest.chunks(step) {
        sse.push(chunk);
        while let Some(event) = sse.next_event() {
            assert!(event.len() <= rest.len() * 3, "{} bytes", event.len());
        }
    }
});
