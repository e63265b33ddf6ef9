//! Decoding a stored document through serde with errors that name the field: every
//! field is read as one BSON type ([`BsonType`]), and a value of another type, or a
//! document of the wrong shape, is `StoreError::Malformed` naming its path
//! (`failure.attempts`, `steps.0.at`) and what was found.

use bson::{Bson, Document};
use chrono::{DateTime, Utc};
use serde::de::{DeserializeOwned, Error as _, Unexpected};
use serde::{Deserialize, Deserializer};

use super::malformed;
use crate::model::text::clip;
use crate::model::ClusterTime;
use crate::store::StoreError;

/// A Rust value one BSON type holds.
pub(super) trait BsonType: Sized {
    /// What a field of this type holds, for the error: "a date".
    const EXPECTED: &'static str;

    /// The value, or the BSON value given back when it is of another type.
    fn from_bson(value: Bson) -> Result<Self, Bson>;
}

impl BsonType for String {
    const EXPECTED: &'static str = "a string";
    fn from_bson(value: Bson) -> Result<Self, Bson> {
        match value {
            Bson::String(s) => Ok(s),
            other => Err(other),
        }
    }
}

/// Stored as int32, int64 or an integral double (mongosh writes numbers as doubles).
impl BsonType for i64 {
    const EXPECTED: &'static str = "an integer";
    fn from_bson(value: Bson) -> Result<Self, Bson> {
        match value {
            Bson::Int64(v) => Ok(v),
            Bson::Int32(v) => Ok(i64::from(v)),
            Bson::Double(v) if v.fract() == 0.0 && v.abs() < 9.0e15 => Ok(v as i64),
            other => Err(other),
        }
    }
}

impl BsonType for DateTime<Utc> {
    const EXPECTED: &'static str = "a date";
    fn from_bson(value: Bson) -> Result<Self, Bson> {
        match value {
            Bson::DateTime(at) => Ok(at.to_chrono()),
            other => Err(other),
        }
    }
}

impl BsonType for ClusterTime {
    const EXPECTED: &'static str = "a timestamp";
    fn from_bson(value: Bson) -> Result<Self, Bson> {
        match value {
            Bson::Timestamp(ts) => Ok(ClusterTime::from(ts)),
            other => Err(other),
        }
    }
}

impl BsonType for Document {
    const EXPECTED: &'static str = "a document";
    fn from_bson(value: Bson) -> Result<Self, Bson> {
        match value {
            Bson::Document(d) => Ok(d),
            other => Err(other),
        }
    }
}

/// For `#[serde(deserialize_with = "optional")]`: a field that may be missing (with
/// `#[serde(default)]`) or null, else of `T`'s type.
pub(super) fn optional<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: BsonType,
{
    match Option::<Bson>::deserialize(deserializer)? {
        None => Ok(None),
        Some(value) => T::from_bson(value).map(Some).map_err(|found| {
            D::Error::invalid_type(unexpected(&found, &mut String::new()), &T::EXPECTED)
        }),
    }
}

/// A value kept as BSON by the decoding (a field read only beside another), read as
/// `T` now: what is wrong is said as [`optional`] says it.
pub(super) fn typed<T: BsonType>(value: Option<Bson>) -> Result<Option<T>, String> {
    match value {
        None | Some(Bson::Null) => Ok(None),
        Some(value) => T::from_bson(value).map(Some).map_err(|found| {
            serde::de::value::Error::invalid_type(
                unexpected(&found, &mut String::new()),
                &T::EXPECTED,
            )
            .to_string()
        }),
    }
}

/// What was found, as serde says it: `string "tomorrow"` (clipped), `integer `5``, `a
/// timestamp`. `scratch` holds the text of a type serde has no word for.
fn unexpected<'a>(value: &'a Bson, scratch: &'a mut String) -> Unexpected<'a> {
    match value {
        Bson::String(s) => {
            *scratch = clip(s, 40);
            Unexpected::Str(scratch)
        }
        Bson::Int32(v) => Unexpected::Signed(i64::from(*v)),
        Bson::Int64(v) => Unexpected::Signed(*v),
        Bson::Double(v) => Unexpected::Float(*v),
        Bson::Boolean(v) => Unexpected::Bool(*v),
        Bson::Null => Unexpected::Unit,
        Bson::Document(_) => Unexpected::Map,
        Bson::Array(_) => Unexpected::Seq,
        Bson::Binary(_) => Unexpected::Other("binary data"),
        other => {
            *scratch = format!("{:?}", other.element_type());
            Unexpected::Other(scratch)
        }
    }
}

/// `document` as a `T`; a field in error is named by its path under `prefix` (the
/// field `document` is stored under, if any).
pub(super) fn decode<T: DeserializeOwned>(
    what: &str,
    prefix: Option<&str>,
    document: &Document,
) -> Result<T, StoreError> {
    let deserializer = bson::Deserializer::new(Bson::Document(document.clone()));
    serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let field = prefix
            .into_iter()
            .map(str::to_string)
            .chain(error.path().iter().map(segment))
            .collect::<Vec<_>>()
            .join(".");
        malformed(what, &field, error.into_inner())
    })
}

/// One step of a field's path as MongoDB writes it: `steps.0.at`, not `steps[0].at`.
fn segment(segment: &serde_path_to_error::Segment) -> String {
    use serde_path_to_error::Segment;
    match segment {
        Segment::Seq { index } => index.to_string(),
        Segment::Map { key } => key.clone(),
        Segment::Enum { variant } => variant.clone(),
        Segment::Unknown => "?".to_string(),
    }
}

/// A field that is wrong once decoded (an unknown kind, a negative count), named
/// relative to the document it is in until the caller places it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FieldError {
    pub field: String,
    pub detail: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, detail: impl std::fmt::Display) -> Self {
        Self {
            field: field.into(),
            detail: detail.to_string(),
        }
    }

    /// The same error, in a document stored under `prefix`.
    pub fn under(self, prefix: &str) -> Self {
        Self {
            field: format!("{prefix}.{}", self.field),
            ..self
        }
    }

    pub fn into_malformed(self, what: &str) -> StoreError {
        malformed(what, &self.field, self.detail)
    }
}
