//! The openai backend against an in-process fake OpenAI-compatible server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// Counts of the fake server.
#[derive(Default)]
struct Stats {
    connections: AtomicUsize,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

/// The fake's answer to a prompt of token ids: one chunk per prompt token
/// (`"<id> "`, and `token_id:<id>` in logprobs), `gap` apart, then the usage
/// (completion_tokens 42) when the prompt starts with 7, then [DONE]. A
/// prompt starting with 666 is refused with HTTP 400; one starting with 667
/// gets an error event mid-stream.
async fn handle(conn: TcpStream, stats: Arc<Stats>, gap: Duration) -> std::io::Result<()> {
    let (read, mut write) = conn.into_split();
    let mut read = BufReader::new(read);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if read.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let length = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        read.read_exact(&mut body).await?;
        if head.starts_with("GET /v1/models") {
            let json = r#"{"object":"list","data":[{"id":"fake","object":"model"}]}"#;
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{json}",
                json.len()
            );
            write.write_all(reply.as_bytes()).await?;
            continue;
        }
        let request: Value = serde_json::from_slice(&body).unwrap_or_default();
        let prompt: Vec<i64> = request["prompt"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default();
        let first = prompt.first().copied().unwrap_or(0);
        if first == 666 || request["stream"] != json!(true) {
            let json = r#"{"error":{"message":"prompt too long","type":"invalid_request_error"}}"#;
            let reply = format!(
                "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{json}",
                json.len()
            );
            write.write_all(reply.as_bytes()).await?;
            continue;
        }
        let now = stats.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        stats.most_in_flight.fetch_max(now, Ordering::SeqCst);
        write
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            .await?;
        let mut events: Vec<String> = prompt
            .iter()
            .map(|t| {
                json!({"choices": [{"index": 0, "text": format!("{t} "),
                                    "logprobs": {"tokens": [format!("token_id:{t}")]}}]})
                .to_string()
            })
            .collect();
        if first == 667 {
            events.insert(
                1,
                json!({"error": {"message": "out of memory"}}).to_string(),
            );
        }
        if first == 7 {
            events.push(json!({"choices": [], "usage": {"completion_tokens": 42}}).to_string());
        }
        events.push("[DONE]".into());
        for e in events {
            tokio::time::sleep(gap).await;
            // One event split over two chunks, with CRLF line ends: the
            // parser must not care where the chunks end.
            let text = format!("data: {e}\r\n\r\n");
            let (a, b) = text.split_at(text.len() / 2);
            for part in [a, b] {
                write
                    .write_all(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes())
                    .await?;
            }
        }
        write.write_all(b"0\r\n\r\n").await?;
        stats.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn serve(gap: Duration) -> (tokio::runtime::Runtime, String, Arc<Stats>) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("address");
    let stats = Arc::new(Stats::default());
    let s = stats.clone();
    rt.spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            s.connections.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(handle(conn, s.clone(), gap));
        }
    });
    (rt, format!("http://{addr}/v1"), stats)
}

fn args() -> OpenaiOptions {
    OpenaiOptions {
        openai_max_tokens: 16,
        openai_prompt: PromptKind::TokenIds,
        openai_answer: AnswerKind::Text,
        openai_temperature: 0.0,
        openai_extra_body: None,
        openai_timeout: 10.0,
    }
}

fn backend(url: &str, model: &str, args: OpenaiOptions) -> Openai {
    Openai::new(Some(url.into()), Some(model.into()), args).expect("config")
}

fn ids(v: &[i32]) -> Bytes {
    v.iter()
        .flat_map(|i| i.to_le_bytes())
        .collect::<Vec<u8>>()
        .into()
}

/// First tokens and early answers, each with its place in the order of
/// everything the sink was given.
#[derive(Default)]
struct Collect(Vec<(usize, Bytes, usize)>, Vec<(usize, usize)>);
impl Collect {
    fn next(&self) -> usize {
        self.0.len() + self.1.len()
    }
}
impl SampleSink for Collect {
    fn first_token(&mut self, index: usize, payload: Bytes) {
        let at = self.next();
        self.0.push((index, payload, at));
    }
    fn answer_now(&mut self, index: usize, _: &Output) {
        let at = self.next();
        self.1.push((index, at));
    }
}

#[test]
fn a_short_answer_leaves_before_its_batch_mates_finish() {
    let gap = Duration::from_millis(100);
    let (_server, url, _) = serve(gap);
    let b = backend(&url, "fake", args());
    b.warm_up().expect("warm-up");
    // One chunk (200 ms with [DONE]) against eight (900 ms).
    let inputs = [ids(&[10]), ids(&[11, 2, 3, 4, 5, 6, 7, 8])];
    let mut sink = Collect::default();
    b.infer(&inputs, BatchInfo::default(), &mut sink)
        .expect("batch");
    // The short one's answer left first, while the long one still ran.
    let order: Vec<usize> = sink.1.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 1]);
}

#[test]
fn streams_a_batch_concurrently_with_first_tokens_as_they_come() {
    let gap = Duration::from_millis(100);
    let (_server, url, stats) = serve(gap);
    let b = backend(&url, "fake", args());
    b.warm_up().expect("warm-up");
    // Four chunks each (400 ms), eight samples at once.
    let inputs: Vec<Bytes> = (0..8).map(|i| ids(&[10 + i, 2, 3, 4])).collect();
    let mut sink = Collect::default();
    let out = b
        .infer(&inputs, BatchInfo::default(), &mut sink)
        .expect("batch");
    assert_eq!(stats.most_in_flight.load(Ordering::SeqCst), 8);
    for (i, o) in out.iter().enumerate() {
        let a = o.as_ref().expect("answered");
        assert_eq!(a.payload, Bytes::from(format!("{} 2 3 4 ", 10 + i)));
        // No usage from the server: one token a chunk.
        assert_eq!(a.n_tokens, 4);
    }
    assert_eq!(sink.0.len(), 8);
    // Sent on as they came: every first token before any answer.
    let first_answer = sink.1.iter().map(|(_, at)| *at).min();
    for (i, token, at) in &sink.0 {
        assert_eq!(token, &Bytes::from(format!("{} ", 10 + i)));
        assert!(Some(*at) < first_answer, "{:?}", sink.1);
    }

    // The pooled connections are reused by the next batch.
    let before = stats.connections.load(Ordering::SeqCst);
    assert!(before <= 9, "{before} connections");
    b.infer(&inputs, BatchInfo::default(), &mut Collect::default())
        .expect("batch");
    assert_eq!(stats.connections.load(Ordering::SeqCst), before);
}

#[test]
fn usage_gives_the_token_count_and_token_ids_the_answer() {
    let (_server, url, _) = serve(Duration::ZERO);
    let b = backend(&url, "fake", args());
    b.warm_up().expect("warm-up");
    let out = b
        .infer(
            &[ids(&[7, 8])],
            BatchInfo::default(),
            &mut Collect::default(),
        )
        .expect("batch");
    assert_eq!(out[0].as_ref().map(|a| a.n_tokens), Ok(42));

    let b = backend(
        &url,
        "fake",
        OpenaiOptions {
            openai_answer: AnswerKind::TokenIds,
            ..args()
        },
    );
    let mut sink = Collect::default();
    let out = b
        .infer(&[ids(&[5, 6, 9])], BatchInfo::default(), &mut sink)
        .expect("batch");
    let a = out[0].as_ref().expect("answered");
    assert_eq!((a.payload.clone(), a.n_tokens), (ids(&[5, 6, 9]), 3));
    assert_eq!(sink.0[0].1, ids(&[5]));
}

#[test]
fn server_errors_fail_only_their_sample() {
    let (_server, url, _) = serve(Duration::ZERO);
    let b = backend(&url, "fake", args());
    let inputs = [
        ids(&[1, 2]),
        ids(&[666, 1]),
        ids(&[667, 1, 2]),
        Bytes::from_static(b"abc"),
    ];
    let out = b
        .infer(&inputs, BatchInfo::default(), &mut Collect::default())
        .expect("batch");
    assert!(out[0].is_ok(), "{:?}", out[0]);
    let errors: Vec<String> = out[1..]
        .iter()
        .map(|o| o.as_ref().expect_err("fails").to_string())
        .collect();
    assert!(
        errors[0].contains("HTTP 400") && errors[0].contains("prompt too long"),
        "{}",
        errors[0]
    );
    assert!(errors[1].contains("out of memory"), "{}", errors[1]);
    assert!(errors[2].contains("not int32 token ids"), "{}", errors[2]);
}

#[test]
fn warm_up_names_an_unreachable_server_or_an_unknown_model() {
    // A port held, on which nothing listens.
    let closed = testkit::ClosedPort::new();
    let addr = closed.addr();
    let err = backend(&addr.to_string(), "fake", args())
        .warm_up()
        .expect_err("unreachable")
        .to_string();
    assert!(
        err.contains("unreachable") && err.contains(&addr.to_string()),
        "{err}"
    );

    let (_server, url, _) = serve(Duration::ZERO);
    let err = backend(&url, "other", args())
        .warm_up()
        .expect_err("unknown model")
        .to_string();
    assert!(err.contains("\"other\"") && err.contains("fake"), "{err}");
}

#[test]
fn sse_events_are_split_on_blank_lines_whatever_the_chunks() {
    let mut p = SseParser::default();
    p.push(b": comment\ndata: {\"a\"");
    assert_eq!(p.next_event(), Ok(None));
    p.push(b":1}\r\n\r\ndata: x\ndata: y\n\ndata: [DONE]\n\n");
    assert_eq!(p.next_event().unwrap().as_deref(), Some("{\"a\":1}"));
    assert_eq!(p.next_event().unwrap().as_deref(), Some("x\ny"));
    assert_eq!(p.next_event().unwrap().as_deref(), Some("[DONE]"));
    assert_eq!(p.next_event(), Ok(None));
}

#[test]
fn an_sse_event_over_the_limit_is_refused_not_buffered() {
    // One endless line, in pieces.
    let mut p = SseParser::with_limit(100);
    p.push(b"data: ");
    for _ in 0..9 {
        p.push(&[b'x'; 10]);
        assert_eq!(p.next_event(), Ok(None));
    }
    p.push(&[b'x'; 10]);
    assert_eq!(p.next_event(), Err(EventTooLong(100)));
    // Many short data lines that add up to one long event.
    let mut p = SseParser::with_limit(100);
    for _ in 0..30 {
        p.push(b"data: 12345\n");
    }
    assert_eq!(p.next_event(), Err(EventTooLong(100)));
    // Events under the limit pass, however many.
    let mut p = SseParser::with_limit(100);
    for _ in 0..1000 {
        p.push(b"data: 12345\n\n");
        assert_eq!(p.next_event().unwrap().as_deref(), Some("12345"));
    }
}
