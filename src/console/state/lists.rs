//! Selection and scroll position of the plain lists (listeners, audit).

use super::table::visible_start;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListCursor {
    pub selected: usize,
    pub offset: usize,
}

impl ListCursor {
    /// Moves by `delta` within `len` rows, scrolled into a view of `height` rows.
    pub fn step(&mut self, delta: isize, len: usize, height: usize) {
        if len == 0 {
            *self = Self::default();
            return;
        }
        self.selected = self.selected.saturating_add_signed(delta).min(len - 1);
        self.offset = visible_start(self.selected, self.offset, height, len);
    }

    pub fn jump(&mut self, to_end: bool, len: usize, height: usize) {
        self.selected = if to_end { len.saturating_sub(1) } else { 0 };
        self.offset = visible_start(self.selected, self.offset, height, len);
    }

    /// Keeps the cursor inside a list that changed length.
    pub fn clamp(&mut self, len: usize) {
        self.selected = self.selected.min(len.saturating_sub(1));
        self.offset = self.offset.min(self.selected);
    }

    pub fn click(&mut self, row: usize, len: usize, height: usize) -> bool {
        let target = self.offset + row;
        if row < height && target < len {
            self.selected = target;
            true
        } else {
            false
        }
    }
}
