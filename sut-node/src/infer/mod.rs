//! The data path of an `Infer` stream (one per connection):
//!
//! ```text
//!  gRPC stream ──▶ reader task ──chunks──▶ batcher queue ──▶ worker thread
//!                  (read, decode)                            (batch: runs
//!                                                             the backend)
//!                                                                  │
//!  gRPC stream ◀── writer task ◀── this stream's outbox ◀──────────┘
//!                  (write: one FromNode for everything ready, or a
//!                   heartbeat; compresses answers with the output codec)
//! ```
//!
//! The reader hands the batcher every sample already received as one chunk;
//! the worker appends a batch's answers to each stream's outbox under one
//! lock and wakes its writer; the writer takes everything in the outbox at
//! once, so under load one `FromNode` carries many answers.
//!
//! Its rooms, each with who runs it and what it touches in its own notes:
//!
//! - `read`: the reader task, taking samples off the stream;
//! - `decode` and `decode_pool`: compressed inputs decoded on the blocking
//!   pool, its turns shared by the connections by bytes;
//! - `budget`: the decoded-bytes budgets, the node's and each connection's;
//! - `batch`: the hand-off to the batcher's worker and back;
//! - `outbox`: the way back to a stream;
//! - `write`: the writer task, and its clock (heartbeats, shutdown grace);
//! - `data_path`: what the streams share.
//!
//! This file only wires a stream's reader and writer together.

mod batch;
mod budget;
mod data_path;
mod decode;
mod decode_pool;
mod outbox;
mod read;
mod write;

use std::sync::Arc;

use proto::{FromNode, ToNode};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::Status;

pub(crate) use budget::Unfinished;
pub(crate) use data_path::DataPath;

/// Starts the reader and writer of a new stream, whatever its transport:
/// `input` yields the stream's `ToNode` messages (an error ends the input,
/// as the end of the stream does); its samples belong to a session of
/// `mode`. Returns its answers.
pub(crate) fn open<S, E>(
    stream: u64,
    input: S,
    connection: Arc<budget::Connection>,
    mode: crate::backend::RunMode,
    node: Arc<DataPath>,
) -> ReceiverStream<Result<FromNode, Status>>
where
    S: Stream<Item = Result<ToNode, E>> + Unpin + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let reply = Arc::new(outbox::Reply::of_session(mode));
    // Capacity 1: while the gRPC layer is busy sending, answers pile up in
    // the outbox and leave together in the next FromNode.
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(read::read_samples(
        input,
        Arc::clone(&reply),
        connection,
        Arc::clone(&node),
    ));
    tokio::spawn(write::write_answers(stream, reply, tx, node));
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    use bytes::Bytes;
    use proto::{to_node, Codec};
    use tokio_stream::StreamExt;

    use crate::backend::{Answer, Backend, BatchInfo, Output, SampleSink};
    use crate::codec;
    use crate::node_config::NodeConfig;
    use decode_pool::DecodePool;

    fn answer() -> Output {
        Ok(Answer {
            payload: Bytes::from_static(b"a"),
            n_tokens: 0,
        })
    }

    /// Holds its first batch until `release` is dropped; says when it has it.
    struct HeldFirst {
        started: Mutex<Option<std::sync::mpsc::Sender<()>>>,
        release: Mutex<std::sync::mpsc::Receiver<()>>,
    }

    impl Backend for HeldFirst {
        fn name(&self) -> &str {
            "held-first"
        }
        fn warm_up(&self) -> Result<(), crate::backend::BackendError> {
            Ok(())
        }
        fn infer(
            &self,
            inputs: &[Bytes],
            _: BatchInfo,
            _: &mut dyn SampleSink,
        ) -> Result<Vec<Output>, crate::backend::BackendError> {
            if let Some(started) = self.started.lock().unwrap().take() {
                let _ = started.send(());
                let _ = self.release.lock().unwrap().recv();
            }
            Ok(inputs.iter().map(|_| answer()).collect())
        }
    }

    // Paused time: the long sleep below ends only once every task waits and
    // no decode runs, i.e. once the readers have taken all they can.
    #[tokio::test(start_paused = true)]
    async fn inputs_being_decoded_count_against_the_nodes_budget() {
        const INPUT: usize = 64 << 10;
        const STREAMS: usize = 8;
        const SENT: usize = 16;
        const TURNS: usize = 4;
        let (started, has_started) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let backend = HeldFirst {
            started: Mutex::new(Some(started)),
            release: Mutex::new(released),
        };
        let config = NodeConfig {
            name: "budget".into(),
            model: None,
            batch: crate::batcher::BatchPolicy {
                max_batch_size: 1,
                max_wait: std::time::Duration::ZERO,
            },
            heartbeat: None,
            shutdown_grace: std::time::Duration::from_secs(10),
            codecs: codec::NodeCodecs {
                output: compression::CodecSpec::NONE,
                max_input_bytes: INPUT,
            },
            limits: crate::limits::Limits {
                // Four inputs, node-wide; each connection could hold them all.
                max_decoded_bytes: 4 * INPUT,
                ..crate::limits::Limits::default()
            },
        };
        let (_stop, stop) = tokio::sync::watch::channel(false);
        let mut node = DataPath::start(config, Arc::new(backend), stop).unwrap();
        // As many decodes at once as a 4-core machine runs, whatever this one.
        node.decoding = Arc::new(DecodePool::new(TURNS));
        node.decoding_turns = TURNS;
        let node = Arc::new(node);

        // Frames that decode to just under the limit: with their size in
        // the header, and streamed (no size: charged at the limit).
        let data = vec![7u8; INPUT - 1];
        let declared = Bytes::from(
            compression::CodecSpec::from(compression::CodecKind::Zstd)
                .codec()
                .compress(&data),
        );
        let streamed = {
            let mut out = Vec::new();
            let mut enc = zstd::stream::Encoder::new(&mut out, 1).unwrap();
            std::io::Write::write_all(&mut enc, &data).unwrap();
            enc.finish().unwrap();
            Bytes::from(out)
        };
        let mut inputs = Vec::new();
        let mut answers = Vec::new();
        for s in 0..STREAMS {
            let (tx, rx) = mpsc::channel(SENT);
            for i in 0..SENT {
                let payload = if s % 2 == 0 { &declared } else { &streamed };
                let sample = proto::SampleRequest {
                    id: (s * SENT + i) as u64,
                    payload: payload.clone(),
                    codec: Codec::Zstd as i32,
                    ..Default::default()
                };
                let message = ToNode {
                    kind: Some(to_node::Kind::Sample(sample)),
                };
                tx.try_send(message).unwrap();
            }
            // Each stream on a connection of its own.
            let peer = std::net::SocketAddr::from(([10, 0, 0, 1], 5000 + s as u16));
            let connection = node.connections.of(Some(peer));
            let input = ReceiverStream::new(rx).map(Ok::<_, String>);
            answers.push(open(
                s as u64,
                input,
                connection,
                Default::default(),
                Arc::clone(&node),
            ));
            inputs.push(tx);
        }
        tokio::task::spawn_blocking(move || has_started.recv())
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;

        // The backend holds one sample; the budget holds at most four
        // decoded inputs (it included); each stream may hold one more
        // sample, not yet decoded, waiting for its share.
        let taken: usize = inputs.iter().map(|tx| tx.capacity()).sum();
        assert!(
            taken <= 4 + STREAMS,
            "{taken} samples taken with a budget of four inputs and {STREAMS} streams"
        );

        // Once the backend runs, every sample is answered.
        drop(release);
        drop(inputs);
        let mut answered = 0;
        for stream in &mut answers {
            while let Some(m) = stream.next().await {
                let m = m.unwrap();
                assert!(m.errors.is_empty(), "{:?}", m.errors);
                answered += m.answers.len();
            }
        }
        assert_eq!(answered, STREAMS * SENT);
    }
}
