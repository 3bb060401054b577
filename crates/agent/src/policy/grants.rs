//! The user's decisions, and what "Allow for this task" covers: exactly what the card showed.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::{Assessment, RiskReason};

/// The user's answer to a confirmation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Deny,
    AllowOnce,
    /// Allow this kind of action until the task ends: the same tool, for the same reasons, on
    /// the same site (and for `run_javascript`, the same script). Kept in memory only, never
    /// persisted.
    AllowForTask,
}

/// What one grant covers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    tool: String,
    reason: RiskReason,
    /// The site of the page the action ran on.
    site: String,
    /// For scripts: the exact code the card showed.
    script: Option<String>,
}

/// Where a granted action runs, and what it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantScope {
    /// The site of the page (registrable domain); empty when unknown.
    pub site: String,
    /// The script of a `run_javascript` call.
    pub script: Option<String>,
}

/// Grants given with [`Decision::AllowForTask`] during one task.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    granted: BTreeSet<Grant>,
}

impl Grants {
    pub fn grant(&mut self, tool: &str, assessment: &Assessment, scope: &GrantScope) {
        for reason in &assessment.reasons {
            self.granted.insert(Self::key(tool, reason, scope));
        }
    }

    /// Whether every reason of `assessment` was already allowed for this tool, site and script.
    pub fn covers(&self, tool: &str, assessment: &Assessment, scope: &GrantScope) -> bool {
        // Nothing is granted on a page whose site is unknown, nor for a tool that asks every time.
        !scope.site.is_empty()
            && !assessment.reasons.contains(&RiskReason::UserAsksEveryTime)
            && assessment.reasons.iter().all(|r| self.granted.contains(&Self::key(tool, r, scope)))
    }

    pub fn clear(&mut self) {
        self.granted.clear();
    }

    fn key(tool: &str, reason: &RiskReason, scope: &GrantScope) -> Grant {
        Grant { tool: tool.to_owned(), reason: reason.clone(), site: scope.site.clone(), script: scope.script.clone() }
    }
}
