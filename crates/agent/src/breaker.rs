//! Stops a task that keeps failing, before it burns the step limit: a small model repeats the
//! same failing click, or fails one action after another. The task pauses with the reason; the
//! user can Continue (which resets the count) or steer it.

use crate::events::PauseReason;

/// Counts failures in a row: of one action on one target, and of any action.
#[derive(Debug, Clone)]
pub struct FailureBreaker {
    /// Failures in a row of the same action on the same target that pause the task.
    pub same_limit: usize,
    /// Failed actions in a row that pause the task.
    pub any_limit: usize,
    /// The last action (tool, target) and how many times in a row it failed.
    same: Option<(String, String, usize)>,
    any: usize,
}

impl FailureBreaker {
    pub fn new(same_limit: usize, any_limit: usize) -> Self {
        Self { same_limit, any_limit, same: None, any: 0 }
    }

    /// Records one action's result: `tool` on `target` (its description, or its arguments), and
    /// whether it failed (an error, or nothing changed).
    pub fn record(&mut self, tool: &str, target: &str, failed: bool) {
        if !failed {
            self.reset();
            return;
        }
        self.any += 1;
        match &mut self.same {
            Some((t, g, times)) if t == tool && g == target => *times += 1,
            _ => self.same = Some((tool.to_owned(), target.to_owned(), 1)),
        }
    }

    /// Why the task should pause now, if it should.
    pub fn tripped(&self) -> Option<PauseReason> {
        match &self.same {
            Some((name, target, times)) if *times >= self.same_limit.max(1) => {
                Some(PauseReason::SameFailure { name: name.clone(), target: target.clone(), times: *times })
            }
            _ if self.any >= self.any_limit.max(1) => Some(PauseReason::Failures { times: self.any }),
            _ => None,
        }
    }

    /// Starts counting again (a new task, or the user continued).
    pub fn reset(&mut self) {
        self.same = None;
        self.any = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_failing_action_trips_at_its_limit() {
        let mut b = FailureBreaker::new(3, 5);
        b.record("click", "the button “Save”", true);
        b.record("click", "the button “Save”", true);
        assert_eq!(b.tripped(), None);
        b.record("click", "the button “Save”", true);
        assert_eq!(
            b.tripped(),
            Some(PauseReason::SameFailure { name: "click".into(), target: "the button “Save”".into(), times: 3 })
        );
    }

    #[test]
    fn different_failures_trip_at_the_other_limit_and_a_success_resets() {
        let mut b = FailureBreaker::new(3, 5);
        for i in 0..4 {
            b.record("click", &format!("element {i}"), true);
        }
        assert_eq!(b.tripped(), None);
        b.record("type", "the field", false);
        for i in 0..4 {
            b.record("click", &format!("element {i}"), true);
        }
        assert_eq!(b.tripped(), None, "the success in between started the count again");
        b.record("scroll", "down", true);
        assert_eq!(b.tripped(), Some(PauseReason::Failures { times: 5 }));
        b.reset();
        assert_eq!(b.tripped(), None);
    }

    #[test]
    fn another_target_starts_the_same_count_again() {
        let mut b = FailureBreaker::new(3, 5);
        b.record("click", "a", true);
        b.record("click", "a", true);
        b.record("click", "b", true);
        assert_eq!(b.tripped(), None);
    }
}
