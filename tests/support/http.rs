//! What the tests of the metrics endpoints share: the address a process says it
//! serves at, a plain HTTP GET, and `promtool`.
// Shared by several test crates, each of which uses only part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

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

/// The `host:port` in the first line `child` writes to stderr (`… http://ADDR/metrics …`).
pub fn served_address(child: &mut Child) -> String {
    let mut first = String::new();
    BufReader::new(child.stderr.take().expect("stderr piped"))
        .read_line(&mut first)
        .expect("the process says where it serves");
    first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split("/metrics").next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string()
}

/// `promtool ARGS` in the crate's directory, `input` on its stdin: whether it succeeded
/// and what it said; `None` when promtool is not installed and this run may skip it
/// (Debian's `prometheus` package; `.ci/run` installs it).
pub fn promtool(args: &[&str], input: Option<&str>) -> Option<(bool, String)> {
    let spawned = Command::new("promtool")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            assert!(
                !super::live::skipping_is_forbidden(),
                "promtool is needed here (Debian's prometheus package): {e}"
            );
            eprintln!("promtool {args:?} skipped: {e}");
            return None;
        }
    };
    let mut stdin = child.stdin.take().expect("stdin piped");
    if let Some(input) = input {
        stdin.write_all(input.as_bytes()).expect("feed promtool");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("promtool ran");
    Some((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}
