//! Stop sequences over streamed text: text is held back while it could still turn out to be the
//! start of a stop sequence, so a client never sees part of one.

pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet released.
    pending: String,
    /// The stop sequence that ended the text, once one has.
    matched: Option<usize>,
}

/// What one piece of text turned into.
#[derive(Debug, PartialEq, Eq)]
pub struct Released {
    /// Text safe to send now.
    pub text: String,
    /// A stop sequence was found: `text` ends just before it, and the generation must end.
    pub stopped: bool,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            pending: String::new(),
            matched: None,
        }
    }

    pub fn push(&mut self, delta: &str) -> Released {
        self.pending.push_str(delta);
        if self.stops.is_empty() {
            return Released { text: std::mem::take(&mut self.pending), stopped: false };
        }
        let first_stop =
            self.stops.iter().enumerate().filter_map(|(i, s)| self.pending.find(s.as_str()).map(|at| (at, i))).min();
        if let Some((at, i)) = first_stop {
            let text = self.pending[..at].to_string();
            self.pending.clear();
            self.matched = Some(i);
            return Released { text, stopped: true };
        }
        let keep = self.held_suffix_len();
        let cut = self.pending.len() - keep;
        let text = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        Released { text, stopped: false }
    }

    /// The stop sequence that ended the text (Anthropic's `stop_sequence`), if one did.
    pub fn matched(&self) -> Option<&str> {
        self.matched.map(|i| self.stops[i].as_str())
    }

    /// The generation ended for another reason: whatever was held back is plain text after all.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// Bytes at the end of `pending` that are a proper prefix of some stop sequence (on a char
    /// boundary), and so must wait for more text.
    fn held_suffix_len(&self) -> usize {
        let p = &self.pending;
        let mut best = 0;
        for s in &self.stops {
            let max = (s.len() - 1).min(p.len());
            for len in (best + 1..=max).rev() {
                let start = p.len() - len;
                if p.is_char_boundary(start) && s.starts_with(&p[start..]) {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], deltas: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for d in deltas {
            let r = m.push(d);
            out.push_str(&r.text);
            if r.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn stop_split_across_deltas_is_never_leaked() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("hello E"), Released { text: "hello ".into(), stopped: false });
        assert_eq!(m.push("N"), Released { text: "".into(), stopped: false });
        assert_eq!(m.push("Dtrailing"), Released { text: "".into(), stopped: true });
    }

    #[test]
    fn false_start_is_released() {
        assert_eq!(run(&["END"], &["a E", "Nx", " b"]), ("a ENx b".into(), false));
        assert_eq!(run(&["END"], &["tail E"]), ("tail E".into(), false));
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        assert_eq!(run(&["\n\n", "Q:"], &["answer Q: more\n\n"]), ("answer ".into(), true));
        assert_eq!(run(&["abc", "b"], &["xab"]), ("xa".into(), true));
        let mut m = StopMatcher::new(vec!["\n\n".into(), "Q:".into()]);
        assert_eq!(m.matched(), None);
        assert!(m.push("answer Q: more\n\n").stopped);
        assert_eq!(m.matched(), Some("Q:"));
    }

    #[test]
    fn no_stops_passes_through() {
        let mut m = StopMatcher::new(vec![]);
        assert_eq!(m.push("é"), Released { text: "é".into(), stopped: false });
    }

    #[test]
    fn multibyte_text_is_cut_on_char_boundaries() {
        assert_eq!(run(&["éé"], &["aé", "b"]), ("aéb".into(), false));
        assert_eq!(run(&["éé"], &["aé", "é!"]), ("a".into(), true));
    }
}
