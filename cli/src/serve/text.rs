//! From token ids to the text a client sees: incremental detokenization, then `stop`
//! strings matched on the decoded text across token boundaries. Text that could be the
//! start of a stop string is held back until the next tokens settle it, so a stop string
//! is never sent, not even in part.

use anyhow::Result;

use crate::tokenizer::{Detokenizer, Tokenizer};

/// What a token added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Text to send now (may be empty).
    pub text: String,
    /// A stop string was reached: the reply ends here.
    pub stopped: bool,
}

/// The stop-string matcher on its own (no tokenizer).
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    /// Matches `stops` (non-empty strings).
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher {
            stops,
            held: String::new(),
        }
    }

    /// Adds decoded `text`.
    pub fn push(&mut self, text: &str) -> Piece {
        self.held.push_str(text);
        // Sent text never ends in the start of a stop string, so a match lies in `held`.
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s)).min() {
            let text = self.held[..at].to_owned();
            self.held.clear();
            return Piece {
                text,
                stopped: true,
            };
        }
        let keep = self
            .stops
            .iter()
            .map(|s| partial_suffix(&self.held, s))
            .max()
            .unwrap_or(0);
        let text = self.held[..self.held.len() - keep].to_owned();
        self.held.drain(..self.held.len() - keep);
        Piece {
            text,
            stopped: false,
        }
    }

    /// What is still held back, at the end of the reply.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `stop`.
fn partial_suffix(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&k| {
            stop.is_char_boundary(k)
                && text.is_char_boundary(text.len() - k)
                && text.ends_with(&stop[..k])
        })
        .unwrap_or(0)
}

/// A reply being written: tokens in, text out.
pub struct Reply<'a> {
    detok: Detokenizer<'a>,
    stops: StopMatcher,
    /// Tokens received.
    pub tokens: usize,
}

impl<'a> Reply<'a> {
    /// An empty reply that ends at any of `stops`.
    pub fn new(tokenizer: &'a Tokenizer, stops: Vec<String>) -> Self {
        Reply {
            detok: Detokenizer::new(tokenizer),
            stops: StopMatcher::new(stops),
            tokens: 0,
        }
    }

    /// Adds a generated token.
    pub fn push(&mut self, id: u32) -> Result<Piece> {
        self.tokens += 1;
        let text = self.detok.push(id)?;
        Ok(self.stops.push(&text))
    }

    /// The rest, once the engine has finished: text the detokenizer held back, then what
    /// the stop matcher held. `stopped` when a stop string turned up in it.
    pub fn finish(&mut self) -> Result<Piece> {
        let rest = self.detok.finish()?;
        let mut piece = self.stops.push(&rest);
        if !piece.stopped {
            piece.text.push_str(&self.stops.finish());
        }
        Ok(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `parts` and returns what was sent and whether it stopped.
    fn feed(stops: &[&str], parts: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| (*s).to_owned()).collect());
        let mut sent = String::new();
        for p in parts {
            let piece = m.push(p);
            // Nothing sent may contain a stop string or end in the start of one.
            for s in stops {
                assert!(!piece.text.contains(s), "{piece:?}");
            }
            sent.push_str(&piece.text);
            if piece.stopped {
                return (sent, true);
            }
        }
        sent.push_str(&m.finish());
        (sent, false)
    }

    #[test]
    fn a_stop_string_split_across_tokens_ends_the_reply_before_it() {
        assert_eq!(
            feed(&["END"], &["ab", "cE", "N", "Dxyz"]),
            ("abc".into(), true)
        );
        assert_eq!(feed(&["END"], &["abEND"]), ("ab".into(), true));
    }

    #[test]
    fn held_text_that_turns_out_not_to_stop_is_sent() {
        assert_eq!(feed(&["END"], &["aE", "Nb"]), ("aENb".into(), false));
        assert_eq!(feed(&["END"], &["aEN"]), ("aEN".into(), false));
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        assert_eq!(feed(&["cd", "b"], &["abcd"]), ("a".into(), true));
        assert_eq!(feed(&["xyz", "yz!"], &["wxy", "z!"]), ("w".into(), true));
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        assert_eq!(feed(&["é!"], &["aé", "é", "!"]), ("aé".into(), true));
        assert_eq!(feed(&["日本"], &["x日", "y"]), ("x日y".into(), false));
    }

    #[test]
    fn no_stops_sends_everything_at_once() {
        let mut m = StopMatcher::new(Vec::new());
        assert_eq!(m.push("abc").text, "abc");
        assert_eq!(m.finish(), "");
    }
}
