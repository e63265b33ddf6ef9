use std::fmt;
use std::str::FromStr;

/// `db.collection`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace {
    pub db: String,
    pub coll: String,
}

impl Namespace {
    pub fn new(db: impl Into<String>, coll: impl Into<String>) -> Self {
        Self {
            db: db.into(),
            coll: coll.into(),
        }
    }

    /// This whole collection, as changes on it are counted.
    pub fn whole(&self) -> crate::model::WatchedCollection {
        crate::model::WatchedCollection::Namespace {
            db: self.db.clone(),
            coll: self.coll.clone(),
            filtered: false,
        }
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.db, self.coll)
    }
}

/// MongoDB's naming rules (Unix servers): a database name has fewer than 64 bytes
/// (the manual says characters; MongoDB 6.0.5 refuses 40 two-byte characters) and none
/// of `/\. "$` or NUL; a collection name is not empty, has no `$` or NUL and does not
/// start with `system.`; `db.collection` is at most 255 bytes.
const DB_NAME_MAX_BYTES: usize = 63;
const NAMESPACE_MAX_BYTES: usize = 255;

/// Parses `DB.COLLECTION` (as typed by a user) and checks it against MongoDB's naming
/// rules, so a name the server would refuse is a usage error before connecting.
impl FromStr for Namespace {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let shown = crate::model::text::clip(s, 80);
        let Some((db, coll)) = s
            .split_once('.')
            .filter(|(d, c)| !d.is_empty() && !c.is_empty())
        else {
            return Err(format!(
                "{shown:?} is not a namespace: expected DB.COLLECTION"
            ));
        };
        let refuse = |why: &str| Err(format!("{shown:?} is not a valid namespace: {why}"));
        if db.len() > DB_NAME_MAX_BYTES {
            return refuse("a database name has fewer than 64 bytes (UTF-8)");
        }
        if db
            .chars()
            .any(|c| matches!(c, '/' | '\\' | ' ' | '"' | '$' | '\0'))
        {
            return refuse("a database name cannot contain / \\ space \" $ or NUL");
        }
        if coll.contains(['$', '\0']) {
            return refuse("a collection name cannot contain $ or NUL");
        }
        if coll.starts_with("system.") {
            return refuse("system. collections belong to the server");
        }
        if s.len() > NAMESPACE_MAX_BYTES {
            return refuse("DB.COLLECTION is at most 255 bytes");
        }
        Ok(Namespace::new(db, coll))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_server_would_refuse_are_refused_here() {
        assert_eq!(
            "sw.leases".parse::<Namespace>(),
            Ok(Namespace::new("sw", "leases"))
        );
        assert_eq!(
            "sw.leases.v2".parse::<Namespace>(),
            Ok(Namespace::new("sw", "leases.v2"))
        );
        for bad in [
            "leases",
            ".leases",
            "sw.",
            "s$w.leases",
            "s w.leases",
            "sw.lea$es",
            "sw.system.users",
            "sw.a\0b",
        ] {
            assert!(bad.parse::<Namespace>().is_err(), "{bad:?}");
        }
        assert!(format!("{}.c", "d".repeat(64))
            .parse::<Namespace>()
            .is_err());
        assert!(format!("{}.c", "d".repeat(63)).parse::<Namespace>().is_ok());
        // Bytes, not characters: the server refuses 40 two-byte characters.
        assert!(format!("{}.c", "é".repeat(40))
            .parse::<Namespace>()
            .is_err());
        assert!(format!("{}.c", "é".repeat(31)).parse::<Namespace>().is_ok());
        let long = format!("db.{}", "c".repeat(300));
        let refused = long.parse::<Namespace>().unwrap_err();
        assert!(refused.contains("255 bytes"), "{refused}");
        assert!(
            refused.chars().count() < 200,
            "the echo is bounded: {refused}"
        );
    }
}
