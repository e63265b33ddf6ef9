use super::*;
use crate::model::{ClusterTime, OplogWindow};
use chrono::TimeZone;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap()
}

fn context() -> HealthContext {
    HealthContext {
        windows: SourceWindows {
            oplog: Some(OplogWindow::new(
                ClusterTime::new(1_795_000_000, 1),
                ClusterTime::new(1_795_000_600, 1),
            )),
            capped: HashMap::new(),
        },
        now: now(),
        thresholds: HealthThresholds::default(),
    }
}

fn lease(resource: &str, holder: Option<&str>, version: i64) -> Lease {
    let mut lease = Lease::vacant(resource);
    lease.holder = holder.map(str::to_string);
    lease.version = version;
    lease.expires_at = Some(now() + chrono::Duration::seconds(10));
    lease.resume_at = Some(ClusterTime::new(1_795_000_590, 1));
    lease
}

fn shown(table: &LeaseTable) -> Vec<String> {
    table
        .rows(0, usize::MAX)
        .map(|e| e.lease.resource.clone())
        .collect()
}

fn table_of(names: &[&str]) -> LeaseTable {
    let mut table = LeaseTable::new(context());
    table.sort_by(Column::Resource, false);
    table.replace_all(
        names.iter().map(|n| lease(n, Some("h"), 1)).collect(),
        now(),
    );
    table
}

#[test]
fn upserts_keep_the_order_sorted_and_the_selection_on_its_resource() {
    let mut table = table_of(&["b", "d", "f"]);
    table.move_selection(1, 10);
    assert_eq!(table.selected().unwrap().lease.resource, "d");
    table.upsert(lease("a", None, 0), now());
    table.upsert(lease("e", None, 0), now());
    assert_eq!(shown(&table), ["a", "b", "d", "e", "f"]);
    assert_eq!(table.selected().unwrap().lease.resource, "d");
}

#[test]
fn a_resources_partitions_are_shown_together_where_its_first_one_sorts() {
    let mut table = table_of(&["b", "r#1/2", "a", "r#0/2", "r"]);
    table.sort_by(Column::Version, true);
    // Equal versions: by name, reversed; r's group sits where r#1/2 sorts.
    assert_eq!(shown(&table), ["r", "r#0/2", "r#1/2", "b", "a"]);
    // One partition moves up: the whole group moves with it, in partition order.
    table.upsert(lease("r#1/2", Some("h"), 9), now());
    table.upsert(lease("b", Some("h"), 5), now());
    assert_eq!(shown(&table), ["r", "r#0/2", "r#1/2", "b", "a"]);
    table.upsert(lease("r#1/2", Some("h"), 1), now());
    table.upsert(lease("b", Some("h"), 10), now());
    assert_eq!(shown(&table), ["b", "r", "r#0/2", "r#1/2", "a"]);
    // A new split of the same resource joins the group, after the old one.
    table.upsert(lease("r#0/3", None, 0), now());
    assert_eq!(shown(&table), ["b", "r", "r#0/2", "r#1/2", "r#0/3", "a"]);
    // The selection follows its lease into the group.
    table.move_selection(3, 10);
    assert_eq!(table.selected().unwrap().lease.resource, "r#1/2");
    table.upsert(lease("a", Some("h"), 20), now());
    assert_eq!(table.selected().unwrap().lease.resource, "r#1/2");
    assert_eq!(shown(&table)[0], "a");
    // The filter applies to each lease; what is left stays grouped.
    table.set_filter(Filter::new("#"));
    assert_eq!(shown(&table), ["r#0/2", "r#1/2", "r#0/3"]);
}

#[test]
fn a_partition_under_its_resource_is_labelled_by_its_partition() {
    assert_eq!(resource_label("r#1/4", Some("r#0/4")), "  #1/4");
    assert_eq!(resource_label("r#0/4", Some("r")), "  #0/4");
    assert_eq!(resource_label("r#0/4", Some("q#0/4")), "r#0/4");
    assert_eq!(resource_label("r#0/4", None), "r#0/4");
    assert_eq!(resource_label("r", Some("r#0/4")), "r");
    assert_eq!(lease_group("a#b#2/3"), "a#b");
    assert_eq!(lease_group("shop.orders"), "shop.orders");
}

#[test]
fn a_changed_sort_key_moves_the_row() {
    let mut table = table_of(&["a", "b", "c"]);
    table.sort_by(Column::Version, true);
    table.upsert(lease("a", Some("h2"), 9), now());
    assert_eq!(shown(&table), ["a", "c", "b"]);
    assert_eq!(table.get("a").unwrap().changes.len(), 1);
}

#[test]
fn the_filter_matches_substrings_and_inverts_with_a_bang() {
    let mut table = table_of(&["shop.orders", "pet-aggregates", "shop.users"]);
    table.set_filter(Filter::new("SHOP"));
    assert_eq!(shown(&table), ["shop.orders", "shop.users"]);
    table.set_filter(Filter::new("!shop"));
    assert_eq!(shown(&table), ["pet-aggregates"]);
    table.upsert(lease("shop.carts", None, 0), now());
    assert_eq!(shown(&table), ["pet-aggregates"]);
    table.set_filter(Filter::new("expired"));
    assert_eq!(shown(&table), ["shop.carts"]);
}

#[test]
fn status_counts_follow_every_change() {
    let mut table = table_of(&["a", "b"]);
    assert_eq!(table.count(LeaseStatus::Ok), 2);
    let mut lost = lease("a", Some("h"), 2);
    lost.resume_at = Some(ClusterTime::new(1_794_999_000, 1));
    table.upsert(lost, now());
    assert_eq!(
        (table.count(LeaseStatus::Ok), table.count(LeaseStatus::Lost)),
        (1, 1)
    );
    table.upsert(lease("c", None, 0), now());
    assert_eq!(table.count(LeaseStatus::Expired), 1);
    let mut later = context();
    later.now = now() + chrono::Duration::seconds(20);
    table.set_context(later.clone());
    assert_eq!(
        table.count(LeaseStatus::Expired),
        2,
        "b's holder expired too"
    );
    // Nobody took b or c within the threshold (30 s) of their expiry.
    later.now = now() + chrono::Duration::seconds(40);
    table.set_context(later);
    assert_eq!(
        (
            table.count(LeaseStatus::Expired),
            table.count(LeaseStatus::Unclaimed)
        ),
        (0, 2)
    );
    assert_eq!(table.count(LeaseStatus::Lost), 1);
}

#[test]
fn status_sort_puts_trouble_first() {
    let mut table = LeaseTable::new(context());
    let mut lost = lease("z-lost", Some("h"), 1);
    lost.resume_at = Some(ClusterTime::new(1_794_999_000, 1));
    table.replace_all(vec![lease("a-ok", Some("h"), 1), lost], now());
    assert_eq!(shown(&table), ["z-lost", "a-ok"]);
    assert_eq!(table.selected().unwrap().health.status, LeaseStatus::Lost);
}

#[test]
fn the_selection_starts_on_the_first_row_as_displayed_until_the_operator_moves_it() {
    // Before the window is known everything looks alike and sorts by name; once it
    // is, the lease at risk goes on top and the selection goes with the top row.
    let mut table = LeaseTable::new(HealthContext {
        windows: SourceWindows::default(),
        ..context()
    });
    let mut at_risk = lease("z-at-risk", Some("h"), 1);
    at_risk.resume_at = Some(ClusterTime::new(1_795_000_050, 1));
    table.replace_all(vec![lease("a-ok", Some("h"), 1), at_risk], now());
    assert_eq!(table.selected().unwrap().lease.resource, "a-ok");
    table.set_context(context());
    assert_eq!(shown(&table), ["z-at-risk", "a-ok"]);
    assert_eq!(
        table.selected().unwrap().lease.resource,
        "z-at-risk",
        "the first row as displayed"
    );
    table.upsert(lease("b-new", Some("h"), 1), now());
    assert_eq!(table.selected_index(), Some(0));

    // Once the operator picks a row it stays on its lease.
    table.move_selection(1, 10);
    assert_eq!(table.selected().unwrap().lease.resource, "a-ok");
    let mut worse = lease("a-ok", Some("h"), 2);
    worse.resume_at = Some(ClusterTime::new(1_794_999_000, 1));
    table.upsert(worse, now());
    assert_eq!(shown(&table)[0], "a-ok");
    assert_eq!(table.selected().unwrap().lease.resource, "a-ok");
    table.upsert(lease("0-first", None, 1), now());
    assert_eq!(table.selected().unwrap().lease.resource, "a-ok");
}

#[test]
fn selection_and_scrolling_stay_inside_the_rows() {
    let names: Vec<String> = (0..50).map(|i| format!("r{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut table = table_of(&refs);
    table.move_selection(30, 10);
    assert_eq!(table.selected_index(), Some(30));
    assert_eq!(table.offset(), 21);
    table.move_selection(100, 10);
    assert_eq!(table.selected_index(), Some(49));
    table.scroll(-100, 10);
    assert_eq!(table.offset(), 0);
    assert_eq!(table.selected_index(), Some(9));
    assert!(table.select_visible_row(3, 10));
    assert_eq!(table.selected_index(), Some(3));
    assert!(!table.select_visible_row(12, 10));
    let mut empty = LeaseTable::new(context());
    empty.move_selection(5, 0);
    empty.scroll(3, 0);
    assert_eq!(empty.selected_index(), None);
}

#[test]
fn visible_start_moves_as_little_as_possible() {
    assert_eq!(visible_start(0, 0, 10, 100), 0);
    assert_eq!(visible_start(15, 0, 10, 100), 6);
    assert_eq!(visible_start(7, 6, 10, 100), 6);
    assert_eq!(visible_start(3, 6, 10, 100), 3);
    assert_eq!(visible_start(99, 95, 10, 100), 90);
    assert_eq!(visible_start(0, 5, 0, 100), 0);
}
