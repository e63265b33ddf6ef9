//! The metrics endpoint: `GET /metrics` answers every series of the registries given,
//! in the Prometheus text format; `/` says where they are; anything else is 404.
//! HTTP/1.1 by `hyper`.

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::MetricsError;

/// A running endpoint; it stops when its cancellation token is cancelled or it is
/// dropped.
pub struct MetricsServer {
    address: SocketAddr,
    task: JoinHandle<()>,
}

impl MetricsServer {
    /// The address it listens on (with the port chosen when `:0` was asked for).
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Listens on `address` (`host:port`) and serves `registries` until `stop`.
pub async fn serve(
    address: &str,
    registries: Vec<Registry>,
    stop: CancellationToken,
) -> Result<MetricsServer, MetricsError> {
    let listen_error = |reason: String| MetricsError::Listen {
        address: address.to_string(),
        reason,
    };
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| listen_error(e.to_string()))?;
    let bound = listener
        .local_addr()
        .map_err(|e| listen_error(e.to_string()))?;
    let task = tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((stream, _)) = accepted else {
                continue;
            };
            let registries = registries.clone();
            let service =
                hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let response = respond(&request, &registries);
                    async move { Ok::<_, Infallible>(response) }
                });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = connection => {}
                }
            });
        }
    });
    Ok(MetricsServer {
        address: bound,
        task,
    })
}

fn respond<B>(request: &Request<B>, registries: &[Registry]) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: Vec<u8>| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = content_type.parse() {
            response
                .headers_mut()
                .insert(hyper::header::CONTENT_TYPE, value);
        }
        response
    };
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            b"only GET\n".to_vec(),
        );
    }
    match request.uri().path() {
        "/metrics" => {
            let encoder = TextEncoder::new();
            let families: Vec<_> = registries.iter().flat_map(Registry::gather).collect();
            let mut body = Vec::new();
            match encoder.encode(&families, &mut body) {
                Ok(()) => reply(StatusCode::OK, encoder.format_type(), body),
                Err(e) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    format!("cannot encode the metrics: {e}\n").into_bytes(),
                ),
            }
        }
        "/" => reply(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            b"streamward: the metrics are at /metrics\n".to_vec(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            b"not found: the metrics are at /metrics\n".to_vec(),
        ),
    }
}
