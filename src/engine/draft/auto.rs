//! `auto` with an MTP head: n-gram lookup where the text repeats itself (editing, quoting: long
//! accepted runs for no compute), the head everywhere else.

use super::mtp::MtpDrafter;
use super::ngram::NgramDrafter;
use super::Drafter;

pub struct AutoDrafter {
    ngram: NgramDrafter,
    /// Fed every step, drafting or not, so its cache never falls behind the trunk's.
    mtp: MtpDrafter,
}

impl AutoDrafter {
    pub fn new(mtp: MtpDrafter) -> AutoDrafter {
        AutoDrafter { ngram: NgramDrafter, mtp }
    }
}

impl Drafter for AutoDrafter {
    fn name(&self) -> &'static str {
        "ngram+mtp"
    }

    fn needs_hidden(&self) -> bool {
        true
    }

    fn observe(&mut self, first: usize, hidden: &[f32], history: &[u32]) {
        self.mtp.observe(first, hidden, history);
    }

    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) {
        self.ngram.draft(history, max, out);
        if out.is_empty() {
            self.mtp.draft(history, max, out);
        }
    }
}
