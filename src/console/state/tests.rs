use chrono::TimeZone;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind};

use super::*;
use crate::model::{ClusterTime, LeaseStatus};
use crate::store::Listing;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap()
}

fn state() -> ConsoleState {
    let mut state = ConsoleState::new(ConsoleSetup::new(Mode::Demo, "sandbox", now()));
    state.on_resize(120, 40);
    state
}

fn lease(resource: &str, version: i64) -> Lease {
    let mut lease = Lease::vacant(resource);
    lease.holder = Some(format!("{resource}-holder"));
    lease.version = version;
    lease.expires_at = Some(now() + chrono::Duration::seconds(10));
    lease.resume_at = Some(ClusterTime::new(now().timestamp() as u32 - 5, 1));
    lease
}

fn window() -> DataEvent {
    let t = now().timestamp() as u32;
    DataEvent::Window {
        window: OplogWindow::new(ClusterTime::new(t - 600, 1), ClusterTime::new(t, 1)),
        server_now: now(),
        ops_per_sec: Some(20.0),
    }
}

fn press(state: &mut ConsoleState, code: KeyCode) -> Vec<Effect> {
    state.on_key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn type_text(state: &mut ConsoleState, text: &str) {
    for c in text.chars() {
        press(state, KeyCode::Char(c));
    }
}

fn shown(state: &ConsoleState) -> Vec<String> {
    state
        .leases
        .rows(0, usize::MAX)
        .map(|e| e.lease.resource.clone())
        .collect()
}

fn loaded() -> ConsoleState {
    let mut state = state();
    state.apply(window(), now());
    state.apply(
        DataEvent::LeaseSnapshot(
            (vec![
                lease("shop.orders", 3),
                lease("pet-aggregates", 7),
                lease("shop.users", 1),
            ])
            .into(),
        ),
        now(),
    );
    state.execute_command_line("sort resource");
    state
}

#[test]
fn slash_filters_as_you_type_and_esc_clears() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('/'));
    type_text(&mut state, "shop");
    assert_eq!(state.input, Input::Filter("shop".into()));
    assert_eq!(shown(&state), ["shop.orders", "shop.users"]);
    press(&mut state, KeyCode::Enter);
    assert_eq!(state.input, Input::Normal);
    assert_eq!(shown(&state).len(), 2, "the filter stays after enter");
    press(&mut state, KeyCode::Esc);
    assert_eq!(shown(&state).len(), 3, "esc on the table clears it");
    assert_eq!(state.view, View::Leases);
}

#[test]
fn keys_typed_into_the_filter_are_not_commands() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('/'));
    let effects = press(&mut state, KeyCode::Char('q'));
    assert!(effects.is_empty(), "q while filtering is text, not quit");
    assert_eq!(state.input, Input::Filter("q".into()));
}

#[test]
fn a_lease_that_turns_malformed_leaves_the_table_and_is_named_until_readable_again() {
    let mut state = loaded();
    let rows = state.leases.len();
    let broken = MalformedDocument {
        id: Some("shop.orders".into()),
        problem: "field version: expected an integer, found String".into(),
    };
    state.apply(DataEvent::LeaseMalformed(broken.clone()), now());
    assert!(
        state.leases.get("shop.orders").is_none(),
        "its old row would mislead"
    );
    assert_eq!(state.leases.len(), rows - 1);
    assert_eq!(state.malformed_leases, vec![broken.clone()]);
    state.apply(DataEvent::LeaseMalformed(broken.clone()), now());
    assert_eq!(
        state.malformed_leases.len(),
        1,
        "named once however often it changes"
    );
    state.apply(
        DataEvent::LeaseChanged(Box::new(lease("shop.orders", 5))),
        now(),
    );
    assert!(state.malformed_leases.is_empty());
    assert_eq!(state.leases.get("shop.orders").unwrap().lease.version, 5);
    state.apply(
        DataEvent::LeaseSnapshot(Listing {
            items: vec![lease("shop.orders", 5)],
            malformed: vec![broken.clone()],
        }),
        now(),
    );
    assert_eq!(state.malformed_leases, vec![broken]);
}

#[test]
fn a_lease_that_turns_malformed_while_frozen_leaves_only_on_unfreeze() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('f'));
    state.apply(
        DataEvent::LeaseMalformed(MalformedDocument {
            id: Some("shop.orders".into()),
            problem: "field version: expected an integer, found String".into(),
        }),
        now(),
    );
    assert!(
        state.leases.get("shop.orders").is_some(),
        "frozen means frozen"
    );
    assert_eq!(state.pending(), 1);
    press(&mut state, KeyCode::Char('f'));
    assert!(state.leases.get("shop.orders").is_none());
}

#[test]
fn freeze_holds_lease_changes_until_unfrozen() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('f'));
    assert!(state.frozen);
    state.apply(
        DataEvent::LeaseChanged(Box::new(lease("shop.orders", 4))),
        now(),
    );
    state.apply(
        DataEvent::LeaseChanged(Box::new(lease("new.one", 0))),
        now(),
    );
    assert_eq!(state.leases.get("shop.orders").unwrap().lease.version, 3);
    assert_eq!(state.pending(), 2);
    press(&mut state, KeyCode::Char('f'));
    assert_eq!(state.leases.get("shop.orders").unwrap().lease.version, 4);
    assert!(state.leases.get("new.one").is_some());
    assert_eq!(state.pending(), 0);
}

#[test]
fn navigation_moves_the_selection_and_enter_opens_the_detail() {
    let mut state = loaded();
    assert_eq!(
        state.leases.selected().unwrap().lease.resource,
        "pet-aggregates"
    );
    press(&mut state, KeyCode::Char('j'));
    assert_eq!(
        state.leases.selected().unwrap().lease.resource,
        "shop.orders"
    );
    press(&mut state, KeyCode::Char('G'));
    assert_eq!(
        state.leases.selected().unwrap().lease.resource,
        "shop.users"
    );
    press(&mut state, KeyCode::Enter);
    assert_eq!(state.view, View::Detail);
    press(&mut state, KeyCode::Char('k'));
    assert_eq!(
        state.leases.selected().unwrap().lease.resource,
        "shop.orders"
    );
    press(&mut state, KeyCode::Esc);
    assert_eq!(state.view, View::Leases);
    assert_eq!(press(&mut state, KeyCode::Char('q')), vec![Effect::Quit]);
}

#[test]
fn help_opens_scrolls_and_swallows_other_keys() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('?'));
    assert_eq!(state.help, Some(0));
    press(&mut state, KeyCode::Char('j'));
    assert_eq!(state.help, Some(1));
    assert!(press(&mut state, KeyCode::Char('q')).is_empty());
    assert_eq!(state.help, None, "q closes help instead of quitting");
}

#[test]
fn views_switch_by_number_tab_and_command_line() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('2'));
    assert_eq!(state.view, View::Oplog);
    press(&mut state, KeyCode::Tab);
    assert_eq!(state.view, View::Listeners);
    press(&mut state, KeyCode::BackTab);
    press(&mut state, KeyCode::BackTab);
    assert_eq!(state.view, View::Leases);
    press(&mut state, KeyCode::Char(':'));
    type_text(&mut state, "audit");
    press(&mut state, KeyCode::Enter);
    assert_eq!(state.view, View::Audit);
    press(&mut state, KeyCode::Char(':'));
    type_text(&mut state, "theme dark");
    assert_eq!(
        press(&mut state, KeyCode::Enter),
        vec![Effect::LoadTheme("dark".into())]
    );
}

#[test]
fn an_unknown_command_says_what_exists() {
    let mut state = loaded();
    state.execute_command_line("bogus");
    let notice = state.notice.clone().unwrap();
    assert_eq!(notice.level, NoticeLevel::Error);
    assert!(notice.text.contains(":leases"), "{}", notice.text);
    state.execute_command_line("sort nonsense");
    assert!(state.notice.unwrap().text.contains("expected a column"));
}

#[test]
fn sort_keys_cycle_and_reverse() {
    let mut state = loaded();
    assert_eq!(state.leases.sort(), (Column::Resource, false));
    press(&mut state, KeyCode::Char('S'));
    assert_eq!(shown(&state)[0], "shop.users");
    press(&mut state, KeyCode::Char('s'));
    assert_eq!(state.leases.sort(), (Column::Kind, false));
    state.execute_command_line("sort ver desc");
    assert_eq!(shown(&state)[0], "pet-aggregates");
}

#[test]
fn a_failing_source_marks_the_data_stale_until_it_recovers() {
    let mut state = loaded();
    let later = now() + chrono::Duration::seconds(3);
    state.apply(
        DataEvent::SourceFailed {
            source: DataSource::Leases,
            error: "connection refused".into(),
        },
        later,
    );
    assert!(state.is_stale());
    assert_eq!(state.failures[&DataSource::Leases].since, later);
    assert_eq!(state.data_as_of, Some(now()));
    state.apply(
        DataEvent::LeaseSnapshot((vec![lease("shop.orders", 3)]).into()),
        later,
    );
    assert!(!state.is_stale());
}

#[test]
fn the_clock_counts_expiry_down_to_expired() {
    let mut state = loaded();
    let entry = state.leases.get("shop.orders").unwrap();
    assert_ne!(entry.health.status, LeaseStatus::Expired);
    state.tick(now() + chrono::Duration::seconds(11));
    let entry = state.leases.get("shop.orders").unwrap();
    assert_eq!(entry.health.status, LeaseStatus::Expired);
}

#[test]
fn notices_expire_after_ten_seconds_or_on_the_next_key() {
    let mut state = loaded();
    state.notify(NoticeLevel::Info, "hello");
    state.tick(now() + chrono::Duration::seconds(9));
    assert!(state.notice.is_some());
    state.tick(now() + chrono::Duration::seconds(10));
    assert!(state.notice.is_none(), "gone after 10 s");

    state.notify(NoticeLevel::Error, "bad");
    press(&mut state, KeyCode::Char('j'));
    assert!(state.notice.is_none(), "the next key clears it");
    state.execute_command_line("nonsense");
    assert!(state.notice.is_some());
    press(&mut state, KeyCode::Char(':'));
    type_text(&mut state, "bogus");
    press(&mut state, KeyCode::Enter);
    assert!(
        state
            .notice
            .as_ref()
            .unwrap()
            .text
            .contains("unknown command :bogus"),
        "a key that says something replaces the old notice"
    );
}

#[test]
fn the_mouse_selects_rows_switches_tabs_and_scrolls() {
    let mut state = state();
    state.apply(window(), now());
    state.apply(
        DataEvent::LeaseSnapshot(
            (0..100)
                .map(|i| lease(&format!("r{i:03}"), 1))
                .collect::<Vec<_>>()
                .into(),
        ),
        now(),
    );
    state.execute_command_line("sort resource");
    let click = |column, row| MouseEvent {
        kind: MouseEventKind::Down(MouseButton::Left),
        column,
        row,
        modifiers: KeyModifiers::NONE,
    };
    let (first_row, _) = crate::console::layout::table_rows(
        crate::console::layout::areas(ratatui::layout::Rect::new(0, 0, 120, 40)).body,
    );
    state.on_mouse(click(10, first_row + 4));
    assert_eq!(state.leases.selected().unwrap().lease.resource, "r004");
    state.on_mouse(MouseEvent {
        kind: MouseEventKind::ScrollDown,
        column: 10,
        row: 10,
        modifiers: KeyModifiers::NONE,
    });
    assert_eq!(state.leases.offset(), 3);
    let (from, _) = crate::console::layout::tab_spans()[1];
    state.on_mouse(click(from, crate::console::layout::HEADER_HEIGHT));
    assert_eq!(state.view, View::Oplog);
    press(&mut state, KeyCode::Char('m'));
    state.on_mouse(click(crate::console::layout::tab_spans()[0].0, 3));
    assert_eq!(state.view, View::Oplog, "mouse off: clicks are ignored");
}

#[test]
fn ctrl_c_quits_from_anywhere() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char(':'));
    let effects = state.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert_eq!(effects, vec![Effect::Quit]);
}

// ---------------------------------------------------------------- guarded actions

fn facts_for(lease: &Lease) -> crate::ops::PlanFacts {
    let t = now().timestamp() as u32;
    crate::ops::PlanFacts {
        lease: Some(lease.clone()),
        window: Some(OplogWindow::new(
            ClusterTime::new(t - 600, 1),
            ClusterTime::new(t, 1),
        )),
        now: now(),
        changes: None,
        read_only: false,
        audit: None,
        rebuild: None,
        operator: "ann@ops".into(),
        handover_lease: Duration::from_secs(10),
        bulk_lease: Duration::from_secs(30),
    }
}

fn planned(state: &mut ConsoleState, request: &crate::ops::ActionRequest, lease: &Lease) {
    let plan = crate::ops::plan(request, &facts_for(lease));
    state.apply(DataEvent::Planned(Ok(Box::new(plan))), now());
}

fn takeover_of(resource: &str) -> crate::ops::ActionRequest {
    crate::ops::ActionRequest::Takeover {
        resource: resource.into(),
        to: None,
        hold: None,
    }
}

#[test]
fn an_action_key_captures_the_lease_and_asks_for_a_plan() {
    let mut state = loaded();
    let effects = press(&mut state, KeyCode::Char('t'));
    assert_eq!(effects, vec![Effect::Plan(takeover_of("pet-aggregates"))]);
    let Some(Dialog::Planning {
        target: Some(target),
        ..
    }) = &state.dialog
    else {
        panic!("planning: {:?}", state.dialog)
    };
    assert_eq!(
        (target.holder.as_deref(), target.version),
        (Some("pet-aggregates-holder"), 7)
    );
    assert!(
        press(&mut state, KeyCode::Char('q')).is_empty(),
        "keys go to the dialog"
    );
    press(&mut state, KeyCode::Esc);
    assert_eq!(state.dialog, None);
}

#[test]
fn cancel_is_focused_and_the_resource_must_be_typed() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('t'));
    planned(
        &mut state,
        &takeover_of("pet-aggregates"),
        &lease("pet-aggregates", 7),
    );
    assert!(matches!(
        state.dialog,
        Some(Dialog::Preview {
            focus: Button::Cancel,
            ..
        })
    ));
    // Enter on the focused Cancel closes it: nothing runs.
    assert!(press(&mut state, KeyCode::Enter).is_empty());
    assert_eq!(state.dialog, None);

    press(&mut state, KeyCode::Char('t'));
    planned(
        &mut state,
        &takeover_of("pet-aggregates"),
        &lease("pet-aggregates", 7),
    );
    press(&mut state, KeyCode::Tab);
    type_text(&mut state, "pet-aggregate");
    assert!(
        press(&mut state, KeyCode::Enter).is_empty(),
        "one letter short"
    );
    assert!(state
        .notice
        .clone()
        .unwrap()
        .text
        .contains("type pet-aggregates"));
    press(&mut state, KeyCode::Char('s'));
    let effects = press(&mut state, KeyCode::Enter);
    let [Effect::Execute(plan)] = effects.as_slice() else {
        panic!("execute: {effects:?}")
    };
    assert_eq!(plan.captured.as_ref().map(|c| c.version), Some(7));
    assert!(matches!(state.dialog, Some(Dialog::Running { .. })));
    state.apply(DataEvent::ActionDone(Ok("applied".into())), now());
    assert_eq!(state.dialog, None);
    assert_eq!(state.notice.clone().unwrap().text, "applied");
}

#[test]
fn a_plan_read_against_another_version_cannot_be_confirmed() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('t'));
    // The holder changed between the key press (version 7) and the read (version 8).
    planned(
        &mut state,
        &takeover_of("pet-aggregates"),
        &lease("pet-aggregates", 8),
    );
    press(&mut state, KeyCode::Tab);
    type_text(&mut state, "pet-aggregates");
    assert!(press(&mut state, KeyCode::Enter).is_empty());
    assert!(state
        .notice
        .clone()
        .unwrap()
        .text
        .contains("changed since this dialog opened"));
}

#[test]
fn read_only_binds_no_action_key() {
    let mut state = loaded();
    state.read_only = true;
    for key in ['t', 'w', 'x', 'b', 'a'] {
        assert!(press(&mut state, KeyCode::Char(key)).is_empty());
        assert_eq!(state.dialog, None, "{key}");
    }
    press(&mut state, KeyCode::Char('4'));
    assert!(press(&mut state, KeyCode::Char('u')).is_empty());
    assert_eq!(state.dialog, None);
}

#[test]
fn rewind_asks_how_far_then_plans() {
    let mut state = loaded();
    assert!(press(&mut state, KeyCode::Char('w')).is_empty());
    type_text(&mut state, "ten");
    assert!(press(&mut state, KeyCode::Enter).is_empty());
    assert!(state.notice.clone().unwrap().text.contains("10m"));
    for _ in 0..3 {
        press(&mut state, KeyCode::Backspace);
    }
    type_text(&mut state, "10m");
    let effects = press(&mut state, KeyCode::Enter);
    assert_eq!(
        effects,
        vec![Effect::Plan(crate::ops::ActionRequest::Rewind {
            resource: "pet-aggregates".into(),
            to: crate::ops::RewindTarget::By(Duration::from_secs(600)),
        })]
    );
}

#[test]
fn a_rebuild_needs_a_definition_and_can_be_cancelled() {
    let mut state = loaded();
    assert!(press(&mut state, KeyCode::Char('b')).is_empty());
    assert!(state
        .notice
        .clone()
        .unwrap()
        .text
        .contains("no rebuild is defined"));
    state.rebuilds = vec![("pet-aggregates".into(), "pets".into())];
    let effects = press(&mut state, KeyCode::Char('b'));
    assert_eq!(
        effects,
        vec![Effect::Plan(crate::ops::ActionRequest::Rebuild {
            name: "pets".into()
        })]
    );
    state.dialog = Some(running_rebuild());
    assert!(press(&mut state, KeyCode::Esc).is_empty(), "esc asks first");
    assert!(
        press(&mut state, KeyCode::Char('n')).is_empty(),
        "n keeps it"
    );
    assert!(press(&mut state, KeyCode::Esc).is_empty());
    assert_eq!(
        press(&mut state, KeyCode::Char('y')),
        vec![Effect::CancelRebuild]
    );
    assert!(press(&mut state, KeyCode::Esc).is_empty(), "cancelled once");
    assert!(
        press(&mut state, KeyCode::Char('y')).is_empty(),
        "cancelled once"
    );
}

fn running_rebuild() -> Dialog {
    Dialog::Running {
        action: crate::ops::ActionKind::Rebuild,
        resource: "pet-aggregates".into(),
        progress: None,
        stage: RunningStage::Working,
    }
}

#[test]
fn quitting_while_a_rebuild_runs_asks_first() {
    let mut state = loaded();
    state.dialog = Some(running_rebuild());
    assert!(press(&mut state, KeyCode::Char('q')).is_empty(), "q asks");
    assert!(
        press(&mut state, KeyCode::Char('n')).is_empty(),
        "n keeps running"
    );
    assert!(matches!(
        state.dialog,
        Some(Dialog::Running {
            stage: RunningStage::Working,
            ..
        })
    ));
    assert!(press(&mut state, KeyCode::Char('q')).is_empty());
    assert_eq!(press(&mut state, KeyCode::Char('y')), vec![Effect::Quit]);

    state.dialog = Some(running_rebuild());
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert!(state.on_key(ctrl_c).is_empty(), "Ctrl-C asks too");
    assert_eq!(
        state.on_key(ctrl_c),
        vec![Effect::Quit],
        "a second Ctrl-C quits"
    );

    state.dialog = Some(Dialog::Running {
        action: crate::ops::ActionKind::Takeover,
        resource: "shop.orders".into(),
        progress: None,
        stage: RunningStage::Working,
    });
    assert_eq!(
        state.on_key(ctrl_c),
        vec![Effect::Quit],
        "a one-write action does not ask"
    );
}

#[test]
fn help_scrolls_no_further_than_its_last_line() {
    let mut state = loaded();
    state.on_resize(80, 24);
    press(&mut state, KeyCode::Char('?'));
    for _ in 0..500 {
        press(&mut state, KeyCode::Char('j'));
    }
    let bottom = state.help.unwrap();
    assert!(bottom > 0 && bottom < 100, "{bottom}");
    press(&mut state, KeyCode::Char('k'));
    assert_eq!(
        state.help,
        Some(bottom - 1),
        "one key press scrolls back up"
    );
}

#[test]
fn the_selection_starts_on_the_worst_lease_once_the_window_arrives() {
    // The leases arrive before the first oplog read: all look alike then.
    let mut state = state();
    let mut at_risk = lease("shop.mailer", 2);
    at_risk.resume_at = Some(ClusterTime::new(now().timestamp() as u32 - 550, 1));
    state.apply(
        DataEvent::LeaseSnapshot((vec![lease("pet-aggregates", 7), at_risk]).into()),
        now(),
    );
    state.apply(window(), now());
    assert_eq!(shown(&state)[0], "shop.mailer");
    assert_eq!(
        state.leases.selected().unwrap().health.status,
        LeaseStatus::AtRisk,
        "the selection is on the top row"
    );
    press(&mut state, KeyCode::Enter);
    assert_eq!(state.view, View::Detail);
    // Opened: the detail stays on its lease whatever comes on top.
    let mut lost = lease("a.lost", 1);
    lost.resume_at = Some(ClusterTime::new(now().timestamp() as u32 - 900, 1));
    state.apply(DataEvent::LeaseChanged(Box::new(lost)), now());
    assert_eq!(shown(&state)[0], "a.lost");
    assert_eq!(
        state.leases.selected().unwrap().lease.resource,
        "shop.mailer"
    );
}
