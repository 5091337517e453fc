//! Result shaping: cutting an oversized tool output down to its budget.
//!
//! Budgets count characters (Unicode scalar values, like Python's `len`) and
//! lines; cuts always fall on character boundaries, and the marker that says
//! what was removed counts against the budget.

/// Which part of an oversized output is removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Remove the beginning, keep the end (logs, where the latest lines matter).
    Head,
    /// Remove the end, keep the beginning.
    Tail,
    /// Keep the beginning and the end, remove the middle.
    Middle,
}

/// How much output a tool may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub max_chars: usize,
    pub max_lines: Option<usize>,
}

/// An output after cutting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shaped {
    pub text: String,
    /// Characters of the original that are not in `text`.
    pub omitted_chars: usize,
    /// Length of the original, in characters.
    pub original_chars: usize,
}

fn marker(cut: Cut, omitted: usize) -> String {
    match cut {
        Cut::Head => format!("[… {omitted} earlier characters truncated]\n"),
        Cut::Tail => format!("\n[… {omitted} more characters truncated]"),
        Cut::Middle => format!("\n[… {omitted} characters truncated …]\n"),
    }
}

/// Byte offset where line `n` starts (0-based); a trailing newline opens no line.
fn line_starts(text: &str) -> Vec<usize> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    std::iter::once(0)
        .chain(body.match_indices('\n').map(|(at, _)| at + 1))
        .collect()
}

/// Byte offset after the first `count` characters.
fn front_bytes(text: &str, count: usize) -> usize {
    text.char_indices().nth(count).map_or(text.len(), |(at, _)| at)
}

/// Byte offset where the last `count` characters begin.
fn back_start(text: &str, count: usize) -> usize {
    if count == 0 {
        return text.len();
    }
    text.char_indices().rev().nth(count - 1).map_or(0, |(at, _)| at)
}

/// Cuts `text` to `budget`, or returns `None` when it already fits.
pub fn truncate(text: &str, budget: Budget, cut: Cut) -> Option<Shaped> {
    let within_lines = budget
        .max_lines
        .is_none_or(|max| text.len() <= max || line_starts(text).len() <= max);
    if text.len() <= budget.max_chars && within_lines {
        return None;
    }
    let total = text.chars().count();
    // Characters available at each end before the character budget applies.
    let (mut front_max, mut back_max) = (total, total);
    let starts = line_starts(text);
    match budget.max_lines {
        Some(max) if starts.len() > max => {
            let count_front = |lines: usize| {
                if lines == 0 {
                    0
                } else {
                    text[..starts[lines] - 1].chars().count()
                }
            };
            let count_back = |lines: usize| {
                if lines == 0 {
                    0
                } else {
                    text[starts[starts.len() - lines]..].chars().count()
                }
            };
            let (front_lines, back_lines) = match cut {
                Cut::Tail => (max, 0),
                Cut::Head => (0, max),
                Cut::Middle => (max - max / 2, max / 2),
            };
            front_max = count_front(front_lines);
            back_max = count_back(back_lines);
        }
        _ if total <= budget.max_chars => return None,
        _ => {}
    }
    // The marker for the largest possible count is at least as long as the real one.
    let reserve = marker(cut, total).chars().count();
    let with_marker = budget.max_chars > reserve;
    let available = if with_marker {
        budget.max_chars - reserve
    } else {
        budget.max_chars
    };
    let (front, back) = match cut {
        Cut::Tail => (front_max.min(available), 0),
        Cut::Head => (0, back_max.min(available)),
        Cut::Middle => {
            let front = front_max.min(available - available / 2);
            (front, back_max.min(available - front))
        }
    };
    let omitted = total - front - back;
    if omitted == 0 {
        return None;
    }
    let head = &text[..front_bytes(text, front)];
    let tail = &text[back_start(text, back)..];
    let note = if with_marker {
        marker(cut, omitted)
    } else {
        String::new()
    };
    Some(Shaped {
        text: [head, note.as_str(), tail].concat(),
        omitted_chars: omitted,
        original_chars: total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    fn chars(max_chars: usize) -> Budget {
        Budget {
            max_chars,
            max_lines: None,
        }
    }

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(truncate("hello", chars(5), Cut::Tail), None);
        assert_eq!(truncate("héllo", chars(5), Cut::Tail), None);
    }

    #[test]
    fn each_cut_keeps_its_end_and_respects_the_budget() {
        let text = "0123456789".repeat(20);
        for cut in [Cut::Head, Cut::Tail, Cut::Middle] {
            let shaped = truncate(&text, chars(80), cut).unwrap();
            assert!(shaped.text.chars().count() <= 80, "{cut:?}: {}", shaped.text);
            assert_eq!(shaped.original_chars, 200);
            assert!(
                shaped.text.contains(&format!("{} ", shaped.omitted_chars)),
                "{}",
                shaped.text
            );
        }
        assert!(truncate(&text, chars(80), Cut::Tail).unwrap().text.starts_with("0123"));
        assert!(truncate(&text, chars(80), Cut::Head).unwrap().text.ends_with("789"));
        let middle = truncate(&text, chars(80), Cut::Middle).unwrap().text;
        assert!(middle.starts_with("0123") && middle.ends_with("789"));
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let text = "é😀漢".repeat(100);
        for cut in [Cut::Head, Cut::Tail, Cut::Middle] {
            for max in [0, 1, 7, 50, 61, 299] {
                let shaped = truncate(&text, chars(max), cut).unwrap();
                assert!(shaped.text.chars().count() <= max);
                assert_eq!(shaped.original_chars, 300);
            }
        }
    }

    #[test]
    fn a_tiny_budget_drops_the_marker() {
        let shaped = truncate("abcdefghij", chars(3), Cut::Tail).unwrap();
        assert_eq!(shaped.text, "abc");
        assert_eq!(shaped.omitted_chars, 7);
    }

    #[test]
    fn lines_are_limited_too() {
        let text = (0..10).fold(String::new(), |mut text, i| {
            let _ = writeln!(text, "line {i}");
            text
        });
        let budget = Budget {
            max_chars: 10_000,
            max_lines: Some(3),
        };
        let tail = truncate(&text, budget, Cut::Tail).unwrap().text;
        assert!(tail.starts_with("line 0\nline 1\nline 2\n[…"), "{tail}");
        let head = truncate(&text, budget, Cut::Head).unwrap().text;
        assert!(head.ends_with("]\nline 7\nline 8\nline 9\n"), "{head}");
        let middle = truncate(&text, budget, Cut::Middle).unwrap().text;
        assert!(
            middle.starts_with("line 0\nline 1\n[…") && middle.ends_with("line 9\n"),
            "{middle}"
        );
        assert_eq!(
            truncate(
                &text,
                Budget {
                    max_chars: 10_000,
                    max_lines: Some(10)
                },
                Cut::Tail
            ),
            None
        );
    }
}
