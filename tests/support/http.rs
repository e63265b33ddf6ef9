//! A plain HTTP GET for the tests of the metrics endpoints.
// Shared by several test crates, each of which uses only part of it.
#![allow(dead_code)]

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;

/// `GET path` on `address`: the status and the body.
pub async fn get(address: &str, path: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect to the exporter");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("HTTP handshake");
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header("host", address)
        .body(Empty::<Bytes>::new())
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}
