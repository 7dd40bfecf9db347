//! Stop strings: text that could still be the start of a stop string is held back, so the
//! client never sees part of a stop string.

pub(crate) struct StopMatcher {
    stops: Vec<String>,
    pending: String,
}

pub(crate) enum StopScan {
    /// Text that is safe to emit now.
    Emit(String),
    /// A stop string matched (the second field, the one that matched first): emit this text,
    /// then finish.
    Stopped(String, String),
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        Self { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), pending: String::new() }
    }

    pub fn push(&mut self, delta: &str) -> StopScan {
        self.pending.push_str(delta);
        if self.stops.is_empty() {
            return StopScan::Emit(std::mem::take(&mut self.pending));
        }
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|m| m.0);
        if let Some((at, stop)) = first {
            let (out, stop) = (self.pending[..at].to_string(), stop.clone());
            self.pending.clear();
            return StopScan::Stopped(out, stop);
        }
        let hold = self.held_suffix_len();
        let cut = self.pending.len() - hold;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        StopScan::Emit(out)
    }

    /// Whatever is still held back, once generation ended for another reason.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// Length of the longest suffix of `pending` that is a proper prefix of a stop string.
    fn held_suffix_len(&self) -> usize {
        let p = &self.pending;
        p.char_indices()
            .map(|(i, _)| i)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&p[i..])))
            .map_or(0, |i| p.len() - i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], deltas: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for d in deltas {
            match m.push(d) {
                StopScan::Emit(t) => out += &t,
                StopScan::Stopped(t, _) => return (out + &t, true),
            }
        }
        (out + &m.flush(), false)
    }

    #[test]
    fn stop_across_deltas_is_never_emitted() {
        assert_eq!(run(&["END"], &["ab", "cE", "N", "Dxyz"]), ("abc".into(), true));
    }

    #[test]
    fn false_start_is_released() {
        assert_eq!(run(&["END"], &["aE", "Nb", "c"]), ("aENbc".into(), false));
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        assert_eq!(run(&["world", "lo"], &["hello world"]), ("hel".into(), true));
        let mut m = StopMatcher::new(vec!["world".into(), "lo".into()]);
        assert!(
            matches!(m.push("hello world"), StopScan::Stopped(_, s) if s == "lo"),
            "it says which stop matched"
        );
    }

    #[test]
    fn multibyte_text_is_kept_whole() {
        assert_eq!(run(&["é!"], &["caf", "é", "?"]), ("café?".into(), false));
    }
}
