//! Resume tokens: opaque documents `{_data: "<hex>"}` whose first bytes encode the
//! cluster time of the change. Decoding never panics: anything unexpected is
//! "cannot decode".
//!
//! Azure Cosmos DB's tokens are opaque through and through (`_data` is binary, a
//! continuation of its change feed, per Microsoft's documentation of
//! `GetChangeStreamTokens`): nothing in them says when. Such a token can carry a
//! time recorded beside it by the listener that committed it (the document time of
//! the changes it follows, docs/cosmos.md), which [`ResumeToken::time`] answers when
//! the token itself cannot.

use std::fmt;

use bson::{doc, Bson, Document};
use chrono::{DateTime, Utc};
use thiserror::Error;

use super::ClusterTime;

/// Keystring type byte for a timestamp, the first byte of every decodable `_data`.
const TIMESTAMP_TYPE: u8 = 0x82;
/// Keystring encodings of the token-version value that follows the timestamp.
const VERSION_ZERO: u8 = 0x29;
const SMALL_INT: u8 = 0x2B;

/// A change stream resume token exactly as the server sent it, and, for a token that
/// cannot tell its own time, the time recorded for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumeToken {
    document: Document,
    /// Recorded beside the token (the lease's `tokenTime`), never part of what is sent
    /// back to the server. Only consulted when the token cannot be decoded.
    recorded: Option<DateTime<Utc>>,
}

/// The token format version found after the timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenVersion {
    V0,
    V1,
    V2,
}

/// What a token says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodedToken {
    pub time: ClusterTime,
    pub version: TokenVersion,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TokenDecodeError {
    #[error("resume token has no _data field")]
    MissingData,
    #[error(
        "resume token _data is binary (a MongoDB 3.6 or an Azure Cosmos DB token); its time cannot be decoded"
    )]
    BinaryData,
    #[error("resume token _data is a {0}, not a hex string")]
    NotAString(String),
    #[error("resume token _data is not hex: {0}")]
    NotHex(String),
    #[error("resume token _data is too short ({0} bytes)")]
    TooShort(usize),
    #[error("resume token _data does not start with a timestamp (type byte {0:#04x})")]
    NotATimestamp(u8),
    #[error("resume token version byte {0:#04x} is not one this program knows")]
    UnknownVersion(u8),
}

/// The kind of position a token marks; events sort after high-water marks at the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// A post-batch token: everything before this time has been seen.
    HighWaterMark,
    /// The token of one change event.
    Event,
}

impl ResumeToken {
    pub fn from_document(document: Document) -> Self {
        Self {
            document,
            recorded: None,
        }
    }

    /// The same token with `at` recorded as its time (see [`Self::time`]).
    pub fn with_recorded_time(mut self, at: Option<DateTime<Utc>>) -> Self {
        self.recorded = at;
        self
    }

    /// The time recorded beside the token, if any (not decoded from it).
    pub fn recorded_time(&self) -> Option<DateTime<Utc>> {
        self.recorded
    }

    /// The token as the server sent it: what goes back to the server and into the
    /// lease's `resumeToken`. A recorded time is not part of it.
    pub fn as_document(&self) -> &Document {
        &self.document
    }

    pub fn into_document(self) -> Document {
        self.document
    }

    /// The `_data` string, if the token has one.
    pub fn data_hex(&self) -> Option<&str> {
        self.document.get_str("_data").ok()
    }

    pub fn decode(&self) -> Result<DecodedToken, TokenDecodeError> {
        decode_data(
            self.document
                .get("_data")
                .ok_or(TokenDecodeError::MissingData)?,
        )
    }

    /// Whether the token says when by itself (MongoDB's do; Azure Cosmos DB's do not).
    pub fn tells_its_time(&self) -> bool {
        self.decode().is_ok()
    }

    /// Its time as people read it: the cluster time decoded from it, else the document
    /// time recorded beside it, said as such ([`super::text::document_time`]); `None`
    /// when neither is known.
    pub fn time_text(&self) -> Option<String> {
        if let Some(id) = token_entry(self) {
            return Some(super::text::entry_time_text(&id));
        }
        match (self.decode(), self.recorded) {
            (Ok(decoded), _) => Some(decoded.time.to_string()),
            (Err(_), Some(at)) => Some(super::text::document_time(at)),
            (Err(_), None) => None,
        }
    }

    /// The token's time: decoded from it, else the time recorded beside it (to the
    /// second, with increment 0: a document's time, not a cluster time), else none.
    /// A capped collection's position (`{_id: ObjectId}`) has its ObjectId's time.
    pub fn time(&self) -> Option<ClusterTime> {
        if let Some(id) = token_entry(self) {
            return Some(super::entry_id::entry_time(&id));
        }
        match self.decode() {
            Ok(decoded) => Some(decoded.time),
            Err(_) => self
                .recorded
                .and_then(|at| u32::try_from(at.timestamp()).ok())
                .map(|secs| ClusterTime::new(secs, 0)),
        }
    }

    /// Whether the token is a change's own or a high-water mark between changes (the
    /// token type after the version: 0 or 128); `None` where it cannot be decoded or is
    /// a version-0 token, which does not say.
    pub fn kind(&self) -> Option<TokenKind> {
        if self.decode().ok()?.version == TokenVersion::V0 {
            return None;
        }
        let (bytes, len) = hex_prefix::<12>(self.data_hex()?).ok()?;
        match bytes[..len].get(11)? {
            &VERSION_ZERO => Some(TokenKind::HighWaterMark),
            _ => Some(TokenKind::Event),
        }
    }

    /// A change's position within its transaction (`txnOpIndex`, 0 for the first and for
    /// a change outside a transaction), read after the token type; `None` for a
    /// high-water mark or a token that cannot be decoded.
    pub fn txn_op_index(&self) -> Option<u64> {
        if self.kind()? != TokenKind::Event {
            return None;
        }
        let hex = self.data_hex()?;
        // Timestamp (9 bytes), version (2), token type 128 (3): the index starts at 14.
        let (head, len) = hex_prefix::<14>(hex).ok()?;
        if head[..len].get(11..14)? != [SMALL_INT + 1, 0x01, 0x00] {
            return None;
        }
        let (rest, len) = hex_prefix::<9>(hex.get(28..)?).ok()?;
        read_keystring_uint(&rest[..len])
    }

    /// The UUID of the collection whose change this token follows, where the token
    /// carries one: MongoDB's event tokens hold it as keystring BinData of subtype 4
    /// (`5A 10 04` then 16 bytes) after the timestamp; high-water-mark tokens, and
    /// tokens that cannot be decoded, hold none.
    pub fn collection_uuid(&self) -> Option<[u8; 16]> {
        const UUID_BINDATA: [u8; 3] = [0x5A, 0x10, 0x04];
        let bytes = hex::decode(self.data_hex()?).ok()?;
        if bytes.first() != Some(&TIMESTAMP_TYPE) {
            return None;
        }
        let after_time = bytes.get(9..)?;
        let at = after_time
            .windows(UUID_BINDATA.len())
            .position(|w| w == UUID_BINDATA)?;
        after_time
            .get(at + UUID_BINDATA.len()..at + UUID_BINDATA.len() + 16)?
            .try_into()
            .ok()
    }

    /// Encodes a v2 token the way MongoDB lays out `_data`: timestamp, version,
    /// token type, then `sequence` as the event's position within that time.
    pub fn encode(time: ClusterTime, kind: TokenKind, sequence: u64) -> Self {
        let mut bytes = Vec::with_capacity(24);
        bytes.push(TIMESTAMP_TYPE);
        bytes.extend_from_slice(&time.as_u64().to_be_bytes());
        push_keystring_uint(&mut bytes, 2);
        push_keystring_uint(
            &mut bytes,
            match kind {
                TokenKind::HighWaterMark => 0,
                TokenKind::Event => 128,
            },
        );
        push_keystring_uint(&mut bytes, sequence);
        bytes.push(0x04); // keystring end marker
        Self::from_document(doc! { "_data": hex::encode_upper(bytes) })
    }
}

impl fmt::Display for ResumeToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.data_hex() {
            Some(hex) => f.write_str(hex),
            None => write!(f, "{}", self.document),
        }
    }
}

fn decode_data(data: &Bson) -> Result<DecodedToken, TokenDecodeError> {
    let hex_text = match data {
        Bson::String(s) => s,
        Bson::Binary(_) => return Err(TokenDecodeError::BinaryData),
        other => {
            return Err(TokenDecodeError::NotAString(format!(
                "{:?}",
                other.element_type()
            )))
        }
    };
    // Only the first 11 bytes matter; decoding a bounded prefix keeps a huge token cheap.
    let (buffer, len) =
        hex_prefix::<11>(hex_text).map_err(|e| TokenDecodeError::NotHex(e.to_string()))?;
    let bytes = &buffer[..len];
    if bytes.len() < 10 {
        return Err(TokenDecodeError::TooShort(bytes.len()));
    }
    if bytes[0] != TIMESTAMP_TYPE {
        return Err(TokenDecodeError::NotATimestamp(bytes[0]));
    }
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[1..9]);
    let time = ClusterTime::from_u64(u64::from_be_bytes(raw));
    let version = match (bytes[9], bytes.get(10)) {
        (VERSION_ZERO, _) => TokenVersion::V0,
        (SMALL_INT, Some(0x02)) => TokenVersion::V1,
        (SMALL_INT, Some(0x04)) => TokenVersion::V2,
        (SMALL_INT, None) => return Err(TokenDecodeError::TooShort(bytes.len())),
        (SMALL_INT, Some(other)) => return Err(TokenDecodeError::UnknownVersion(*other)),
        (other, _) => return Err(TokenDecodeError::UnknownVersion(other)),
    };
    Ok(DecodedToken { time, version })
}

/// The first `N` bytes of the hex text `text` (fewer where it is shorter), decoded on
/// the stack: token fields are read several times per commit, and only their first
/// bytes matter.
fn hex_prefix<const N: usize>(text: &str) -> Result<([u8; N], usize), hex::FromHexError> {
    let digits = &text.as_bytes()[..text.len().min(2 * N)];
    if !digits.len().is_multiple_of(2) {
        return Err(hex::FromHexError::OddLength);
    }
    let mut buffer = [0u8; N];
    let len = digits.len() / 2;
    hex::decode_to_slice(digits, &mut buffer[..len])?;
    Ok((buffer, len))
}

/// The unsigned integer [`push_keystring_uint`] writes at the start of `bytes`.
fn read_keystring_uint(bytes: &[u8]) -> Option<u64> {
    let (&first, rest) = bytes.split_first()?;
    if first == VERSION_ZERO {
        return Some(0);
    }
    let len = usize::from(first.checked_sub(SMALL_INT - 1)?);
    if !(1..=8).contains(&len) {
        return None;
    }
    let shifted = rest
        .get(..len)?
        .iter()
        .fold(0u128, |n, b| (n << 8) | u128::from(*b));
    u64::try_from(shifted >> 1).ok()
}

/// Keystring-style unsigned integer: zero is one byte; otherwise a type byte that
/// grows with the byte length, then `value << 1` big-endian. Longer encodings of
/// larger values sort later, so byte order equals numeric order.
fn push_keystring_uint(out: &mut Vec<u8>, value: u64) {
    if value == 0 {
        out.push(VERSION_ZERO);
        return;
    }
    let shifted = u128::from(value) << 1;
    let be = shifted.to_be_bytes();
    let first = be.iter().position(|b| *b != 0).unwrap_or(be.len() - 1);
    let significant = &be[first..];
    out.push(SMALL_INT - 1 + significant.len() as u8);
    out.extend_from_slice(significant);
}

/// The position token of a capped-collection resource: after the entry `id`.
pub fn entry_token(id: bson::oid::ObjectId) -> ResumeToken {
    ResumeToken::from_document(doc! { "_id": id })
}

/// The entry a capped-collection position token names: a document whose only field is
/// an ObjectId `_id`. Anything else (a change stream's token) is `None`.
pub fn token_entry(token: &ResumeToken) -> Option<bson::oid::ObjectId> {
    let document = token.as_document();
    match (document.len(), document.get("_id")) {
        (1, Some(Bson::ObjectId(id))) => Some(*id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::spec::BinarySubtype;
    use proptest::prelude::*;

    fn token(hex: &str) -> ResumeToken {
        ResumeToken::from_document(doc! { "_data": hex })
    }

    /// The two inserts of one transaction, as a real MongoDB 6.0.5 sent them: the same
    /// cluster time, op index 0 then 1; an update outside a transaction is 0 too.
    #[test]
    fn an_event_token_says_its_place_in_its_transaction() {
        let token = |hex: &str| ResumeToken::from_document(doc! {"_data": hex});
        let first = token("826B0B438F000000052B022C0100296E5A1004691862C8AFD844BB9128BB07B54B2A6A461E5F6964002B040004");
        let second = token("826B0B438F000000052B022C01002B026E5A1004691862C8AFD844BB9128BB07B54B2A6A461E5F6964002B060004");
        let alone = token("826B0B438F000000032B022C0100296E5A1004691862C8AFD844BB9128BB07B54B2A6A461E5F6964002B020004");
        assert_eq!(first.txn_op_index(), Some(0));
        assert_eq!(second.txn_op_index(), Some(1));
        assert_eq!(alone.txn_op_index(), Some(0));
        assert_eq!(token("826B0B37DB000000022B0229296E04").txn_op_index(), None);
        for n in [0u64, 1, 127, 128, 40_000, u64::from(u32::MAX)] {
            let mut bytes = Vec::new();
            push_keystring_uint(&mut bytes, n);
            assert_eq!(read_keystring_uint(&bytes), Some(n), "{n}");
        }
    }

    /// Tokens a real MongoDB 6.0.5 sent: the post-batch token of a whole-deployment
    /// stream opened at 1795897307:2 with `batchSize: 0` (a high-water mark at that
    /// time), and an insert's event token.
    #[test]
    fn a_token_says_whether_it_is_a_change_or_a_high_water_mark() {
        let token = |hex: &str| ResumeToken::from_document(doc! {"_data": hex});
        let high_water_mark = token("826B0B37DB000000022B0229296E04");
        assert_eq!(high_water_mark.kind(), Some(TokenKind::HighWaterMark));
        assert_eq!(
            high_water_mark.time(),
            Some(ClusterTime::new(1_795_897_307, 2))
        );
        let event = token(
            "826B0B37DB000000032B022C0100296E5A1004F456EA295E334A9A9E8A5216690BF71146645F696400646B0B37DB28003589DC12EF790004",
        );
        assert_eq!(event.kind(), Some(TokenKind::Event));
        for (kind, encoded) in [TokenKind::HighWaterMark, TokenKind::Event].map(|k| {
            (
                k,
                ResumeToken::encode(ClusterTime::new(1_800_000_000, 1), k, 0),
            )
        }) {
            assert_eq!(encoded.kind(), Some(kind), "what encode writes reads back");
        }
        for unreadable in ["", "zz", "826B0B37DB00000002", "826B0B37DB0000000229"] {
            assert_eq!(token(unreadable).kind(), None, "{unreadable}");
        }
    }

    /// Tokens a real MongoDB 6.0.5 sent: an insert's event token, the post-batch token
    /// after it (the same bytes), and a high-water mark; the collection's UUID was
    /// `bfc7e19092a340c8a88f71054c678744` by `listCollections`.
    #[test]
    fn an_event_token_names_its_collection_by_uuid() {
        let token = |hex: &str| ResumeToken::from_document(doc! {"_data": hex});
        let event = token(
            "826B0B0BDB000000032B022C0100296E5A1004BFC7E19092A340C8A88F71054C678744463C5F6964003C6B31000004",
        );
        assert_eq!(
            event.collection_uuid().map(hex::encode),
            Some("bfc7e19092a340c8a88f71054c678744".to_string())
        );
        let high_water_mark = ResumeToken::encode(
            ClusterTime::new(1_800_000_000, 1),
            TokenKind::HighWaterMark,
            0,
        );
        assert_eq!(high_water_mark.collection_uuid(), None);
        for unreadable in [
            "",
            "zz",
            "8200",
            "0A6B0B0BDB000000032B022C0100296E5A1004BFC7E19092A340C8A88F71054C678744",
        ] {
            assert_eq!(token(unreadable).collection_uuid(), None, "{unreadable}");
        }
        // Cut inside the UUID: none, not a short one.
        assert_eq!(
            token("826B0B0BDB000000032B022C0100296E5A1004BFC7E190").collection_uuid(),
            None
        );
    }

    #[test]
    fn decodes_real_server_tokens() {
        // Tokens laid out as MongoDB 4.2 (v1), 6.0 (v2) and a v0 version byte.
        let v1 = token("825F8B4A7A000000012B022C0100296E5A1004AB");
        let d = v1.decode().unwrap();
        assert_eq!(d.time, ClusterTime::new(0x5F8B4A7A, 1));
        assert_eq!(d.version, TokenVersion::V1);

        let v2 = token("8263E5B9D2000000022B042C0100296E5A10046B");
        let d = v2.decode().unwrap();
        assert_eq!(d.time, ClusterTime::new(0x63E5B9D2, 2));
        assert_eq!(d.version, TokenVersion::V2);

        let zero = token("825F8B4A7A0000000129295A1004");
        assert_eq!(zero.decode().unwrap().version, TokenVersion::V0);
    }

    #[test]
    fn garbage_is_cannot_decode_not_a_panic() {
        let binary = ResumeToken::from_document(doc! {
            "_data": Bson::Binary(bson::Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] })
        });
        assert_eq!(binary.decode(), Err(TokenDecodeError::BinaryData));
        assert_eq!(
            ResumeToken::from_document(doc! {}).decode(),
            Err(TokenDecodeError::MissingData)
        );
        assert!(matches!(
            token("zz").decode(),
            Err(TokenDecodeError::NotHex(_))
        ));
        assert!(matches!(
            token("82").decode(),
            Err(TokenDecodeError::TooShort(1))
        ));
        assert!(matches!(
            token("825F8B4A7A00000001").decode(),
            Err(TokenDecodeError::TooShort(9))
        ));
        assert!(matches!(
            token("015F8B4A7A000000012B04").decode(),
            Err(TokenDecodeError::NotATimestamp(1))
        ));
        assert!(matches!(
            token("825F8B4A7A000000012B08").decode(),
            Err(TokenDecodeError::UnknownVersion(8))
        ));
        assert!(matches!(
            ResumeToken::from_document(doc! {"_data": 5}).decode(),
            Err(TokenDecodeError::NotAString(_))
        ));
        // Odd-length and non-ASCII input must not panic either.
        let _ = token("825F8B4A7A000000012B0").decode();
        let _ = token("é825F8B4A7A000000012B04").decode();
    }

    #[test]
    fn a_recorded_time_serves_only_a_token_that_cannot_tell_its_own() {
        use chrono::TimeZone;
        let at = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap()
            + chrono::TimeDelta::milliseconds(250);
        // An Azure Cosmos DB token, shaped as Microsoft documents it.
        let cosmos = ResumeToken::from_document(doc! {
            "_data": Bson::Binary(bson::Binary { subtype: BinarySubtype::Generic, bytes: b"{\"V\":2}".to_vec() }),
            "_kind": 1,
        });
        assert!(!cosmos.tells_its_time());
        assert_eq!(cosmos.time(), None, "nothing recorded, nothing invented");
        let timed = cosmos.clone().with_recorded_time(Some(at));
        assert_eq!(timed.time(), Some(ClusterTime::new(1_714_564_800, 0)));
        assert_eq!(timed.recorded_time(), Some(at));
        assert_eq!(
            timed.as_document(),
            cosmos.as_document(),
            "the time is never part of what goes back to the server"
        );
        assert_ne!(
            timed, cosmos,
            "a token and what is known of its time are one value"
        );
        // A MongoDB token's own time wins over anything recorded.
        let mongo = token("8263E5B9D2000000022B042C0100296E5A10046B").with_recorded_time(Some(at));
        assert!(mongo.tells_its_time());
        assert_eq!(mongo.time(), Some(ClusterTime::new(0x63E5B9D2, 2)));
        // A time before 1970 is no token time.
        let before = cosmos.with_recorded_time(Utc.with_ymd_and_hms(1969, 1, 1, 0, 0, 0).single());
        assert_eq!(before.time(), None);
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(secs in any::<u32>(), inc in any::<u32>(), seq in any::<u64>(), event in any::<bool>()) {
            let time = ClusterTime::new(secs, inc);
            let kind = if event { TokenKind::Event } else { TokenKind::HighWaterMark };
            let decoded = ResumeToken::encode(time, kind, seq).decode().unwrap();
            prop_assert_eq!(decoded.time, time);
            prop_assert_eq!(decoded.version, TokenVersion::V2);
        }

        #[test]
        fn token_string_order_matches_time_order(
            a in any::<(u32, u32, u64)>(), b in any::<(u32, u32, u64)>(), ka in any::<bool>(), kb in any::<bool>()
        ) {
            let kind = |e: bool| if e { TokenKind::Event } else { TokenKind::HighWaterMark };
            let ta = ResumeToken::encode(ClusterTime::new(a.0, a.1), kind(ka), a.2);
            let tb = ResumeToken::encode(ClusterTime::new(b.0, b.1), kind(kb), b.2);
            let key = |t: (u32, u32, u64), e: bool| (ClusterTime::new(t.0, t.1), e, t.2);
            prop_assert_eq!(
                ta.data_hex().unwrap().cmp(tb.data_hex().unwrap()),
                key(a, ka).cmp(&key(b, kb))
            );
        }

        #[test]
        fn decoding_arbitrary_strings_never_panics(s in ".*") {
            let _ = token(&s).decode();
        }
    }
}
