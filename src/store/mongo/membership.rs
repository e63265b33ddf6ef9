//! Membership on MongoDB: `<db>.processes` beside the leases, one document per running
//! process, `{_id, host, pid, startedAt, renewedAt, expiresAt, listeners: [{resource,
//! listenerId}]}`, every time by the server's clock (`$$NOW`).

use std::future::IntoFuture;
use std::time::Duration;

use bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;

use super::codec::{integer, malformed, opt_string, read_each, required_date};
use super::errors::with_one_retry;
use super::MongoStore;
use crate::model::member_field as field;
use crate::model::{Announcement, Member, MemberListener};
use crate::store::{Listing, MemberScope, MembershipStore, StoreError, StoreResult};

const WHAT: &str = "process";

/// The filter and pipeline of `announce`. The filter is the `_id` alone: an upsert's
/// query may not hold `$expr` (code 224), so whether the document had expired is
/// decided inside the pipeline. Every value from the caller is a `$literal`, so a
/// resource named `$x` is a name, not a field path.
pub(super) fn announce_command(
    announcement: &Announcement,
    ttl: Duration,
) -> (Document, Vec<Document>) {
    let listeners: Vec<Bson> = announcement
        .listeners
        .iter()
        .map(|l| {
            Bson::Document(doc! {
                field::RESOURCE: &l.resource,
                field::LISTENER_ID: &l.listener,
            })
        })
        .collect();
    let millis = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let expires = format!("${}", field::EXPIRES_AT);
    let started = format!("${}", field::STARTED_AT);
    let pipeline = vec![doc! { "$set": {
        field::HOST: { "$literal": &announcement.host },
        field::PID: i64::from(announcement.pid),
        // Kept while the membership is live; a new or expired one starts now. Every
        // expression of one `$set` reads the document as it was before it.
        field::STARTED_AT: { "$cond": [
            { "$gt": [&expires, "$$NOW"] },
            { "$ifNull": [&started, "$$NOW"] },
            "$$NOW",
        ] },
        field::RENEWED_AT: "$$NOW",
        field::EXPIRES_AT: { "$add": ["$$NOW", millis] },
        field::LISTENERS: { "$literal": listeners },
    } }];
    (doc! { field::PROCESS: &announcement.process }, pipeline)
}

impl MongoStore {
    fn membership_hint(&self) -> String {
        format!(
            "insert, update, find and remove on {} (the streamwardListener role in docs/permissions.md)",
            self.settings.processes()
        )
    }
}

impl MembershipStore for MongoStore {
    /// One `findAndModify` upsert by `_id`, pipeline update, return-after, majority;
    /// retried once (a second renewal of the same process changes nothing that matters).
    async fn announce(&self, announcement: &Announcement, ttl: Duration) -> StoreResult<Member> {
        let action = format!("announce process {}", announcement.process);
        let processes = self.collection(&self.settings.processes());
        let (filter, pipeline) = announce_command(announcement, ttl);
        let written = with_one_retry(self.write_timeout(), &action, || {
            processes
                .find_one_and_update(filter.clone(), pipeline.clone())
                .upsert(true)
                .return_document(ReturnDocument::After)
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| e.into_store_hinted(&action, &self.membership_hint()))?;
        let Some(written) = written else {
            return Err(StoreError::Malformed {
                what: "findAndModify reply".into(),
                detail: format!(
                    "an upsert of process {} returned no document",
                    announcement.process
                ),
            });
        };
        member_from_document(&written)
    }

    /// `find` sorted by `_id`; live ones by `{$expr: {$gt: ["$expiresAt", "$$NOW"]}}`.
    async fn list_members(&self, scope: MemberScope) -> StoreResult<Listing<Member>> {
        let action = "list the processes";
        let filter = match scope {
            MemberScope::Live => {
                doc! { "$expr": { "$gt": [format!("${}", field::EXPIRES_AT), "$$NOW"] } }
            }
            MemberScope::All => doc! {},
        };
        let documents = self
            .read_matching(
                self.collection(&self.settings.processes()),
                filter,
                None,
                action,
            )
            .await
            .map_err(|e| {
                let hint = format!(
                    "find on {} (the streamwardReader role in docs/permissions.md)",
                    self.settings.processes()
                );
                e.into_store_hinted(action, &hint)
            })?;
        Ok(read_each(&documents, member_from_document))
    }

    /// `delete` by `_id`, majority, retried once.
    async fn leave(&self, process: &str) -> StoreResult<()> {
        let action = format!("remove process {process}");
        let processes = self.collection(&self.settings.processes());
        with_one_retry(self.write_timeout(), &action, || {
            processes
                .delete_one(doc! { field::PROCESS: process })
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| e.into_store_hinted(&action, &self.membership_hint()))?;
        Ok(())
    }
}

pub(super) fn member_from_document(document: &Document) -> Result<Member, StoreError> {
    let required = |f: &str| malformed(WHAT, f, "missing");
    let process =
        opt_string(WHAT, document, field::PROCESS)?.ok_or_else(|| required(field::PROCESS))?;
    let pid = match document.get(field::PID) {
        Some(value) => u32::try_from(integer(WHAT, value, field::PID)?)
            .map_err(|_| malformed(WHAT, field::PID, "out of range"))?,
        None => 0,
    };
    let listeners = match document.get(field::LISTENERS) {
        None | Some(Bson::Null) => Vec::new(),
        Some(Bson::Array(items)) => {
            let mut listeners = Vec::with_capacity(items.len());
            for item in items {
                let Bson::Document(entry) = item else {
                    return Err(malformed(
                        WHAT,
                        field::LISTENERS,
                        "an entry is not a document",
                    ));
                };
                let text = |f: &str| {
                    opt_string(WHAT, entry, f)
                        .map_err(|_| {
                            malformed(WHAT, field::LISTENERS, format!("{f} is not a string"))
                        })?
                        .ok_or_else(|| {
                            malformed(WHAT, field::LISTENERS, format!("an entry has no {f}"))
                        })
                };
                listeners.push(MemberListener {
                    resource: text(field::RESOURCE)?,
                    listener: text(field::LISTENER_ID)?,
                });
            }
            listeners.sort();
            listeners
        }
        Some(other) => {
            return Err(malformed(
                WHAT,
                field::LISTENERS,
                format!("expected an array, found {:?}", other.element_type()),
            ))
        }
    };
    Ok(Member {
        process,
        host: opt_string(WHAT, document, field::HOST)?.unwrap_or_default(),
        pid,
        started_at: required_date(WHAT, document, field::STARTED_AT)?,
        renewed_at: required_date(WHAT, document, field::RENEWED_AT)?,
        expires_at: required_date(WHAT, document, field::EXPIRES_AT)?,
        listeners,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mongo::codec::date;
    use chrono::{TimeZone, Utc};

    #[test]
    fn the_announce_filters_on_the_id_alone_and_sets_times_by_the_server_clock() {
        let announcement = Announcement {
            process: "web-1:42".into(),
            host: "web-1".into(),
            pid: 42,
            listeners: vec![MemberListener {
                resource: "$orders".into(),
                listener: "web-1:42/orders".into(),
            }],
        };
        let (filter, pipeline) = announce_command(&announcement, Duration::from_secs(10));
        assert_eq!(filter, doc! { "_id": "web-1:42" });
        assert_eq!(
            pipeline,
            vec![doc! { "$set": {
                "host": { "$literal": "web-1" },
                "pid": 42_i64,
                "startedAt": { "$cond": [
                    { "$gt": ["$expiresAt", "$$NOW"] },
                    { "$ifNull": ["$startedAt", "$$NOW"] },
                    "$$NOW",
                ] },
                "renewedAt": "$$NOW",
                "expiresAt": { "$add": ["$$NOW", 10_000_i64] },
                "listeners": { "$literal": [{ "resource": "$orders", "listenerId": "web-1:42/orders" }] },
            } }]
        );
    }

    #[test]
    fn a_member_reads_back_and_a_malformed_one_names_its_field() {
        let at = Utc.with_ymd_and_hms(2026, 11, 24, 3, 0, 0).unwrap();
        let document = doc! {
            "_id": "p", "host": "h", "pid": 7_i32, "startedAt": date(at), "renewedAt": date(at),
            "expiresAt": date(at), "listeners": [
                { "resource": "b", "listenerId": "p/b" }, { "resource": "a", "listenerId": "p/a" },
            ],
        };
        let member = member_from_document(&document).unwrap();
        assert_eq!(member.pid, 7);
        assert_eq!(member.listeners[0].resource, "a", "sorted by resource");
        for (f, bad) in [
            ("expiresAt", Bson::String("soon".into())),
            ("listeners", Bson::Int32(3)),
            ("pid", Bson::Int64(-1)),
        ] {
            let mut wrong = document.clone();
            wrong.insert(f, bad);
            let error = member_from_document(&wrong).unwrap_err().to_string();
            assert!(error.contains(f), "{f}: {error}");
        }
        let mut entry = document.clone();
        entry.insert("listeners", vec![Bson::Document(doc! { "resource": "a" })]);
        let error = member_from_document(&entry).unwrap_err().to_string();
        assert!(error.contains("listenerId"), "{error}");
    }
}
