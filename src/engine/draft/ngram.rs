//! Prompt-lookup drafting: find the latest earlier occurrence of the sequence's last n tokens
//! (longest n first) and propose what followed it. It needs no weights and works with any model;
//! it shines when the answer repeats the prompt (editing code, quoting, reformatting).

use super::Drafter;

/// Longest suffix tried: longer matches are rarer and add little certainty beyond four tokens.
const MAX_NGRAM: usize = 4;
/// Shortest suffix tried: a single repeated token predicts its successor too poorly to pay.
const MIN_NGRAM: usize = 2;
/// How far back a match is looked for, so that a step's search stays a few microseconds even
/// at a full 8,192-token context.
const MAX_LOOKBACK: usize = 16_384;

#[derive(Default)]
pub struct NgramDrafter;

impl Drafter for NgramDrafter {
    fn name(&self) -> &'static str {
        "ngram"
    }

    fn sources(&self) -> &'static [&'static str] {
        &["ngram"]
    }

    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) {
        out.clear();
        if max == 0 {
            return;
        }
        let len = history.len();
        let floor = len.saturating_sub(MAX_LOOKBACK);
        for n in (MIN_NGRAM..=MAX_NGRAM.min(len.saturating_sub(1))).rev() {
            let suffix = &history[len - n..];
            // Latest first: recent text is the better predictor of what comes next.
            let found =
                (floor..len - n).rev().find(|&i| history[i + n - 1] == suffix[n - 1] && &history[i..i + n] == suffix);
            if let Some(i) = found {
                let start = i + n;
                out.extend_from_slice(&history[start..(start + max).min(len)]);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(h: &[u32], max: usize) -> Vec<u32> {
        let mut out = vec![99];
        NgramDrafter.draft(h, max, &mut out);
        out
    }

    #[test]
    fn continues_the_latest_longest_match() {
        // "1 2 3" occurred at 0 (followed by 4 5) and "2 3" at 6 (followed by 9): the longer wins.
        assert_eq!(draft(&[1, 2, 3, 4, 5, 0, 2, 3, 9, 1, 2, 3], 2), vec![4, 5]);
        // Two occurrences of the same 2-gram: the later one is continued.
        assert_eq!(draft(&[7, 8, 1, 0, 7, 8, 2, 0, 7, 8], 3), vec![2, 0, 7]);
    }

    #[test]
    fn drafts_stop_at_the_end_of_the_text_and_at_max() {
        assert_eq!(draft(&[5, 6, 5, 6], 8), vec![5, 6]);
        assert_eq!(draft(&[1, 2, 3, 1, 2], 1), vec![3]);
        assert_eq!(draft(&[1, 2, 3, 1, 2], 0), Vec::<u32>::new());
    }

    #[test]
    fn no_match_no_draft() {
        assert!(draft(&[1, 2, 3, 4], 4).is_empty());
        assert!(draft(&[1, 1], 4).is_empty(), "a 1-gram is below the minimum");
        assert!(draft(&[], 4).is_empty());
    }
}
