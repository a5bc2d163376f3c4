//! gRPC over HTTP/2 (tonic): one HTTP/2 connection per [`GrpcLink`], with the
//! bidirectional `Infer` stream on it; over TLS (`tls.rs`) when asked.

use std::time::Duration;

use proto::sut_node_client::SutNodeClient;
use proto::tls::ClientTls;
use proto::{FromNode, NameRequest, SessionReply, SessionRequest};
use tonic::transport::{Channel, Endpoint};

use super::Outgoing;
use crate::config::NodeAddr;
use crate::error::TransportError;

/// Large inputs (whole images, volumes) exceed tonic's 4 MiB default; the
/// protocol's own framing bounds a message at 4 GiB.
const MAX_SENT_MESSAGE: usize = u32::MAX as usize;
/// Pings keep an idle connection (a long QSL load) open past the node's
/// idle timeout.
const KEEP_ALIVE: Duration = Duration::from_secs(20);

#[derive(Clone)]
pub(crate) struct GrpcLink {
    client: SutNodeClient<Channel>,
}

impl GrpcLink {
    pub(crate) async fn connect(
        addr: &NodeAddr,
        tls: Option<&ClientTls>,
        timeout: Duration,
        max_message: usize,
    ) -> Result<Self, TransportError> {
        let endpoint = Endpoint::from_shared(format!("http://{}", addr.authority()))
            .map_err(|e| TransportError::chain(&e))?
            .connect_timeout(timeout)
            // Samples are small, latency-bound writes: never wait for Nagle.
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEP_ALIVE)
            .keep_alive_while_idle(true);
        let channel = match tls {
            None => endpoint
                .connect()
                .await
                .map_err(|e| TransportError::chain(&e))?,
            Some(tls) => {
                let (connector, presented) = super::tls::grpc_connector(addr, tls)?;
                endpoint
                    .connect_with_connector(connector)
                    .await
                    .map_err(|e| match tls.pin_mismatch(&presented) {
                        Some(why) => TransportError(why),
                        None => {
                            let mut err = TransportError::chain(&e);
                            if err.0.contains("InvalidContentType") {
                                err.0.push_str(
                                    " (the node seems to serve gRPC without TLS: start it with \
                                     --tls, or reach it over quic://)",
                                );
                            }
                            err
                        }
                    })?
            }
        };
        let client = SutNodeClient::new(channel)
            .max_decoding_message_size(max_message)
            .max_encoding_message_size(MAX_SENT_MESSAGE);
        Ok(Self { client })
    }

    pub(crate) async fn name(&self) -> Result<String, TransportError> {
        let reply = self
            .client
            .clone()
            .name(NameRequest {})
            .await
            .map_err(status_text)?;
        Ok(reply.into_inner().name)
    }

    pub(crate) async fn start_session(
        &self,
        req: SessionRequest,
    ) -> Result<SessionReply, TransportError> {
        let reply = self
            .client
            .clone()
            .start_session(req)
            .await
            .map_err(status_text)?;
        Ok(reply.into_inner())
    }

    pub(crate) async fn describe(&self) -> Result<proto::DescribeReply, TransportError> {
        let reply = self
            .client
            .clone()
            .describe(proto::DescribeRequest {})
            .await
            .map_err(status_text)?;
        Ok(reply.into_inner())
    }

    pub(crate) async fn probe(
        &self,
        req: proto::ProbeRequest,
    ) -> Result<proto::ProbeReply, TransportError> {
        let reply = self.client.clone().probe(req).await.map_err(status_text)?;
        Ok(reply.into_inner())
    }

    pub(crate) async fn open(
        &self,
        outgoing: Outgoing,
    ) -> Result<tonic::Streaming<FromNode>, TransportError> {
        let reply = self
            .client
            .clone()
            .infer(outgoing)
            .await
            .map_err(status_text)?;
        Ok(reply.into_inner())
    }
}

/// A status as one line: its code and message (and the transport error under
/// it, if any), without tonic's metadata dump.
pub(crate) fn status_text(s: tonic::Status) -> TransportError {
    let mut text = format!("{:?}", s.code());
    if !s.message().is_empty() {
        text.push_str(": ");
        text.push_str(s.message());
    }
    if let Some(src) = std::error::Error::source(&s) {
        let inner = TransportError::chain(src).0;
        if !text.contains(&inner) {
            text.push_str(" (");
            text.push_str(&inner);
            text.push(')');
        }
    }
    TransportError(text)
}
