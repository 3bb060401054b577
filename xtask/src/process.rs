//! Running child processes with errors that name the command.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

pub fn command(program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    cmd
}

/// Runs to completion; an error names the command and its exit status.
pub fn run(mut cmd: Command) -> Result<(), String> {
    let shown = describe(&cmd);
    eprintln!("xtask: $ {shown}");
    let status = cmd.status().map_err(|e| format!("could not start `{shown}`: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("`{shown}` failed ({status})")) }
}

/// Runs and returns stdout, or None if the program is missing or fails.
pub fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn describe(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// A child process that runs beside the caller's own steps, its output in a log file when given.
/// Dropped before it was waited for (a step failed), it is killed: no compiler is left running.
pub struct Background {
    /// None once waited for.
    child: Option<Child>,
    log: Option<PathBuf>,
    shown: String,
}

impl Background {
    pub fn start(mut cmd: Command, log: Option<&Path>) -> Result<Self, String> {
        let shown = describe(&cmd);
        if let Some(log) = log {
            let file = std::fs::File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
            let err = file.try_clone().map_err(|e| e.to_string())?;
            cmd.stdout(file).stderr(err);
        }
        eprintln!("xtask: $ {shown} &{}", log.map(|l| format!(" (log: {})", l.display())).unwrap_or_default());
        let child = cmd.spawn().map_err(|e| format!("could not start `{shown}`: {e}"))?;
        Ok(Background { child: Some(child), log: log.map(Path::to_path_buf), shown })
    }

    /// Waits for the process; a failure carries the last 60 lines of its log.
    pub fn wait(mut self) -> Result<(), String> {
        let mut child = self.child.take().ok_or("the process was already waited for")?;
        let status = child.wait().map_err(|e| e.to_string())?;
        if status.success() {
            return Ok(());
        }
        let tail = self
            .log
            .as_ref()
            .and_then(|log| std::fs::read_to_string(log).ok())
            .map(|text| {
                text.lines().rev().take(60).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
            })
            .unwrap_or_default();
        Err(format!("`{}` failed ({status})\n{tail}", self.shown))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
