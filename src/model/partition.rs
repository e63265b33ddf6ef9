//! Partitioned resources (docs/protocol.md, "Partitions"): a resource split into P
//! partitions by a server-side hash of each changed document's `_id`, each partition
//! its own lease (own holder, token and fencing version).
//!
//! - The lease of partition `i` of `P` of resource `r` is `r#i/P`
//!   ([`Partition::lease_id`], read back by [`Partition::parse_lease_id`]).
//! - A change belongs to partition `|hash(documentKey._id) mod P|`, where `hash` is
//!   MongoDB's hashed index key (`$toHashedIndexKey`, a signed 64-bit integer) and
//!   `mod` truncates as MongoDB's `$mod` does (a negative hash gives a negative
//!   remainder, hence the absolute value). `_id` and not the whole `documentKey`: on a
//!   sharded collection `documentKey` also holds the shard key, whose value may change,
//!   while `_id` never does, so every change of one document lands in one partition
//!   and stays in order.
//! - Changes that are not about one document (`drop`, `rename`, `invalidate`, …) carry
//!   no `documentKey._id` and reach every partition, so each sees its stream close.
//!
//! [`hashed_index_key`] computes the server's hash here (the sandbox filters with it);
//! tests/partitions.rs compares it with the server's for values of many BSON types.

use std::fmt;

use bson::{doc, Bson, Document};
use md5::{Digest, Md5};
use thiserror::Error;

use super::{ClusterTime, Lease, ResumePoint};

/// The most partitions a resource may have: each is a lease, a change stream and a
/// listener, and every one of those streams reads the whole collection's changes.
pub const MAX_PARTITIONS: u32 = 256;

/// Partition `index` of `count` (`index < count`, `1 <= count <= MAX_PARTITIONS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Partition {
    index: u32,
    count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PartitionError {
    #[error("a resource has 1 to {MAX_PARTITIONS} partitions, not {0}")]
    Count(u32),
    #[error("partition {index} does not exist: a resource with {count} partitions has partitions 0 to {}", count - 1)]
    Index { index: u32, count: u32 },
}

impl Partition {
    pub fn new(index: u32, count: u32) -> Result<Self, PartitionError> {
        if count == 0 || count > MAX_PARTITIONS {
            return Err(PartitionError::Count(count));
        }
        if index >= count {
            return Err(PartitionError::Index { index, count });
        }
        Ok(Self { index, count })
    }

    /// Every partition of a resource split `count` ways.
    pub fn all(count: u32) -> Result<Vec<Self>, PartitionError> {
        (0..count).map(|index| Self::new(index, count)).collect()
    }

    pub fn index(self) -> u32 {
        self.index
    }

    pub fn count(self) -> u32 {
        self.count
    }

    /// The lease `_id` of this partition of `resource`: `resource#index/count`.
    pub fn lease_id(self, resource: &str) -> String {
        format!("{resource}#{self}")
    }

    /// The resource and partition a lease `_id` names, when it is a partition's (the
    /// form [`Partition::lease_id`] writes, with no leading zeros); `None` otherwise.
    pub fn parse_lease_id(id: &str) -> Option<(&str, Partition)> {
        let (resource, suffix) = id.rsplit_once('#')?;
        let (index, count) = suffix.split_once('/')?;
        let number = |text: &str| -> Option<u32> {
            let canonical = !text.is_empty()
                && text.bytes().all(|b| b.is_ascii_digit())
                && (text == "0" || !text.starts_with('0'));
            canonical.then(|| text.parse().ok()).flatten()
        };
        let partition = Partition::new(number(index)?, number(count)?).ok()?;
        (!resource.is_empty()).then_some((resource, partition))
    }

    /// The partition a hashed index key falls in: `|hash mod count|`, with `mod`
    /// truncating toward zero as MongoDB's `$mod` (and Rust's `%`) do.
    pub fn of_hash(hash: i64, count: u32) -> u32 {
        // |remainder| < count <= MAX_PARTITIONS, so it fits.
        u32::try_from((hash % i64::from(count)).unsigned_abs()).unwrap_or(u32::MAX)
    }

    /// Whether a change with this `documentKey` is this partition's. A key without
    /// `_id` is every partition's, as [`Partition::change_stream_stage`] lets it through
    /// on the server.
    pub fn holds_key(self, document_key: &Document) -> Result<bool, UnhashableKey> {
        let Some(id) = document_key.get("_id") else {
            return Ok(true);
        };
        Ok(Self::of_hash(hashed_index_key(id)?, self.count) == self.index)
    }

    /// Whether lease `id` belongs to another split of `resource` than `self`'s: the
    /// unpartitioned lease, or a partition lease of another count. Where a new
    /// partition with no point of its own starts from ([`inherited_start`]).
    pub fn is_earlier_split(self, resource: &str, id: &str) -> bool {
        id == resource
            || Self::parse_lease_id(id)
                .is_some_and(|(r, p)| r == resource && p.count() != self.count)
    }

    /// The change-stream stage that keeps this partition's changes, and every change
    /// that is not about one document. Verified on MongoDB 6.0.5 (tests/partitions.rs).
    pub fn change_stream_stage(self) -> Document {
        doc! {
            "$match": {
                "$or": [
                    { "documentKey._id": { "$exists": false } },
                    { "$expr": { "$eq": [
                        { "$abs": { "$mod": [
                            { "$toHashedIndexKey": "$documentKey._id" },
                            i64::from(self.count),
                        ] } },
                        i64::from(self.index),
                    ] } },
                ]
            }
        }
    }

    /// The stage as the lease's `watch.pipeline` records it (relaxed extended JSON of
    /// the one-stage pipeline), so every view of the lease can show what it reads.
    pub fn pipeline_text(self) -> String {
        Bson::Array(vec![Bson::Document(self.change_stream_stage())])
            .into_relaxed_extjson()
            .to_string()
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Lease ids in the order listings show them: by resource, a resource's own lease
/// first and then its partitions by count and index (`r`, `r#0/2`, `r#1/2`, `r#0/3`),
/// so each resource's partitions are listed together under it.
pub fn lease_order(a: &str, b: &str) -> std::cmp::Ordering {
    let key = |id| match Partition::parse_lease_id(id) {
        Some((resource, p)) => (resource, Some((p.count, p.index))),
        None => (id, None),
    };
    key(a).cmp(&key(b))
}

/// The resource a lease belongs to: a partition lease's resource, else its own id.
pub fn lease_group(lease_id: &str) -> &str {
    Partition::parse_lease_id(lease_id).map_or(lease_id, |(resource, _)| resource)
}

/// A value [`hashed_index_key`] does not hash the way the server does.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("a document key of BSON type {0} cannot be partitioned here (JavaScript code with scope is hashed by the server in a way this code does not reproduce)")]
pub struct UnhashableKey(pub String);

/// MongoDB's hashed index key of `value` (`$toHashedIndexKey`; `hasher.cpp` on the
/// server): the MD5 of the seed (0, as a 32-bit integer) followed by the element
/// hashed recursively — its canonical type as a little-endian 32-bit integer, the
/// field name (with its NUL) for elements inside documents and arrays, then numbers as
/// a 64-bit integer (doubles truncated, decimals rounded half to even, both clamped;
/// NaN is 0), documents and arrays as their elements followed by a 32-bit 0, and every
/// other value as its BSON value bytes. The first 8 bytes of the digest, read
/// little-endian, are the key.
pub fn hashed_index_key(value: &Bson) -> Result<i64, UnhashableKey> {
    let mut bytes = Vec::new();
    // An element inside a document: the BSON encoding gives its exact value bytes.
    doc! { "": value.clone() }
        .to_writer(&mut bytes)
        .map_err(|e| UnhashableKey(format!("{:?} ({e})", value.element_type())))?;
    let mut md5 = Md5::new();
    md5.update(0_i32.to_le_bytes());
    let elements = Elements::of_document(&bytes).ok_or_else(malformed)?;
    for element in elements {
        hash_element(&mut md5, element?, false)?;
    }
    let digest = md5.finalize();
    let mut first = [0_u8; 8];
    first.copy_from_slice(&digest[..8]);
    Ok(i64::from_le_bytes(first))
}

fn malformed() -> UnhashableKey {
    UnhashableKey("malformed BSON".into())
}

/// One element of an encoded document: type byte, name with its NUL, value bytes.
#[derive(Clone, Copy)]
struct Element<'a> {
    kind: u8,
    name: &'a [u8],
    value: &'a [u8],
}

/// The elements of one encoded document, in order.
struct Elements<'a> {
    rest: &'a [u8],
}

impl<'a> Elements<'a> {
    fn of_document(bytes: &'a [u8]) -> Option<Self> {
        let length = usize::try_from(i32::from_le_bytes(bytes.get(..4)?.try_into().ok()?)).ok()?;
        // Between the length and the closing NUL.
        Some(Self {
            rest: bytes.get(4..length.checked_sub(1)?)?,
        })
    }
}

fn le_i32(bytes: &[u8]) -> Option<usize> {
    usize::try_from(i32::from_le_bytes(bytes.get(..4)?.try_into().ok()?)).ok()
}

fn value_size(kind: u8, value: &[u8]) -> Option<usize> {
    let cstring = |from: usize| -> Option<usize> {
        Some(from + value.get(from..)?.iter().position(|b| *b == 0)? + 1)
    };
    match kind {
        0x06 | 0x0A | 0x7F | 0xFF => Some(0),
        0x08 => Some(1),
        0x10 => Some(4),
        0x01 | 0x09 | 0x11 | 0x12 => Some(8),
        0x07 => Some(12),
        0x13 => Some(16),
        0x02 | 0x0D | 0x0E => Some(4 + le_i32(value)?),
        0x03 | 0x04 | 0x0F => le_i32(value),
        0x05 => Some(5 + le_i32(value)?),
        0x0B => cstring(cstring(0)?),
        0x0C => Some(4 + le_i32(value)? + 12),
        _ => None,
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = Result<Element<'a>, UnhashableKey>;

    fn next(&mut self) -> Option<Self::Item> {
        let (&kind, after) = self.rest.split_first()?;
        let element = (|| {
            let name_end = after.iter().position(|b| *b == 0)? + 1;
            let (name, tail) = after.split_at(name_end);
            let size = value_size(kind, tail)?;
            let value = tail.get(..size)?;
            Some((Element { kind, name, value }, tail.get(size..)?))
        })();
        Some(match element {
            Some((element, rest)) => {
                self.rest = rest;
                Ok(element)
            }
            None => {
                self.rest = &[];
                Err(malformed())
            }
        })
    }
}

/// `BSONElement::canonicalType` of a BSON type byte.
fn canonical_type(kind: u8) -> Option<i32> {
    Some(match kind {
        0xFF => -1,
        0x7F => 127,
        0x06 => 0,
        0x0A => 5,
        0x01 | 0x10 | 0x12 | 0x13 => 10,
        0x02 | 0x0E => 15,
        0x03 => 20,
        0x04 => 25,
        0x05 => 30,
        0x07 => 35,
        0x08 => 40,
        0x09 => 45,
        0x11 => 47,
        0x0B => 50,
        0x0C => 55,
        0x0D => 60,
        0x0F => 65,
        _ => return None,
    })
}

fn hash_element(md5: &mut Md5, element: Element<'_>, with_name: bool) -> Result<(), UnhashableKey> {
    let canonical = canonical_type(element.kind).ok_or_else(malformed)?;
    md5.update(canonical.to_le_bytes());
    if with_name {
        md5.update(element.name);
    }
    let eight = |value: &[u8]| -> Result<[u8; 8], UnhashableKey> {
        value.try_into().map_err(|_| malformed())
    };
    match element.kind {
        0x03 | 0x04 => {
            for inner in Elements::of_document(element.value).ok_or_else(malformed)? {
                hash_element(md5, inner?, true)?;
            }
            md5.update(0_i32.to_le_bytes());
        }
        0x0F => return Err(UnhashableKey("JavaScriptCodeWithScope".into())),
        0x10 => {
            let four: [u8; 4] = element.value.try_into().map_err(|_| malformed())?;
            md5.update(i64::from(i32::from_le_bytes(four)).to_le_bytes());
        }
        0x12 => md5.update(element.value),
        0x01 => {
            let number = double_as_long(f64::from_le_bytes(eight(element.value)?));
            md5.update(number.to_le_bytes());
        }
        0x13 => {
            let sixteen: [u8; 16] = element.value.try_into().map_err(|_| malformed())?;
            md5.update(decimal_as_long(u128::from_le_bytes(sixteen)).to_le_bytes());
        }
        _ => md5.update(element.value),
    }
    Ok(())
}

/// `safeNumberLong` of a double, as MongoDB 6.0.5 on x86-64 computes it: NaN is 0,
/// beyond 2^63 either way clamps, and exactly 2^63 gives the minimum (seen on the
/// server: the C++ conversion of 2^63 overflows to it).
fn double_as_long(d: f64) -> i64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if d.is_nan() {
        0
    } else if d > TWO_63 {
        i64::MAX
    } else if d < -TWO_63 || d == TWO_63 {
        i64::MIN
    } else {
        // In range: truncation toward zero.
        d as i64
    }
}

/// `safeNumberLong` of a Decimal128 (its IEEE 754-2008 BID encoding): NaN is 0, values
/// beyond the 64-bit range and infinities clamp, others round half to even.
fn decimal_as_long(bits: u128) -> i64 {
    let negative = bits >> 127 == 1;
    let clamp = if negative { i64::MIN } else { i64::MAX };
    let (exponent, coefficient) = if (bits >> 125) & 0b11 == 0b11 {
        match (bits >> 122) & 0b11111 {
            0b11111 => return 0,
            0b11110 => return clamp,
            // A coefficient beyond 10^34 - 1 is non-canonical: zero.
            _ => ((bits >> 111) & 0x3FFF, 0),
        }
    } else {
        ((bits >> 113) & 0x3FFF, bits & ((1 << 113) - 1))
    };
    if coefficient == 0 {
        return 0;
    }
    let scale = i64::try_from(exponent).unwrap_or(0) - 6176;
    let magnitude: Option<u128> = if scale >= 0 {
        u32::try_from(scale)
            .ok()
            .and_then(|s| 10_u128.checked_pow(s))
            .and_then(|p| coefficient.checked_mul(p))
    } else {
        // The coefficient is below 2^113 < 10^35: dividing by 10^36 or more leaves
        // less than a tenth, which rounds to 0.
        match u32::try_from(-scale).ok().filter(|k| *k <= 36) {
            None => Some(0),
            Some(k) => {
                let divisor = 10_u128.pow(k);
                let (quotient, remainder) = (coefficient / divisor, coefficient % divisor);
                let up = match (remainder * 2).cmp(&divisor) {
                    std::cmp::Ordering::Greater => true,
                    std::cmp::Ordering::Equal => quotient % 2 == 1,
                    std::cmp::Ordering::Less => false,
                };
                Some(quotient + u128::from(up))
            }
        }
    };
    match magnitude {
        None => clamp,
        Some(m) if negative => {
            if m >= 1 << 63 {
                i64::MIN
            } else {
                -i64::try_from(m).unwrap_or(i64::MAX)
            }
        }
        Some(m) => i64::try_from(m).unwrap_or(i64::MAX),
    }
}

/// Where a partition lease with no resume point of its own starts, when the resource
/// was split differently before: the oldest committed point of the leases of the
/// earlier split (partition leases of the same resource with another count, and the
/// resource's own unpartitioned lease).
#[derive(Debug, Clone, PartialEq)]
pub struct Inherited {
    /// `None`: one of them never committed, so nothing is known to be done: start as
    /// a new resource does (bootstrap).
    pub at: Option<ClusterTime>,
    /// The leases it was taken from, for the log.
    pub from: Vec<String>,
}

/// [`Inherited`] for `partition` of `resource`, from the leases there are; `None`
/// when no other split of the resource has a lease (a new resource).
pub fn inherited_start<'a>(
    resource: &str,
    partition: Partition,
    leases: impl IntoIterator<Item = &'a Lease>,
) -> Option<Inherited> {
    let mut from = Vec::new();
    let mut oldest: Option<Option<ClusterTime>> = None;
    for lease in leases {
        if !partition.is_earlier_split(resource, &lease.resource) {
            continue;
        }
        from.push(lease.resource.clone());
        // A point with no time (never committed, or a token that does not tell its
        // time) is older than anything.
        let at = match lease.resume_point() {
            ResumePoint::Oldest => None,
            point => point.time(),
        };
        oldest = Some(match oldest {
            None => at,
            Some(before) => before.zip(at).map(|(a, b)| a.min(b)),
        });
    }
    from.sort();
    oldest.map(|at| Inherited { at, from })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ResumeToken;
    use crate::model::TokenKind;

    #[test]
    fn a_partition_exists_only_inside_its_count() {
        assert!(Partition::new(0, 1).is_ok());
        assert!(Partition::new(255, 256).is_ok());
        assert_eq!(Partition::new(0, 0), Err(PartitionError::Count(0)));
        assert_eq!(Partition::new(0, 257), Err(PartitionError::Count(257)));
        let error = Partition::new(4, 4).unwrap_err();
        assert_eq!(error, PartitionError::Index { index: 4, count: 4 });
        assert!(error.to_string().contains("partitions 0 to 3"), "{error}");
        assert_eq!(Partition::all(3).map(|all| all.len()), Ok(3));
    }

    #[test]
    fn lease_ids_name_the_resource_and_read_back() {
        let p = Partition::new(2, 4).unwrap();
        assert_eq!(p.lease_id("shop.orders"), "shop.orders#2/4");
        assert_eq!(
            Partition::parse_lease_id("shop.orders#2/4"),
            Some(("shop.orders", p))
        );
        // The last '#' splits: a resource may itself hold one.
        assert_eq!(
            Partition::parse_lease_id("a#b#0/1"),
            Some(("a#b", Partition::new(0, 1).unwrap()))
        );
        for not_a_partition in [
            "shop.orders",
            "r#",
            "r#1",
            "r#4/4",
            "r#0/0",
            "r#01/4",
            "r#1/04",
            "r#-1/4",
            "r#+1/4",
            "#0/2",
            "r#1/300",
            "r#1/2/3",
        ] {
            assert_eq!(
                Partition::parse_lease_id(not_a_partition),
                None,
                "{not_a_partition}"
            );
        }
    }

    #[test]
    fn a_negative_hash_falls_in_the_partition_of_its_remainders_size() {
        assert_eq!(Partition::of_hash(7, 4), 3);
        assert_eq!(Partition::of_hash(-7, 4), 3);
        assert_eq!(Partition::of_hash(-8, 4), 0);
        assert_eq!(Partition::of_hash(i64::MIN, 3), 2);
        assert_eq!(Partition::of_hash(i64::MAX, 1), 0);
    }

    /// Values `$toHashedIndexKey` returned on MongoDB 6.0.5 (docs/protocol.md,
    /// "Partitions"); tests/partitions.rs compares many more against a live server.
    #[test]
    fn the_hash_is_the_servers_for_values_it_was_seen_to_return() {
        let oid = bson::oid::ObjectId::parse_str("5f0000000000000000000001").unwrap();
        let seen: Vec<(Bson, i64)> = vec![
            (Bson::Int32(1), 5902408780260971510),
            (Bson::Int64(1), 5902408780260971510),
            (Bson::Double(1.5), 5902408780260971510),
            (Bson::Int32(-1), 1140205862565771219),
            (Bson::String("a".into()), 2780795045148116090),
            (Bson::String(String::new()), 2049396243249673340),
            (Bson::ObjectId(oid), -2020958220267376720),
            (Bson::Document(doc! {"a": 1}), -8705610352600103477),
            (
                Bson::Document(doc! {"a": 1, "b": "x"}),
                -9120163015462966597,
            ),
            (Bson::Document(doc! {}), 7980500913326740417),
            (
                Bson::Array(vec![Bson::Int32(1), Bson::Int32(2)]),
                8312708174902235769,
            ),
            (Bson::Null, 2338878944348059895),
            (Bson::Boolean(true), 6405873908747105701),
            (Bson::Int64(1 << 40), -7760001454274422498),
            (Bson::Double(1e30), 921523596458303250),
            (Bson::Double(f64::NAN), 4854801880128277513),
            (Bson::Int32(2), 848411777775835583),
        ];
        for (value, server) in seen {
            assert_eq!(hashed_index_key(&value), Ok(server), "{value:?}");
        }
    }

    #[test]
    fn numbers_become_the_integers_the_server_makes_of_them() {
        assert_eq!(double_as_long(-1.9), -1);
        assert_eq!(double_as_long(f64::INFINITY), i64::MAX);
        assert_eq!(double_as_long(f64::NEG_INFINITY), i64::MIN);
        assert_eq!(double_as_long(9_223_372_036_854_775_808.0), i64::MIN);
        let decimal = |text: &str| -> i64 {
            let value: bson::Decimal128 = text.parse().unwrap();
            decimal_as_long(u128::from_le_bytes(value.bytes()))
        };
        assert_eq!(decimal("2.5"), 2);
        assert_eq!(decimal("3.5"), 4);
        assert_eq!(decimal("-2.5"), -2);
        assert_eq!(decimal("0.5000001"), 1);
        assert_eq!(decimal("1.7"), 2);
        assert_eq!(decimal("1E+30"), i64::MAX);
        assert_eq!(decimal("-1E+30"), i64::MIN);
        assert_eq!(decimal("NaN"), 0);
        assert_eq!(decimal("Infinity"), i64::MAX);
        assert_eq!(decimal("-Infinity"), i64::MIN);
        assert_eq!(decimal("9223372036854775807.5"), i64::MAX);
        assert_eq!(decimal("-9223372036854775808"), i64::MIN);
        assert_eq!(decimal("1E-40"), 0);
        assert_eq!(decimal("12345E-2"), 123);
    }

    #[test]
    fn every_key_falls_in_exactly_one_partition() {
        for count in [1, 2, 3, 4, 7] {
            for id in 0..200 {
                let key = doc! { "_id": format!("k{id}") };
                let holders = Partition::all(count)
                    .unwrap()
                    .into_iter()
                    .filter(|p| p.holds_key(&key).unwrap())
                    .count();
                assert_eq!(holders, 1, "k{id} in {count} partitions");
            }
        }
        // A key without _id is every partition's, as the server's stage lets it by.
        let no_id = doc! { "sk": 1 };
        let partitions = Partition::all(3).unwrap();
        assert!(partitions.iter().all(|p| p.holds_key(&no_id).unwrap()));
    }

    #[test]
    fn listings_put_a_resources_partitions_under_it() {
        let mut ids = vec!["r#1/3", "r-x", "r#0/3", "r", "r#10/12", "r#2/12", "q#0/1"];
        ids.sort_by(|a, b| lease_order(a, b));
        assert_eq!(
            ids,
            ["q#0/1", "r", "r#0/3", "r#1/3", "r#2/12", "r#10/12", "r-x"]
        );
    }

    fn lease(id: &str, at: Option<u32>) -> Lease {
        let mut lease = Lease::vacant(id);
        lease.resume_token =
            at.map(|s| ResumeToken::encode(ClusterTime::new(s, 1), TokenKind::Event, 0));
        lease
    }

    #[test]
    fn a_new_split_starts_at_the_oldest_point_of_the_old_one() {
        let p = Partition::new(1, 3).unwrap();
        let leases = [
            lease("r#0/2", Some(200)),
            lease("r#1/2", Some(150)),
            lease("r#0/3", Some(100)), // the same split: not an earlier one
            lease("other#0/2", Some(50)),
            lease("r2", Some(10)),
        ];
        let inherited = inherited_start("r", p, &leases).unwrap();
        assert_eq!(inherited.at, Some(ClusterTime::new(150, 1)));
        assert_eq!(inherited.from, ["r#0/2", "r#1/2"]);
        // The unpartitioned lease is an earlier split too; one never committed wins.
        let with_plain = [lease("r#0/2", Some(200)), lease("r", None)];
        let inherited = inherited_start("r", p, &with_plain).unwrap();
        assert_eq!(inherited.at, None);
        assert_eq!(inherited.from, ["r", "r#0/2"]);
        // An operator's resumeAt counts as a point.
        let mut at = Lease::vacant("r#0/1");
        at.resume_at = Some(ClusterTime::new(90, 0));
        let inherited = inherited_start("r", p, [&at]).unwrap();
        assert_eq!(inherited.at, Some(ClusterTime::new(90, 0)));
        assert_eq!(inherited_start("r", p, &[lease("r#2/3", Some(1))]), None);
    }
}
