//! The server-sent event parser of the openai forwarder, fed in arbitrary
//! chunks: it never panics, no event holds more than was sent, and none is
//! over the parser's limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sut_node::backend::openai::SseParser;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let mut sse = SseParser::with_limit(256);
    let step = usize::from(split).max(1);
    for chunk in rest.chunks(step) {
        sse.push(chunk);
        loop {
            match sse.next_event() {
                Ok(Some(event)) => {
                    assert!(event.len() <= rest.len() * 3, "{} bytes", event.len());
                    assert!(event.len() <= 256, "{} bytes", event.len());
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
