//! Just enough of MongoDB's query and aggregation-expression semantics to apply the
//! adapter's lease commands to a document held by a scripted server: equality,
//! `$ne`, `$or`, `$expr`, `$lte`, `$eq`, `$and`, `$cond`, `$add`, `$ifNull`,
//! `$literal`, field paths, `$$NOW`, and `$set`/`$unset` stages. Anything else panics, so a test never passes by
//! silently ignoring an operator it does not understand.
// Shared by several test crates, each of which uses only part of it.
#![allow(dead_code)]

use bson::{Bson, DateTime, Document};

/// Whether `doc` (or a missing document, `None`) matches a query filter.
pub fn matches(filter: &Document, doc: Option<&Document>, now: DateTime) -> bool {
    let Some(doc) = doc else { return false };
    filter.iter().all(|(key, condition)| match key.as_str() {
        "$or" => condition
            .as_array()
            .expect("$or takes an array")
            .iter()
            .any(|branch| matches(branch.as_document().expect("$or branch"), Some(doc), now)),
        "$expr" => truthy(&eval(condition, doc, now)),
        field => field_matches(doc.get(field), condition),
    })
}

fn field_matches(value: Option<&Bson>, condition: &Bson) -> bool {
    match condition {
        Bson::Document(ops) if ops.keys().all(|k| k.starts_with('$')) => {
            ops.iter().all(|(op, arg)| match op.as_str() {
                "$ne" => !equal(value.unwrap_or(&Bson::Null), arg),
                "$exists" => value.is_some() == arg.as_bool().expect("$exists takes a bool"),
                other => panic!("mini_mongo: query operator {other} is not supported"),
            })
        }
        // `{field: null}` matches a missing field too.
        Bson::Null => matches!(value, None | Some(Bson::Null)),
        expected => value.is_some_and(|v| equal(v, expected)),
    }
}

/// Applies a pipeline of `$set` stages to `doc`.
pub fn apply_pipeline(pipeline: &[Bson], doc: &Document, now: DateTime) -> Document {
    let mut out = doc.clone();
    for stage in pipeline {
        let stage = stage.as_document().expect("pipeline stage");
        if let Ok(field) = stage.get_str("$unset") {
            out.remove(field);
            continue;
        }
        let set = stage
            .get_document("$set")
            .unwrap_or_else(|_| panic!("mini_mongo: only $set stages are supported, got {stage}"));
        let before = out.clone();
        for (field, expression) in set {
            out.insert(field, eval(expression, &before, now));
        }
    }
    out
}

/// Evaluates an aggregation expression against `doc`.
pub fn eval(expression: &Bson, doc: &Document, now: DateTime) -> Bson {
    match expression {
        Bson::String(s) if s == "$$NOW" => Bson::DateTime(now),
        Bson::String(s) if s.starts_with('$') => doc.get(&s[1..]).cloned().unwrap_or(Bson::Null),
        Bson::Document(d) if d.len() == 1 && d.keys().all(|k| k.starts_with('$')) => {
            let (op, arg) = d.iter().next().expect("one operator");
            let args = || -> Vec<Bson> {
                arg.as_array()
                    .expect("operator arguments")
                    .iter()
                    .map(|a| eval(a, doc, now))
                    .collect()
            };
            match op.as_str() {
                "$literal" => arg.clone(),
                "$eq" => {
                    let a = args();
                    Bson::Boolean(equal(&a[0], &a[1]))
                }
                "$ne" => {
                    let a = args();
                    Bson::Boolean(!equal(&a[0], &a[1]))
                }
                "$and" => Bson::Boolean(args().iter().all(truthy)),
                "$or" => Bson::Boolean(args().iter().any(truthy)),
                "$lte" => {
                    let a = args();
                    Bson::Boolean(compare(&a[0], &a[1]).is_some_and(|o| o.is_le()))
                }
                "$cond" => {
                    let parts = arg.as_array().expect("$cond array");
                    if truthy(&eval(&parts[0], doc, now)) {
                        eval(&parts[1], doc, now)
                    } else {
                        eval(&parts[2], doc, now)
                    }
                }
                "$ifNull" => {
                    let a = args();
                    if matches!(a[0], Bson::Null) {
                        a[1].clone()
                    } else {
                        a[0].clone()
                    }
                }
                "$add" => args().into_iter().fold(Bson::Int64(0), add),
                other => panic!("mini_mongo: expression operator {other} is not supported"),
            }
        }
        Bson::Document(d) => Bson::Document(
            d.iter()
                .map(|(k, v)| (k.clone(), eval(v, doc, now)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn add(acc: Bson, value: Bson) -> Bson {
    match (acc, value) {
        (Bson::DateTime(d), n) | (n, Bson::DateTime(d)) => {
            Bson::DateTime(DateTime::from_millis(d.timestamp_millis() + number(&n)))
        }
        (a, b) => Bson::Int64(number(&a) + number(&b)),
    }
}

fn number(value: &Bson) -> i64 {
    match value {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        Bson::Double(n) => *n as i64,
        other => panic!("mini_mongo: {other} is not a number"),
    }
}

fn equal(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Int32(_) | Bson::Int64(_), Bson::Int32(_) | Bson::Int64(_)) => {
            number(a) == number(b)
        }
        _ => a == b,
    }
}

fn compare(a: &Bson, b: &Bson) -> Option<std::cmp::Ordering> {
    match (a, b) {
        // A missing field reads as null, which sorts below every other value.
        (Bson::Null, Bson::Null) => Some(std::cmp::Ordering::Equal),
        (Bson::Null, _) => Some(std::cmp::Ordering::Less),
        (_, Bson::Null) => Some(std::cmp::Ordering::Greater),
        (Bson::DateTime(x), Bson::DateTime(y)) => Some(x.cmp(y)),
        (Bson::Int32(_) | Bson::Int64(_), Bson::Int32(_) | Bson::Int64(_)) => {
            Some(number(a).cmp(&number(b)))
        }
        _ => None,
    }
}

fn truthy(value: &Bson) -> bool {
    !matches!(value, Bson::Null | Bson::Boolean(false))
}
