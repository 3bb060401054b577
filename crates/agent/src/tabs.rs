//! The user's other tabs: those they attach to a message (their text goes with it, as those pages'
//! words), the open tabs the model may name (`read_tab`, `switch_tab`), and the tabs a task works
//! in. A tab is named by its number, the browser's tab id, which the worker checks at every call
//! (extension/src/worker/task-tabs.ts): the agent's record decides what asks, the worker's what runs.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::page::PageInfo;

/// An open tab, as the model may name it: its number and the page it shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct OpenTab {
    pub tab: u32,
    pub url: String,
    #[serde(default)]
    pub title: String,
}

/// A tab the user attached to their message: its readable text as passages (cited like the
/// page's own), or why it could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct AttachedTab {
    pub tab: u32,
    pub url: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub passages: Vec<String>,
    /// Set when the tab could not be read (closed, Hearth off on its site, not a web page): the
    /// model is told so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub unreadable: Option<String>,
}

/// The tabs that come with a request: the task's own, those the user attached, and the other
/// open tabs of the browser (the worker lists at most [`MAX_OPEN_TABS`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct RequestTabs {
    /// The task's own tab (where its chat lives).
    #[serde(default)]
    pub own: Option<u32>,
    #[serde(default)]
    pub attached: Vec<AttachedTab>,
    #[serde(default)]
    pub open: Vec<OpenTab>,
}

/// How many other open tabs the model is told of.
pub const MAX_OPEN_TABS: usize = 12;

/// Why the user is asked before a call on another tab, or why it is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TabAccess {
    /// A tab of the task: the user attached it, or the task opened it.
    OfTheTask(PageInfo),
    /// Open, but not the task's: reading it is the user's data of another site, so it asks.
    Other(PageInfo),
    /// The task's own tab.
    Own,
    /// No such tab is known to the task.
    Unknown,
}

/// What one task knows of tabs: reset with each new task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskTabs {
    own: Option<u32>,
    /// Attached by the user or opened by the task.
    of_task: BTreeSet<u32>,
    /// Every tab the task was told of, with its page.
    known: BTreeMap<u32, PageInfo>,
    /// The tab the page tools act in, when not the task's own (`switch_tab`).
    acting: Option<u32>,
}

impl TaskTabs {
    /// A new task's tabs.
    pub fn for_request(tabs: &RequestTabs) -> Self {
        let page = |url: &str, title: &str| PageInfo { url: url.to_owned(), title: title.to_owned() };
        let mut known: BTreeMap<u32, PageInfo> = tabs.open.iter().map(|t| (t.tab, page(&t.url, &t.title))).collect();
        known.extend(tabs.attached.iter().map(|t| (t.tab, page(&t.url, &t.title))));
        Self {
            own: tabs.own,
            of_task: tabs.attached.iter().filter(|t| t.unreadable.is_none()).map(|t| t.tab).collect(),
            known,
            acting: None,
        }
    }

    /// What the task may do with tab `tab`.
    pub fn access(&self, tab: u32) -> TabAccess {
        if Some(tab) == self.own {
            return TabAccess::Own;
        }
        match self.known.get(&tab) {
            Some(page) if self.of_task.contains(&tab) => TabAccess::OfTheTask(page.clone()),
            Some(page) => TabAccess::Other(page.clone()),
            None => TabAccess::Unknown,
        }
    }

    /// A tab the task opened (`open_tab`): it is the task's.
    pub fn opened(&mut self, tab: u32, page: PageInfo) {
        self.of_task.insert(tab);
        self.known.insert(tab, page);
    }

    /// The page tools act in `tab` from now on (the task's own tab: `None`).
    pub fn switch_to(&mut self, tab: u32) {
        self.acting = (Some(tab) != self.own).then_some(tab);
    }

    /// The tab the page tools act in, when it is not the task's own.
    pub fn acting(&self) -> Option<u32> {
        self.acting
    }

    /// The task's own tab, when the request named it.
    pub fn own(&self) -> Option<u32> {
        self.own
    }
}

/// `tab 812` from a line of the model's list of tabs; scripts name tabs by their title
/// (`{{tab:TITLE}}`, crate::scripted).
pub fn tab_number_in(line: &str) -> Option<u32> {
    let lower = line.to_lowercase();
    lower.match_indices("tab ").find_map(|(at, _)| {
        let digits: String = lower[at + 4..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tabs() -> TaskTabs {
        TaskTabs::for_request(&RequestTabs {
            own: Some(1),
            attached: vec![
                AttachedTab {
                    tab: 2,
                    url: "https://a.test/".into(),
                    title: "A".into(),
                    passages: vec!["x".into()],
                    unreadable: None,
                },
                AttachedTab {
                    tab: 5,
                    url: "https://off.test/".into(),
                    title: "Off".into(),
                    passages: vec![],
                    unreadable: Some("off".into()),
                },
            ],
            open: vec![OpenTab { tab: 3, url: "https://b.test/".into(), title: "B".into() }],
        })
    }

    #[test]
    fn attached_tabs_are_the_tasks_and_other_open_tabs_are_not() {
        let mut tabs = tabs();
        assert_eq!(tabs.access(1), TabAccess::Own);
        assert!(matches!(tabs.access(2), TabAccess::OfTheTask(p) if p.title == "A"));
        assert!(matches!(tabs.access(3), TabAccess::Other(p) if p.title == "B"));
        // An attached tab that could not be read was never the user's gift to the task.
        assert!(matches!(tabs.access(5), TabAccess::Other(_)));
        assert_eq!(tabs.access(9), TabAccess::Unknown);
        tabs.opened(9, PageInfo { url: "https://a.test/2".into(), title: "Two".into() });
        assert!(matches!(tabs.access(9), TabAccess::OfTheTask(_)));
    }

    #[test]
    fn switching_back_to_the_own_tab_acts_there_again() {
        let mut tabs = tabs();
        tabs.switch_to(2);
        assert_eq!(tabs.acting(), Some(2));
        tabs.switch_to(1);
        assert_eq!(tabs.acting(), None);
    }

    #[test]
    fn a_tab_number_is_read_from_its_line() {
        assert_eq!(tab_number_in("tab 812: Inbox — https://mail.test/"), Some(812));
        assert_eq!(tab_number_in("A tab the user attached (tab 7):"), Some(7));
        assert_eq!(tab_number_in("Tab 34: Mail — https://mail.test/"), Some(34));
        assert_eq!(tab_number_in("no number"), None);
    }
}
