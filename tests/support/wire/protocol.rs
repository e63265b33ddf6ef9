//! OP_MSG framing: a 16-byte header, flag bits, a kind-0 body section, kind-1
//! document sequences, and an optional CRC-32C checksum (skipped, not checked).

use std::io::Cursor;

use bson::{Bson, Document};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

pub const OP_MSG: i32 = 2013;
const CHECKSUM_PRESENT: u32 = 1;
const MORE_TO_COME: u32 = 1 << 1;

pub struct Request {
    pub request_id: i32,
    pub more_to_come: bool,
    pub body: Document,
}

fn le_i32(bytes: &[u8]) -> i32 {
    i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// Reads one message; `None` at end of stream. Document sequences (kind 1) are
/// merged into the body as arrays named by their identifier.
pub async fn read_message(stream: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut header = [0u8; 16];
    if stream.read_exact(&mut header).await.is_err() {
        return Ok(None);
    }
    let length = le_i32(&header[0..4]);
    let request_id = le_i32(&header[4..8]);
    let op_code = le_i32(&header[12..16]);
    if !(16..=48_000_000).contains(&length) {
        return Err(std::io::Error::other("bad message length"));
    }
    let mut rest = vec![0u8; length as usize - 16];
    stream.read_exact(&mut rest).await?;
    if op_code != OP_MSG {
        return Err(std::io::Error::other(format!(
            "unsupported opCode {op_code}"
        )));
    }
    let flags = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    let end = if flags & CHECKSUM_PRESENT != 0 {
        rest.len() - 4
    } else {
        rest.len()
    };
    let mut at = 4;
    let mut body: Option<Document> = None;
    let mut sequences: Vec<(String, Vec<Bson>)> = Vec::new();
    while at < end {
        let kind = rest[at];
        at += 1;
        match kind {
            0 => {
                let size = le_i32(&rest[at..]) as usize;
                let document = Document::from_reader(Cursor::new(&rest[at..at + size]))
                    .map_err(std::io::Error::other)?;
                body = Some(document);
                at += size;
            }
            1 => {
                let size = le_i32(&rest[at..]) as usize;
                let section_end = at + size;
                let mut cursor = at + 4;
                let name_end = rest[cursor..]
                    .iter()
                    .position(|b| *b == 0)
                    .map(|p| cursor + p)
                    .ok_or_else(|| std::io::Error::other("unterminated identifier"))?;
                let name = String::from_utf8_lossy(&rest[cursor..name_end]).into_owned();
                cursor = name_end + 1;
                let mut documents = Vec::new();
                while cursor < section_end {
                    let doc_size = le_i32(&rest[cursor..]) as usize;
                    let document =
                        Document::from_reader(Cursor::new(&rest[cursor..cursor + doc_size]))
                            .map_err(std::io::Error::other)?;
                    documents.push(Bson::Document(document));
                    cursor += doc_size;
                }
                sequences.push((name, documents));
                at = section_end;
            }
            other => {
                return Err(std::io::Error::other(format!(
                    "unknown section kind {other}"
                )))
            }
        }
    }
    let mut body = body.ok_or_else(|| std::io::Error::other("no body section"))?;
    for (name, documents) in sequences {
        body.insert(name, documents);
    }
    Ok(Some(Request {
        request_id,
        more_to_come: flags & MORE_TO_COME != 0,
        body,
    }))
}

/// An OP_MSG reply with one kind-0 section.
pub fn encode(request_id: i32, response_to: i32, body: &Document) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    body.to_writer(&mut bytes).ok()?;
    Some(encode_raw(request_id, response_to, &bytes))
}

/// An OP_MSG reply whose kind-0 section is `section` verbatim (valid BSON or not).
pub fn encode_raw(request_id: i32, response_to: i32, section: &[u8]) -> Vec<u8> {
    let length = 16 + 4 + 1 + section.len();
    let mut message = Vec::with_capacity(length);
    message.extend_from_slice(&(length as i32).to_le_bytes());
    message.extend_from_slice(&request_id.to_le_bytes());
    message.extend_from_slice(&response_to.to_le_bytes());
    message.extend_from_slice(&OP_MSG.to_le_bytes());
    message.extend_from_slice(&0u32.to_le_bytes());
    message.push(0);
    message.extend_from_slice(section);
    message
}
