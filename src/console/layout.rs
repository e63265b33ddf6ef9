//! Where things go on the screen. Shared by drawing and by key and mouse handling, so
//! a click lands on the row that was drawn there.

use ratatui::layout::Rect;

pub const MIN_WIDTH: u16 = 80;
pub const MIN_HEIGHT: u16 = 24;
pub const HEADER_HEIGHT: u16 = 3;

/// The views in tab order.
pub const TABS: [(&str, &str); 4] = [
    ("1", "Leases"),
    ("2", "Oplog"),
    ("3", "Listeners"),
    ("4", "Audit"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Areas {
    pub header: Rect,
    pub tabs: Rect,
    pub body: Rect,
    pub footer: Rect,
}

pub fn fits(area: Rect) -> bool {
    area.width >= MIN_WIDTH && area.height >= MIN_HEIGHT
}

/// Header, tab bar, body and footer; only meaningful when [`fits`].
pub fn areas(area: Rect) -> Areas {
    let header = Rect {
        height: HEADER_HEIGHT.min(area.height),
        ..area
    };
    let tabs = Rect {
        y: area.y + header.height,
        height: 1.min(area.height.saturating_sub(header.height)),
        ..area
    };
    let used = header.height + tabs.height;
    let footer_height = 1.min(area.height.saturating_sub(used));
    let footer = Rect {
        y: area.y + area.height - footer_height,
        height: footer_height,
        ..area
    };
    let body = Rect {
        y: tabs.y + tabs.height,
        height: area.height.saturating_sub(used + footer_height),
        ..area
    };
    Areas {
        header,
        tabs,
        body,
        footer,
    }
}

/// The rows of a bordered table with one header line inside `body`: (first row y, row count).
pub fn table_rows(body: Rect) -> (u16, usize) {
    let first = body.y.saturating_add(2);
    (first, usize::from(body.height.saturating_sub(3)))
}

/// The listeners view: the listeners on top and, when a fleet's processes announce
/// themselves, their table below (at most half the body; none when too small to show).
pub fn split_listeners(body: Rect, processes: usize) -> (Rect, Option<Rect>) {
    if processes == 0 {
        return (body, None);
    }
    let wanted = u16::try_from(processes)
        .unwrap_or(u16::MAX)
        .saturating_add(3);
    let height = wanted.min(body.height / 2);
    if height < 4 {
        return (body, None);
    }
    let list = Rect {
        height: body.height - height,
        ..body
    };
    let below = Rect {
        y: body.y + list.height,
        height,
        ..body
    };
    (list, Some(below))
}

/// The lease detail and the audit view split their body: the list on top, details below.
pub fn split_list(body: Rect) -> (Rect, Rect) {
    let list_height = (body.height / 2).max(3).min(body.height);
    let list = Rect {
        height: list_height,
        ..body
    };
    let detail = Rect {
        y: body.y + list_height,
        height: body.height - list_height,
        ..body
    };
    (list, detail)
}

/// The x ranges of the tab labels, as the tab bar draws them: " 1 Leases │ 2 Oplog │ …".
pub fn tab_spans() -> Vec<(u16, u16)> {
    let mut spans = Vec::new();
    let mut x = 1u16;
    for (number, name) in TABS {
        let width = (number.len() + 1 + name.len()) as u16;
        spans.push((x, x + width));
        x += width + 3;
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_cover_the_screen_without_overlap() {
        let a = areas(Rect::new(0, 0, 80, 24));
        assert_eq!(
            a.header.height + a.tabs.height + a.body.height + a.footer.height,
            24
        );
        assert_eq!(a.body.y, 4);
        assert_eq!(a.footer.y, 23);
        assert_eq!(table_rows(a.body), (6, 16));
        for h in 0..5 {
            let a = areas(Rect::new(0, 0, 10, h));
            assert!(a.header.height + a.tabs.height + a.body.height + a.footer.height <= h);
        }
    }
}
