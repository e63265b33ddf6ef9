//! Mode, cluster, members, oplog window, and what is wrong with the data.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::format::{cluster_clock, rate};
use crate::console::state::ConsoleState;
use crate::console::theme::Theme;
use crate::demo::workload::WorkloadStatus;
use crate::model::text::{escape_control, relative_time, short_duration};
use crate::model::{Deployment, LeaseStatus, OplogAccess, Topology};

pub fn draw(frame: &mut Frame, area: Rect, state: &ConsoleState, theme: &Theme) {
    let lines = vec![
        title_line(state, theme),
        members_line(state, theme),
        oplog_line(state, theme),
    ];
    frame.render_widget(Paragraph::new(lines).style(theme.header), area);
}

/// Mode first, then what needs attention (read-only, frozen, a lost source), and the
/// cluster last: on a narrow terminal the URI is what gets cut off.
fn title_line<'a>(state: &'a ConsoleState, theme: &Theme) -> Line<'a> {
    let mut spans = vec![
        Span::styled(" streamward ", theme.title),
        Span::styled(format!(" {} ", state.mode.label()), theme.accent),
    ];
    if state.read_only {
        spans.push(Span::styled(" 🔒 read-only", theme.warn));
    }
    if state.frozen {
        spans.push(Span::styled(
            format!(" ❄ FROZEN ({} pending)", state.pending()),
            theme.warn,
        ));
    }
    if let Some((source, failure)) = state.failures.iter().next() {
        let as_of = state
            .data_as_of
            .map(|t| format!(", data as of {}", t.format("%H:%M:%S")))
            .unwrap_or_default();
        spans.push(Span::styled(
            format!(
                " ⚠ {} lost {}{as_of}: {}",
                source.label(),
                relative_time(failure.since, state.now),
                escape_control(&failure.error)
            ),
            theme.danger,
        ));
    }
    if let Some(workload) = &state.workload {
        if let Some(line) = workload.headline(state.now) {
            let style = match workload {
                WorkloadStatus::Stopped { .. } => theme.danger,
                WorkloadStatus::Writing { .. } => theme.accent,
            };
            spans.push(Span::styled(format!(" ⚠ {line}"), style));
        }
    }
    let malformed = state.malformed_leases.len() + state.malformed_audit.len();
    if let Some(first) = state
        .malformed_leases
        .iter()
        .chain(&state.malformed_audit)
        .next()
    {
        spans.push(Span::styled(
            format!(
                " ⚠ {malformed} malformed document{} (not shown): {}",
                if malformed == 1 { "" } else { "s" },
                escape_control(&first.to_string())
            ),
            theme.warn,
        ));
    }
    if let Some(topology) = &state.topology {
        spans.push(Span::styled(
            format!("  {}", topology.deployment),
            theme.base,
        ));
    }
    spans.push(Span::raw("  "));
    spans.push(Span::styled(escape_control(&state.cluster), theme.base));
    Line::from(spans)
}

/// Through mongos there are no members to show but shards: each named, with a word
/// where one limits the window, is quiet or was not read (the oplog view says more).
fn shards_line(topology: &Topology, theme: &Theme) -> Line<'static> {
    let mut spans = vec![Span::styled(" shards  ", theme.muted)];
    if topology.shards.is_empty() {
        spans.push(Span::styled(
            "not listed (the oplog view says why)",
            theme.warn,
        ));
    }
    let windows = topology.shard_windows();
    let quiet = windows.quiet();
    for (i, shard) in topology.shards.iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled(" · ", theme.muted));
        }
        let (word, style) = if shard.window.is_err() {
            (" not read", theme.danger)
        } else if quiet.iter().any(|(q, _)| q.name == shard.name) {
            (" quiet", theme.warn)
        } else if topology.shards.len() > 1
            && windows.limiting().is_some_and(|l| l.name == shard.name)
        {
            (" limits the window", theme.muted)
        } else {
            ("", theme.ok)
        };
        spans.push(Span::styled(escape_control(&shard.name), theme.base));
        if !word.is_empty() {
            spans.push(Span::styled(word, style));
        }
    }
    Line::from(spans)
}

fn members_line<'a>(state: &'a ConsoleState, theme: &Theme) -> Line<'a> {
    if let Some(topology) = state
        .topology
        .as_ref()
        .filter(|t| t.deployment == Deployment::Sharded)
    {
        return shards_line(topology, theme);
    }
    let mut spans = vec![Span::styled(" members ", theme.muted)];
    match &state.members {
        Ok(members) if members.is_empty() => spans.push(Span::styled("…", theme.muted)),
        Ok(members) => {
            for (i, member) in members.iter().enumerate() {
                if i > 0 {
                    spans.push(Span::styled(" · ", theme.muted));
                }
                spans.push(Span::styled(escape_control(&member.name), theme.base));
                let style = match (member.healthy, member.state.as_str()) {
                    (false, _) => theme.danger,
                    (true, "PRIMARY" | "SECONDARY") => theme.ok,
                    _ => theme.warn,
                };
                spans.push(Span::styled(
                    format!(" {}", escape_control(&member.state)),
                    style,
                ));
                // An unreachable member's state already says so ("(not reachable/healthy)").
                if let Some(lag) = member.lag.behind().filter(|l| !l.is_zero()) {
                    spans.push(Span::styled(
                        format!(" lag {}", short_duration(lag)),
                        theme.warn,
                    ));
                }
            }
        }
        Err(error) => spans.push(Span::styled(escape_control(error), theme.muted)),
    }
    Line::from(spans)
}

fn oplog_line<'a>(state: &'a ConsoleState, theme: &Theme) -> Line<'a> {
    let mut spans = vec![Span::styled(" oplog   ", theme.muted)];
    match state.window {
        Some(window) => {
            spans.push(Span::styled(
                format!("window {}", short_duration(window.length())),
                theme.base,
            ));
            spans.push(Span::styled(
                format!(
                    "  {} → {}",
                    cluster_clock(window.first),
                    cluster_clock(window.last)
                ),
                theme.muted,
            ));
            if let Some(ops) = state.ops_per_sec {
                spans.push(Span::styled(format!("  {} ops/s", rate(ops)), theme.base));
            }
        }
        None => match &state.topology {
            // The why, short; the oplog view (2) says what follows.
            Some(Topology {
                oplog: OplogAccess::NotReadable(why),
                ..
            }) => spans.push(Span::styled(
                format!("window unknown: {}", escape_control(why)),
                theme.warn,
            )),
            _ => spans.push(Span::styled("window not read yet", theme.muted)),
        },
    }
    let table = &state.leases;
    let total = table.len();
    let lost = table.count(LeaseStatus::Lost)
        + table.count(LeaseStatus::Invalidated)
        + table.count(LeaseStatus::Failing)
        + table.count(LeaseStatus::StuckBulk);
    let risk = table.count(LeaseStatus::AtRisk);
    let unclaimed = table.count(LeaseStatus::Unclaimed);
    spans.push(Span::styled(format!("   leases {total}"), theme.base));
    if lost > 0 {
        spans.push(Span::styled(
            format!("  {lost} need recovery"),
            theme.danger,
        ));
    }
    if unclaimed > 0 {
        spans.push(Span::styled(
            format!("  {unclaimed} unclaimed"),
            theme.danger,
        ));
    }
    if risk > 0 {
        spans.push(Span::styled(format!("  {risk} at risk"), theme.warn));
    }
    Line::from(spans)
}
