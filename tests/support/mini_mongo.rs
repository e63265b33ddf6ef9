//! Just enough of MongoDB's query and aggregation-expression semantics to apply the
//! adapter's lease and audit commands to documents held by a scripted server:
//! equality, `$ne`, `$or`, `$expr`, `$lte`, `$eq`, `$and`, `$cond`, `$add`, `$ifNull`,
//! `$literal`, field paths (a dotted query path reaches into arrays of documents) and
//! `$$NOW`; `$set` and `$unset` stages; `$set` and `$push` update operators. Anything else
//! panics, so a test never passes by silently ignoring an operator it does not
//! understand. Where it answers, it answers as a real 6.0 server did: an upsert whose
//! query holds `$expr` is refused with code 224 ([`upsert_query_error`]), and a field
//! path to a missing field stays missing when `$set` (it is not stored as null).
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
        path if path.contains('.') => path_matches(doc, path, condition),
        field => field_matches(doc.get(field), condition),
    })
}

/// A dotted path: every value it reaches (through arrays of documents, as a real
/// server does) is a candidate; `$ne` holds when none is equal, equality when one is.
fn path_matches(doc: &Document, path: &str, condition: &Bson) -> bool {
    fn reach<'a>(value: &'a Bson, rest: &str, out: &mut Vec<&'a Bson>) {
        match value {
            Bson::Array(items) => items.iter().for_each(|item| reach(item, rest, out)),
            Bson::Document(d) => {
                let (head, tail) = rest.split_once('.').unwrap_or((rest, ""));
                if let Some(next) = d.get(head) {
                    if tail.is_empty() {
                        out.push(next);
                    } else {
                        reach(next, tail, out);
                    }
                }
            }
            _ => {}
        }
    }
    let whole = Bson::Document(doc.clone());
    let mut reached = Vec::new();
    reach(&whole, path, &mut reached);
    match condition {
        Bson::Document(ops) if ops.keys().all(|k| k.starts_with('$')) => {
            ops.iter().all(|(op, arg)| match op.as_str() {
                "$ne" => !reached.iter().any(|v| equal(v, arg)),
                other => {
                    panic!("mini_mongo: query operator {other} on a dotted path is not supported")
                }
            })
        }
        expected => reached.iter().any(|v| equal(v, expected)),
    }
}

/// Applies an update document of `$set` and `$push` operators (plain values) to `doc`.
pub fn apply_update(update: &Document, doc: &Document) -> Document {
    let mut out = doc.clone();
    for (op, fields) in update {
        let fields = fields
            .as_document()
            .expect("an update operator takes a document");
        for (field, value) in fields {
            assert!(
                !field.contains('.'),
                "mini_mongo: dotted update paths are not supported"
            );
            match op.as_str() {
                "$set" => {
                    out.insert(field, value.clone());
                }
                // The server's clock (Azure Cosmos DB documents `$currentDate`).
                "$currentDate" => {
                    out.insert(field, bson::DateTime::now());
                }
                "$push" => {
                    let mut items = match out.get(field) {
                        None => Vec::new(),
                        Some(Bson::Array(items)) => items.clone(),
                        Some(other) => panic!("mini_mongo: $push onto a non-array {other}"),
                    };
                    items.push(value.clone());
                    out.insert(field, items);
                }
                other => panic!("mini_mongo: update operator {other} is not supported"),
            }
        }
    }
    out
}

fn field_matches(value: Option<&Bson>, condition: &Bson) -> bool {
    match condition {
        Bson::Document(ops) if ops.keys().all(|k| k.starts_with('$')) => {
            ops.iter().all(|(op, arg)| match op.as_str() {
                "$ne" => !equal(value.unwrap_or(&Bson::Null), arg),
                "$eq" => value.is_some_and(|v| equal(v, arg)),
                // A missing field is no number: it is below nothing (the server's rule
                // for comparison operators is type-bracketed; here only numbers and dates).
                "$lt" => value
                    .and_then(|v| compare(v, arg))
                    .is_some_and(|o| o.is_lt()),
                "$exists" => value.is_some() == arg.as_bool().expect("$exists takes a bool"),
                other => panic!("mini_mongo: query operator {other} is not supported"),
            })
        }
        // `{field: null}` matches a missing field too.
        Bson::Null => matches!(value, None | Some(Bson::Null)),
        expected => value.is_some_and(|v| equal(v, expected)),
    }
}

/// The error a real server gives an upsert whose query it refuses: `$expr` anywhere in
/// the predicate, code 224 (seen on 6.0.5: "$expr is not allowed in the query
/// predicate for an upsert").
pub fn upsert_query_error(filter: &Document) -> Option<(i32, &'static str)> {
    fn has_expr(filter: &Document) -> bool {
        filter.iter().any(|(key, value)| {
            key == "$expr"
                || (key == "$or" || key == "$and")
                    && value.as_array().is_some_and(|branches| {
                        branches
                            .iter()
                            .any(|b| b.as_document().is_some_and(has_expr))
                    })
        })
    }
    has_expr(filter).then_some((
        224,
        "$expr is not allowed in the query predicate for an upsert",
    ))
}

/// Applies a pipeline of `$set` and `$unset` stages to `doc`.
pub fn apply_pipeline(pipeline: &[Bson], doc: &Document, now: DateTime) -> Document {
    let mut out = doc.clone();
    for stage in pipeline {
        let stage = stage.as_document().expect("pipeline stage");
        if let Ok(field) = stage.get_str("$unset") {
            out.remove(field);
            continue;
        }
        let set = stage.get_document("$set").unwrap_or_else(|_| {
            panic!("mini_mongo: only $set and $unset stages are supported, got {stage}")
        });
        let before = out.clone();
        for (field, expression) in set {
            match eval_field(expression, &before, now) {
                Some(value) => out.insert(field, value),
                None => out.remove(field),
            };
        }
    }
    out
}

/// Evaluates an expression whose result may be "missing" (a field path to a field
/// the document lacks, directly or through `$cond`), which `$set` leaves unset.
fn eval_field(expression: &Bson, doc: &Document, now: DateTime) -> Option<Bson> {
    match expression {
        Bson::String(s) if s.starts_with('$') && !s.starts_with("$$") => doc.get(&s[1..]).cloned(),
        // `$$REMOVE` in `$set` removes the field (it is not stored as null).
        Bson::String(s) if s == "$$REMOVE" => None,
        Bson::Document(d) if d.len() == 1 && d.contains_key("$cond") => {
            let parts = d.get_array("$cond").expect("$cond array");
            let branch = if truthy(&eval(&parts[0], doc, now)) {
                &parts[1]
            } else {
                &parts[2]
            };
            eval_field(branch, doc, now)
        }
        Bson::Document(d) if d.len() == 1 && d.contains_key("$switch") => {
            eval_field(switch_branch(d, doc, now), doc, now)
        }
        other => Some(eval(other, doc, now)),
    }
}

/// The expression `$switch` picks: the `then` of the first `case` that is true, else
/// `default` (MongoDB fails the command when there is none; so does this).
fn switch_branch<'a>(d: &'a Document, doc: &Document, now: DateTime) -> &'a Bson {
    let spec = d.get_document("$switch").expect("$switch document");
    let branches = spec.get_array("branches").expect("$switch branches");
    branches
        .iter()
        .map(|b| b.as_document().expect("$switch branch document"))
        .find(|b| truthy(&eval(b.get("case").expect("case"), doc, now)))
        .map(|b| b.get("then").expect("then"))
        .or_else(|| spec.get("default"))
        .expect("mini_mongo: $switch matched no branch and has no default")
}

/// Evaluates an aggregation expression against `doc`.
pub fn eval(expression: &Bson, doc: &Document, now: DateTime) -> Bson {
    match expression {
        Bson::String(s) if s == "$$NOW" => Bson::DateTime(now),
        Bson::String(s) if s.starts_with("$$") => {
            panic!("mini_mongo: system variable {s} is not supported here")
        }
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
                "$lt" => {
                    let a = args();
                    Bson::Boolean(compare(&a[0], &a[1]).is_some_and(|o| o.is_lt()))
                }
                "$switch" => eval(switch_branch(d, doc, now), doc, now),
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
        // Missing and null sort below every other value.
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
