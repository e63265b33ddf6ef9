// Long: unit tests of the console's state, one per key and event, sharing fixtures.
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

fn ctrl(state: &mut ConsoleState, c: char) -> Vec<Effect> {
    state.on_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL))
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
        window_unknown: None,
        capped: None,
        now: now(),
        changes: None,
        read_only: false,
        audit: None,
        rebuild: None,
        checkpoints: Vec::new(),
        operator: "ann@ops".into(),
        handover_lease: Duration::from_secs(10),
        bulk_lease: Duration::from_secs(30),
        thresholds: crate::model::HealthThresholds::default(),
        profile: Default::default(),
        skipped_entry: None,
        token_for_time: None,
        restart_hold: None,
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
fn the_answer_to_a_closed_dialog_does_not_touch_the_one_open_now() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('t'));
    press(&mut state, KeyCode::Esc);
    press(&mut state, KeyCode::Char('x'));
    let open = state.dialog.clone();
    assert!(matches!(open, Some(Dialog::Planning { .. })), "{open:?}");
    // The takeover's planning failed after its dialog was closed.
    state.apply(
        DataEvent::Planned(Err(PlanFailure {
            request: takeover_of("pet-aggregates"),
            message: "cannot plan takeover: no reply".into(),
        })),
        now(),
    );
    assert_eq!(state.dialog, open, "the reset dialog stays");
    assert_eq!(state.notice, None);
    // And its plan, had it come, would not replace the reset's either.
    planned(
        &mut state,
        &takeover_of("pet-aggregates"),
        &lease("pet-aggregates", 7),
    );
    assert_eq!(state.dialog, open);
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
            focus: Focus::Cancel,
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
    let [Effect::Execute { plan, reason: None }] = effects.as_slice() else {
        panic!("execute: {effects:?}")
    };
    assert_eq!(plan.captured.as_ref().map(|c| c.version), Some(7));
    assert!(matches!(state.dialog, Some(Dialog::Running { .. })));
    state.apply(
        DataEvent::ActionDone {
            action: crate::ops::ActionKind::Takeover,
            result: Ok("applied".into()),
        },
        now(),
    );
    assert_eq!(state.dialog, None);
    assert_eq!(state.notice.clone().unwrap().text, "applied");
}

/// A takeover of `name` opened from the console: Apply stays disabled, naming
/// `shown`, until all of `shown` is typed, and then executes a plan for `name`.
fn confirmed_by_its_escape(name: &str, shown: &str) {
    assert_eq!(crate::model::text::escape_control(name), shown);
    let mut state = state();
    state.apply(window(), now());
    state.apply(
        DataEvent::LeaseSnapshot((vec![lease(name, 7)]).into()),
        now(),
    );
    press(&mut state, KeyCode::Char('t'));
    planned(&mut state, &takeover_of(name), &lease(name, 7));
    press(&mut state, KeyCode::Tab);
    type_text(&mut state, "shop");
    let disabled = state.dialog.as_ref().and_then(Dialog::apply_disabled);
    assert!(
        disabled.as_deref().is_some_and(|d| d.contains(shown)),
        "the dialog names the escaped form: {disabled:?}"
    );
    type_text(&mut state, &shown["shop".len()..]);
    assert_eq!(state.dialog.as_ref().and_then(Dialog::apply_disabled), None);
    let effects = press(&mut state, KeyCode::Enter);
    let [Effect::Execute { plan, .. }] = effects.as_slice() else {
        panic!("execute: {effects:?}")
    };
    assert_eq!(plan.resource.as_deref(), Some(name));
}

/// A newline and a right-to-left override: the dialog shows them escaped.
#[test]
fn a_name_a_terminal_cannot_type_is_confirmed_by_the_escaped_form_shown() {
    confirmed_by_its_escape("shop\norders\u{202e}x", "shop\\norders\\u{202e}x");
}

/// Unicode's own line breaks and the direction marks outside the ranges first escaped
/// (U+2028, U+2029, the Arabic letter mark U+061C, the byte-order mark U+FEFF) cannot be
/// typed at a terminal either: the dialog shows them escaped, and the escape confirms.
#[test]
fn a_unicode_line_separator_or_letter_mark_is_confirmed_by_its_escape() {
    confirmed_by_its_escape(
        "shop\u{2028}orders\u{61c}\u{2029}x\u{feff}",
        "shop\\u{2028}orders\\u{61c}\\u{2029}x\\u{feff}",
    );
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
    assert_eq!(
        state.dialog.as_ref().unwrap().apply_disabled().unwrap(),
        "changed since opened: v7 held by pet-aggregates-holder → v8 held by pet-aggregates-holder: nothing will be written; ctrl-r plans it again"
    );
    press(&mut state, KeyCode::Tab);
    assert!(press(&mut state, KeyCode::Enter).is_empty());
    assert!(state
        .notice
        .clone()
        .unwrap()
        .text
        .starts_with("changed since opened: v7"));
    // r captures the lease as the console has it now and plans again.
    state.apply(
        DataEvent::LeaseChanged(Box::new(lease("pet-aggregates", 8))),
        now(),
    );
    assert_eq!(
        ctrl(&mut state, 'r'),
        vec![Effect::Plan(takeover_of("pet-aggregates"))]
    );
    let Some(Dialog::Planning {
        target: Some(target),
        ..
    }) = &state.dialog
    else {
        panic!("planning again: {:?}", state.dialog)
    };
    assert_eq!(target.version, 8);
    planned(
        &mut state,
        &takeover_of("pet-aggregates"),
        &lease("pet-aggregates", 8),
    );
    assert_eq!(
        state.dialog.as_ref().unwrap().apply_disabled().as_deref(),
        Some("type pet-aggregates to enable Apply")
    );
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
    // Its time to loss says AT RISK (the share of the window alone says nothing).
    state.apply(
        losses(&[("shop.mailer", 600), ("pet-aggregates", 86_400)]),
        now(),
    );
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

// ------------------------------------------------------------- dialogs that stay true

fn preview_of(state: &mut ConsoleState, key: char, request: &crate::ops::ActionRequest) {
    press(state, KeyCode::Char(key));
    let lease = state
        .leases
        .get(request.named_resource().unwrap())
        .unwrap()
        .lease
        .clone();
    planned(state, request, &lease);
    assert!(
        matches!(state.dialog, Some(Dialog::Preview { .. })),
        "{:?}",
        state.dialog
    );
}

#[test]
fn the_feed_flows_under_a_dialog_and_a_plan_whose_lease_moved_on_says_so() {
    let mut state = loaded();
    preview_of(&mut state, 't', &takeover_of("pet-aggregates"));
    assert_eq!(
        state.dialog.as_ref().unwrap().apply_disabled().as_deref(),
        Some("type pet-aggregates to enable Apply")
    );
    type_text(&mut state, "pet-aggregates");
    assert_eq!(state.dialog.as_ref().unwrap().apply_disabled(), None);

    // A standby takes the lease while the dialog is open: the table follows, and the
    // dialog says what changed and will not apply.
    let mut taken = lease("pet-aggregates", 8);
    taken.holder = Some("standby-2".into());
    state.apply(DataEvent::LeaseChanged(Box::new(taken)), now());
    assert_eq!(state.leases.get("pet-aggregates").unwrap().lease.version, 8);
    let Some(Dialog::Preview {
        moved: Some(moved), ..
    }) = &state.dialog
    else {
        panic!("moved: {:?}", state.dialog)
    };
    assert_eq!(
        moved.text(),
        "changed since planned: v7 held by pet-aggregates-holder → v8 held by standby-2"
    );
    press(&mut state, KeyCode::Tab);
    assert!(
        press(&mut state, KeyCode::Enter).is_empty(),
        "Apply is disabled"
    );
    assert!(state
        .notice
        .as_ref()
        .unwrap()
        .text
        .contains("nothing will be written; ctrl-r plans it again"));
    // One key re-gathers and re-plans, against the lease as it is now.
    assert_eq!(
        ctrl(&mut state, 'r'),
        vec![Effect::Plan(takeover_of("pet-aggregates"))]
    );
    let Some(Dialog::Planning {
        target: Some(target),
        ..
    }) = &state.dialog
    else {
        panic!("planning: {:?}", state.dialog)
    };
    assert_eq!(
        (target.version, target.holder.as_deref()),
        (8, Some("standby-2"))
    );
}

#[test]
fn a_lagging_feed_is_not_taken_for_a_change() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('t'));
    // The plan read version 7; the table still has it, then a renewal arrives.
    planned(
        &mut state,
        &takeover_of("pet-aggregates"),
        &lease("pet-aggregates", 7),
    );
    let mut renewed = lease("pet-aggregates", 7);
    renewed.renewed_at = Some(now());
    state.apply(DataEvent::LeaseChanged(Box::new(renewed)), now());
    assert!(matches!(
        state.dialog,
        Some(Dialog::Preview { moved: None, .. })
    ));
    // Frozen: the queued change still counts.
    press(&mut state, KeyCode::Esc);
    press(&mut state, KeyCode::Char('f'));
    preview_of(&mut state, 't', &takeover_of("pet-aggregates"));
    state.apply(
        DataEvent::LeaseChanged(Box::new(lease("pet-aggregates", 9))),
        now(),
    );
    assert_eq!(state.leases.get("pet-aggregates").unwrap().lease.version, 7);
    assert!(matches!(
        state.dialog,
        Some(Dialog::Preview { moved: Some(_), .. })
    ));
}

#[test]
fn a_reason_typed_in_the_dialog_goes_with_the_execution() {
    let mut state = loaded();
    preview_of(&mut state, 't', &takeover_of("pet-aggregates"));
    // tab, tab: Apply, then the reason field. What is typed there is not the name.
    press(&mut state, KeyCode::Tab);
    press(&mut state, KeyCode::Tab);
    type_text(&mut state, "holder hung (pager 4411)");
    press(&mut state, KeyCode::Enter);
    assert!(matches!(
        state.dialog,
        Some(Dialog::Preview {
            focus: Focus::Apply,
            ..
        })
    ));
    type_text(&mut state, "pet-aggregates");
    let effects = press(&mut state, KeyCode::Enter);
    let [Effect::Execute { reason, .. }] = effects.as_slice() else {
        panic!("{effects:?}")
    };
    assert_eq!(reason.as_deref(), Some("holder hung (pager 4411)"));
}

#[test]
fn rewind_accepts_a_clock_time_and_an_rfc_3339_time() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('w'));
    type_text(&mut state, "09:55");
    let effects = press(&mut state, KeyCode::Enter);
    assert_eq!(
        effects,
        vec![Effect::Plan(crate::ops::ActionRequest::Rewind {
            resource: "pet-aggregates".into(),
            to: crate::ops::RewindTarget::Time(crate::ops::TimeSpec::Wall(
                Utc.with_ymd_and_hms(2026, 11, 22, 9, 55, 0).unwrap()
            )),
        })]
    );
    press(&mut state, KeyCode::Esc);
    press(&mut state, KeyCode::Char('w'));
    type_text(&mut state, "2026-11-22T09:58:00Z");
    assert!(matches!(
        press(&mut state, KeyCode::Enter).as_slice(),
        [Effect::Plan(crate::ops::ActionRequest::Rewind {
            to: crate::ops::RewindTarget::Time(_),
            ..
        })]
    ));
}

#[test]
fn letters_typed_into_a_blocked_or_refused_dialog_are_the_name_never_a_command() {
    // Seen with the release binary on a real set: the holder rotated while the takeover
    // dialog opened, and typing "pet-aggregates" re-planned at its 'r' and lost the rest.
    let mut state = loaded();
    press(&mut state, KeyCode::Char('t'));
    planned(
        &mut state,
        &takeover_of("pet-aggregates"),
        &lease("pet-aggregates", 8),
    );
    for c in "pet-aggregates".chars() {
        assert_eq!(press(&mut state, KeyCode::Char(c)), vec![], "{c:?}");
    }
    let Some(Dialog::Preview { typed, .. }) = &state.dialog else {
        panic!("{:?}", state.dialog)
    };
    assert_eq!(
        typed, "pet-aggregates",
        "the name is kept while Apply waits"
    );

    // A reset to now refused for want of accept-skip: typing never accepts it.
    let mut state = loaded();
    let refused = crate::ops::ActionRequest::Reset {
        resource: "pet-aggregates".into(),
        to: crate::ops::ResetTarget::Now,
        accept_skip: false,
    };
    preview_of(&mut state, 'X', &refused);
    for c in "pet-aggregates".chars() {
        assert_eq!(press(&mut state, KeyCode::Char(c)), vec![], "{c:?}");
    }
    let Some(Dialog::Preview { plan, .. }) = &state.dialog else {
        panic!("{:?}", state.dialog)
    };
    assert!(skip_not_accepted(plan), "still refused: nothing accepted");
}

#[test]
fn reset_to_now_asks_to_accept_the_skip_as_the_command_line_does() {
    let mut state = loaded();
    let refused = crate::ops::ActionRequest::Reset {
        resource: "pet-aggregates".into(),
        to: crate::ops::ResetTarget::Now,
        accept_skip: false,
    };
    preview_of(&mut state, 'X', &refused);
    let Some(Dialog::Preview { plan, .. }) = &state.dialog else {
        unreachable!()
    };
    assert!(skip_not_accepted(plan));
    let accepted = crate::ops::ActionRequest::Reset {
        resource: "pet-aggregates".into(),
        to: crate::ops::ResetTarget::Now,
        accept_skip: true,
    };
    assert_eq!(ctrl(&mut state, 's'), vec![Effect::Plan(accepted.clone())]);
    planned(&mut state, &accepted, &lease("pet-aggregates", 7));
    let Some(Dialog::Preview { plan, .. }) = &state.dialog else {
        panic!("{:?}", state.dialog)
    };
    assert!(plan.refusal.is_none());
    assert!(plan
        .warnings
        .iter()
        .any(|w| w.contains("skipping on purpose")));
    assert_eq!(plan.confirm_text(), Some("pet-aggregates"));
}

#[test]
fn a_handover_offers_the_in_process_standbys_or_a_typed_name() {
    let mut state = loaded();
    let listener = |id: &str| crate::engine::ListenerSnapshot::new("pet-aggregates", id);
    state.apply(
        DataEvent::Listeners(vec![
            listener("pet-aggregates-holder"),
            listener("pets-standby-1"),
            listener("pets-standby-2"),
        ]),
        now(),
    );
    assert!(press(&mut state, KeyCode::Char('T')).is_empty());
    let Some(Dialog::Ask {
        ask: Ask::HandOver { standbys, choice },
        ..
    }) = &state.dialog
    else {
        panic!("{:?}", state.dialog)
    };
    assert_eq!(
        standbys,
        &["pets-standby-1", "pets-standby-2"],
        "not the holder"
    );
    assert_eq!(*choice, Some(0));
    press(&mut state, KeyCode::Down);
    let to = |name: &str| {
        vec![Effect::Plan(crate::ops::ActionRequest::Takeover {
            resource: "pet-aggregates".into(),
            to: Some(name.into()),
            hold: None,
        })]
    };
    assert_eq!(press(&mut state, KeyCode::Enter), to("pets-standby-2"));
    press(&mut state, KeyCode::Esc);
    press(&mut state, KeyCode::Char('T'));
    type_text(&mut state, "remote-7");
    assert_eq!(press(&mut state, KeyCode::Enter), to("remote-7"));
}

#[test]
fn a_running_rebuild_asks_before_cancelling_or_goes_on_in_the_background() {
    let mut state = loaded();
    state.rebuilds = vec![("pet-aggregates".into(), "pets".into())];
    state.dialog = Some(running_rebuild());
    assert!(press(&mut state, KeyCode::Esc).is_empty());
    assert!(matches!(
        state.dialog,
        Some(Dialog::Running {
            stage: RunningStage::ConfirmCancel,
            ..
        })
    ));
    // b: the dialog closes, the rebuild goes on.
    assert!(press(&mut state, KeyCode::Char('b')).is_empty());
    assert_eq!(state.dialog, None);
    assert!(state.background_rebuild.is_some());
    state.apply(
        DataEvent::RebuildProgress(crate::ops::RebuildProgress {
            done: 3,
            total: Some(7),
            stage: "writing".into(),
            finished: false,
        }),
        now(),
    );
    assert_eq!(
        state.footer_lead().as_deref(),
        Some("⟳ rebuild of pet-aggregates running in the background (3/7)")
    );
    // A second rebuild is not started meanwhile.
    assert!(press(&mut state, KeyCode::Char('b')).is_empty());
    assert!(state
        .notice
        .as_ref()
        .unwrap()
        .text
        .contains("one rebuild at a time"));
    // Another action's dialog is not closed by the rebuild's outcome.
    press(&mut state, KeyCode::Char('t'));
    state.apply(
        DataEvent::ActionDone {
            action: crate::ops::ActionKind::Rebuild,
            result: Ok("applied: rebuild pet-aggregates".into()),
        },
        now(),
    );
    assert!(matches!(state.dialog, Some(Dialog::Planning { .. })));
    assert_eq!(state.background_rebuild, None);
    assert_eq!(
        state.notice.as_ref().unwrap().text,
        "applied: rebuild pet-aggregates",
        "the outcome arrives as a notice"
    );

    // Quitting with a rebuild in the background brings its dialog back to ask.
    press(&mut state, KeyCode::Esc);
    state.dialog = Some(running_rebuild());
    press(&mut state, KeyCode::Char('b'));
    assert_eq!(press(&mut state, KeyCode::Char('q')), Vec::new());
    assert!(matches!(
        state.dialog,
        Some(Dialog::Running {
            stage: RunningStage::ConfirmQuit,
            ..
        })
    ));
    assert_eq!(press(&mut state, KeyCode::Char('y')), vec![Effect::Quit]);
}

#[test]
fn ctrl_c_with_a_rebuild_in_the_background_asks_even_over_another_dialog() {
    let mut state = loaded();
    state.rebuilds = vec![("pet-aggregates".into(), "pets".into())];
    state.dialog = Some(running_rebuild());
    press(&mut state, KeyCode::Esc);
    press(&mut state, KeyCode::Char('b'));
    assert!(state.background_rebuild.is_some());
    // Another action's dialog is open when the operator presses Ctrl-C.
    press(&mut state, KeyCode::Char('t'));
    assert!(matches!(state.dialog, Some(Dialog::Planning { .. })));
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert!(
        state.on_key(ctrl_c).is_empty(),
        "quitting would drop the rebuild and leave STUCK BULK: it asks first"
    );
    assert!(matches!(
        state.dialog,
        Some(Dialog::Running {
            stage: RunningStage::ConfirmQuit,
            ..
        })
    ));
}

// ------------------------------------------------------------------- footer and copy

fn hints(state: &ConsoleState) -> Vec<String> {
    state
        .footer_hints()
        .into_iter()
        .map(|h| format!("{} {}", h.key, h.text))
        .collect()
}

#[test]
fn the_footer_offers_the_actions_that_apply_to_the_selected_lease() {
    let mut state = loaded();
    state.rebuilds = vec![("pet-aggregates".into(), "pets".into())];
    let healthy = hints(&state);
    assert_eq!(
        healthy[..5],
        [
            "t takeover",
            "T hand over",
            "w rewind",
            "x reset",
            "b rebuild"
        ]
    );
    assert_eq!(healthy.last().unwrap(), "? help");

    let mut stuck = lease("pet-aggregates", 8);
    stuck.kind = crate::model::LockKind::Bulk;
    stuck.expires_at = Some(now() - chrono::Duration::seconds(60));
    state.apply(DataEvent::LeaseChanged(Box::new(stuck)), now());
    assert_eq!(hints(&state)[..2], ["b rebuild", "a abort-bulk"]);

    let mut lost = lease("shop.orders", 4);
    lost.resume_at = Some(ClusterTime::new(now().timestamp() as u32 - 900, 1));
    state.apply(DataEvent::LeaseChanged(Box::new(lost)), now());
    press(&mut state, KeyCode::Char('j'));
    assert_eq!(
        state.leases.selected().unwrap().health.status,
        LeaseStatus::Lost
    );
    assert_eq!(
        hints(&state)[..3],
        ["x reset", "w rewind", "X reset to now"]
    );

    press(&mut state, KeyCode::Char('f'));
    assert!(hints(&state).contains(&"f unfreeze".to_string()));
    assert_eq!(
        state.footer_lead().as_deref(),
        Some("❄ FROZEN, 0 changes held")
    );
}

#[test]
fn read_only_says_why_an_action_key_does_nothing() {
    let mut state = loaded();
    state.read_only = true;
    assert!(state.footer_lead().unwrap().contains("read-only"));
    assert!(!hints(&state).iter().any(|h| h.contains("takeover")));
    assert!(press(&mut state, KeyCode::Char('t')).is_empty());
    assert_eq!(state.dialog, None);
    let notice = state.notice.clone().unwrap().text;
    assert!(
        notice.starts_with("read-only: t (takeover) does nothing")
            && notice.contains("--read-only"),
        "{notice}"
    );
    press(&mut state, KeyCode::Char('z'));
    assert!(
        state.notice.is_none(),
        "an unbound key that is no action says nothing"
    );
}

#[test]
fn undo_is_offered_only_for_an_action_that_moved_the_resume_point() {
    let mut state = loaded();
    let before = lease("shop.orders", 3);
    let mut taken_over = before.clone();
    taken_over.holder = None;
    taken_over.version = 4;
    let mut rewound = taken_over.clone();
    // The holder committed between the plan and the swap: the takeover's after shows
    // a later point, and it still moved nothing.
    taken_over.resume_at = Some(ClusterTime::new(now().timestamp() as u32 - 2, 1));
    rewound.resume_at = Some(ClusterTime::new(now().timestamp() as u32 - 300, 1));
    let record = |id: &str, action: &str, after: &Lease| AuditRecord {
        id: id.into(),
        operator: "ann".into(),
        at: now(),
        action: action.into(),
        resource: "shop.orders".into(),
        state: crate::model::AuditState::Applied,
        before: Some(before.clone()),
        intended: Some(after.clone()),
        after: Some(after.clone()),
        steps: Vec::new(),
        reason: None,
        outcome: "applied".into(),
        finished_at: Some(now()),
    };
    state.apply(
        DataEvent::Audit(
            vec![
                record("a2", "takeover", &taken_over),
                record("a1", "rewind", &rewound),
            ]
            .into(),
        ),
        now(),
    );
    press(&mut state, KeyCode::Char('4'));
    assert!(!hints(&state).contains(&"u undo".to_string()), "a takeover");
    press(&mut state, KeyCode::Char('j'));
    assert!(hints(&state).contains(&"u undo".to_string()), "a rewind");
}

#[test]
fn the_detail_copies_the_whole_token_and_the_last_error() {
    let mut state = loaded();
    let mut with_token = lease("pet-aggregates", 7);
    let token = crate::model::ResumeToken::encode(
        ClusterTime::new(now().timestamp() as u32 - 5, 3),
        crate::model::TokenKind::Event,
        7,
    );
    with_token.resume_token = Some(token.clone());
    state.apply(DataEvent::LeaseChanged(Box::new(with_token.clone())), now());
    let mut failing = crate::engine::ListenerSnapshot::new("pet-aggregates", "pets-1");
    failing.last_error = Some("history lost:\n resume point fell off\u{1b}[2J".into());
    state.apply(DataEvent::Listeners(vec![failing]), now());
    press(&mut state, KeyCode::Enter);
    assert!(hints(&state).contains(&"c copy token".to_string()));
    assert_eq!(
        press(&mut state, KeyCode::Char('c')),
        vec![Effect::Copy {
            what: "the resume token",
            text: token.data_hex().unwrap().to_string(),
        }]
    );
    // A capped lease's position copies as its entry's _id, for rewind --to-id.
    let mut capped = lease("pet-aggregates", 4);
    let entry = crate::model::object_id_at(now(), *b"app-1", 9);
    capped.resume_token = Some(crate::model::entry_token(entry));
    state.apply(DataEvent::LeaseChanged(Box::new(capped)), now());
    assert_eq!(
        press(&mut state, KeyCode::Char('c')),
        vec![Effect::Copy {
            what: "the position's entry _id",
            text: entry.to_hex(),
        }]
    );
    state.apply(DataEvent::LeaseChanged(Box::new(with_token)), now());
    assert_eq!(
        press(&mut state, KeyCode::Char('C')),
        vec![Effect::Copy {
            what: "the last error",
            text: "pets-1: history lost:\\n resume point fell off\\u{1b}[2J".into(),
        }],
        "escaped: nothing from the server reaches a paste as a control"
    );
    press(&mut state, KeyCode::Char('j'));
    assert!(press(&mut state, KeyCode::Char('c')).is_empty(), "no token");
    assert!(state
        .notice
        .as_ref()
        .unwrap()
        .text
        .starts_with("nothing copied"));
}

/// Seen in the walk at 80×24: X, ctrl-s, the name typed, enter — and the dialog was
/// gone without a word, Cancel having had the focus. The operator took it for applied.
#[test]
fn enter_on_cancel_after_the_name_says_nothing_was_written_and_how_to_apply() {
    let mut state = loaded();
    press(&mut state, KeyCode::Char('t'));
    planned(
        &mut state,
        &takeover_of("pet-aggregates"),
        &lease("pet-aggregates", 7),
    );
    type_text(&mut state, "pet-aggregates");
    assert!(
        press(&mut state, KeyCode::Enter).is_empty(),
        "Cancel had the focus: nothing runs"
    );
    assert_eq!(state.dialog, None);
    let notice = state.notice.clone().expect("a notice");
    assert_eq!(notice.level, NoticeLevel::Info);
    assert_eq!(
        notice.text,
        "nothing written: enter chose Cancel (to apply: tab to Apply, then enter)"
    );
    assert!(
        notice.text.chars().count() < 80,
        "one footer line at 80 columns"
    );

    // Cancelled before Apply was ready, or with esc: nothing written, no advice.
    for keys in [&[KeyCode::Enter][..], &[KeyCode::Tab, KeyCode::Esc][..]] {
        press(&mut state, KeyCode::Char('t'));
        planned(
            &mut state,
            &takeover_of("pet-aggregates"),
            &lease("pet-aggregates", 7),
        );
        for key in keys {
            press(&mut state, *key);
        }
        assert_eq!(state.dialog, None, "{keys:?}");
        assert_eq!(
            state.notice.clone().map(|n| n.text).as_deref(),
            Some("takeover pet-aggregates cancelled: nothing was written"),
            "{keys:?}"
        );
    }
}

/// Where the oplog cannot be read the feed still sends the server's clock: a lease the
/// operator's clock thinks live is free for the taking by the server's (for 110 s:
/// UNCLAIMED), as `leases` says.
#[test]
fn without_the_oplog_the_servers_clock_still_judges_the_leases() {
    let mut state = state();
    state.apply(
        DataEvent::LeaseSnapshot((vec![lease("shop.orders", 3)]).into()),
        now(),
    );
    let status = |state: &ConsoleState| {
        state
            .leases
            .rows(0, usize::MAX)
            .next()
            .map(|e| e.health.status)
    };
    assert_eq!(status(&state), Some(crate::model::LeaseStatus::Ok));
    // The server is two minutes ahead of this machine: the lease (10 s left by the
    // local clock) expired 110 s ago.
    state.apply(
        DataEvent::ServerClock(now() + chrono::Duration::seconds(120)),
        now(),
    );
    assert_eq!(state.server_now(), now() + chrono::Duration::seconds(120));
    assert_eq!(status(&state), Some(crate::model::LeaseStatus::Unclaimed));
}

fn losses(predicted: &[(&str, u64)]) -> DataEvent {
    use crate::model::{LossTime, TimeToLoss};
    DataEvent::TimeToLoss {
        read_at: now(),
        reading: crate::store::LossReading {
            predicted: predicted
                .iter()
                .map(|&(resource, secs)| {
                    let at = LossTime::In(Duration::from_secs(secs));
                    (
                        resource.to_string(),
                        TimeToLoss {
                            earliest: at,
                            latest: Some(LossTime::Never),
                            filling: false,
                            missing: Vec::new(),
                        },
                    )
                })
                .collect(),
            ..crate::store::LossReading::default()
        },
    }
}

fn earliest(state: &ConsoleState, resource: &str) -> Option<crate::model::LossTime> {
    let entry = state.leases.get(resource)?;
    state.time_to_loss(entry).map(|l| l.earliest)
}

/// The time to loss sorts soonest first (leases without one last), counts down with
/// the server's clock, survives lease changes, and waits while frozen.
#[test]
fn time_to_loss_sorts_counts_down_and_waits_while_frozen() {
    use crate::model::LossTime;
    let mut state = loaded();
    state.apply(
        losses(&[("shop.users", 600), ("pet-aggregates", 90)]),
        now(),
    );
    state.execute_command_line("sort loss");
    assert_eq!(state.leases.sort(), (Column::LossIn, false));
    assert_eq!(
        shown(&state),
        ["pet-aggregates", "shop.users", "shop.orders"]
    );

    // Thirty seconds later by the server's clock.
    let later = now() + chrono::Duration::seconds(30);
    let t = now().timestamp() as u32;
    state.apply(
        DataEvent::Window {
            window: OplogWindow::new(ClusterTime::new(t - 570, 1), ClusterTime::new(t + 30, 1)),
            server_now: later,
            ops_per_sec: Some(20.0),
        },
        now(),
    );
    assert_eq!(
        earliest(&state, "pet-aggregates"),
        Some(LossTime::In(Duration::from_secs(60)))
    );
    // A commit changes the lease, not its prediction.
    let mut moved = lease("pet-aggregates", 7);
    moved.resume_at = Some(ClusterTime::new(t + 29, 1));
    state.apply(DataEvent::LeaseChanged(Box::new(moved)), now());
    assert_eq!(
        earliest(&state, "pet-aggregates"),
        Some(LossTime::In(Duration::from_secs(60)))
    );

    state.set_frozen(true);
    state.apply(losses(&[("shop.orders", 10)]), now());
    assert_eq!(earliest(&state, "shop.orders"), None, "held while frozen");
    assert_eq!(shown(&state)[0], "pet-aggregates");
    state.set_frozen(false);
    assert_eq!(
        shown(&state),
        ["shop.orders", "pet-aggregates", "shop.users"]
    );
    assert_eq!(
        earliest(&state, "pet-aggregates"),
        None,
        "not in the new prediction"
    );
}

/// A capped lease is measured against its collection's entries as the feed reads them:
/// a position the collection rolled past is LOST, though the oplog still holds its time.
#[test]
fn a_capped_lease_is_lost_once_its_collection_rolled_past_it() {
    use crate::model::{entry_token, object_id_at, SourceKind, WatchTarget};
    use crate::store::{CappedReading, CappedWindow};
    let mut state = loaded();
    let at = |secs: i64| object_id_at(now() - chrono::Duration::seconds(secs), [1; 5], 1);
    let mut capped = lease("app.events", 2);
    capped.resume_at = None;
    capped.resume_token = Some(entry_token(at(100)));
    capped.watch = Some(WatchTarget {
        db: "app".into(),
        coll: "events".into(),
        source: SourceKind::Capped,
        ..Default::default()
    });
    state.apply(DataEvent::LeaseChanged(Box::new(capped)), now());
    let status = |state: &ConsoleState| {
        state
            .leases
            .rows(0, usize::MAX)
            .find(|e| e.lease.resource == "app.events")
            .map(|e| e.health.status)
    };
    assert_ne!(
        status(&state),
        Some(LeaseStatus::Lost),
        "the oplog holds its time"
    );
    let mut reading = CappedReading::default();
    reading.entries.insert(
        "app.events".into(),
        CappedWindow {
            oldest: at(50),
            newest: at(1),
        },
    );
    state.apply(DataEvent::CappedWindows(reading), now());
    assert_eq!(status(&state), Some(LeaseStatus::Lost));
    assert_eq!(
        state
            .leases
            .rows(0, usize::MAX)
            .find(|e| e.lease.resource == "shop.orders")
            .map(|e| e.health.status),
        Some(LeaseStatus::Ok),
        "change-stream leases keep the oplog window"
    );
}

#[test]
fn a_failing_lease_offers_skip_first_and_k_plans_the_skip_of_its_change() {
    let mut state = loaded();
    let t = now().timestamp() as u32;
    let mut failing = lease("pet-aggregates", 9);
    let mut failure = crate::model::ChangeFailure::first(
        Some(crate::model::ResumeToken::encode(
            ClusterTime::new(t - 4, 1),
            crate::model::TokenKind::Event,
            3,
        )),
        Some(ClusterTime::new(t - 4, 1)),
        "demo.animals",
        "insert",
        r#"{"_id":"rex"}"#,
        "animal rex has no valid \"tags\"",
        crate::model::FailureCause::Handler,
        now(),
    );
    failure.attempts = 3;
    failing.failure = Some(failure);
    state.apply(DataEvent::LeaseChanged(Box::new(failing)), now());
    assert_eq!(
        state.leases.selected().unwrap().health.status,
        LeaseStatus::Failing
    );
    assert_eq!(hints(&state)[..2], ["K skip", "t takeover"]);

    let skip = crate::ops::ActionRequest::Skip {
        resource: "pet-aggregates".into(),
        to_token: None,
    };
    assert_eq!(
        press(&mut state, KeyCode::Char('K')),
        vec![Effect::Plan(skip.clone())]
    );
    let lease = state.leases.get("pet-aggregates").unwrap().lease.clone();
    planned(&mut state, &skip, &lease);
    let Some(Dialog::Preview { plan, .. }) = &state.dialog else {
        panic!("{:?}", state.dialog)
    };
    assert_eq!(plan.refusal, None);
    assert!(
        plan.effect.lines[0]
            .starts_with("steps over one change: insert demo.animals {\"_id\":\"rex\"}"),
        "{:?}",
        plan.effect.lines
    );
    assert_eq!(plan.confirm_text(), Some("pet-aggregates"));
}
