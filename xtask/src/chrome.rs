//! Finding the browser `cargo xtask run` opens: Chromium, Chrome for Testing or Google Chrome, on
//! Linux, macOS and Windows. Branded Google Chrome 137 and later ignore `--load-extension` (the
//! extension would silently not load), so such a browser is refused at once, with what to do.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variables that name a browser, in order (`CHROMIUM` is the e2e suite's).
pub const ENV_VARS: [&str; 2] = ["HEARTH_CHROME", "CHROMIUM"];

/// The first Google Chrome that ignores `--load-extension`.
pub const FIRST_WITHOUT_LOAD_EXTENSION: u32 = 137;

/// A browser's product and version, from `--version` ("Google Chrome 138.0.7204.49") or its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserVersion {
    /// "Chromium", "Google Chrome", "Google Chrome for Testing", "Microsoft Edge"…
    pub product: String,
    /// The major version, when known.
    pub major: Option<u32>,
}

impl BrowserVersion {
    /// Google's own Chrome build (stable, beta, dev, canary), which from 137 on ignores
    /// `--load-extension`; Chrome for Testing and Chromium keep it.
    pub fn is_branded_chrome(&self) -> bool {
        self.product.starts_with("Google Chrome") && !self.product.contains("for Testing")
    }

    /// Whether this browser would ignore `--load-extension`.
    pub fn ignores_load_extension(&self) -> bool {
        self.is_branded_chrome() && self.major.is_some_and(|major| major >= FIRST_WITHOUT_LOAD_EXTENSION)
    }
}

/// Reads `--version` output: the product is the words before the first dotted version number.
/// "Chromium 156.0.7000.1 built on Debian GNU/Linux 12 (bookworm)" → Chromium 156.
pub fn parse_version(output: &str) -> Option<BrowserVersion> {
    let line = output.lines().map(str::trim).find(|l| !l.is_empty())?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| is_dotted_version(w))?;
    let product = words[..at].join(" ");
    if product.is_empty() {
        return None;
    }
    let major = words[at].split('.').next().and_then(|m| m.parse().ok());
    Some(BrowserVersion { product, major })
}

fn is_dotted_version(word: &str) -> bool {
    let parts: Vec<&str> = word.split('.').collect();
    parts.len() >= 2 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The product a path names, for a browser whose `--version` cannot be asked (Windows: it opens
/// a window instead of printing) or did not answer.
pub fn product_from_path(path: &Path) -> Option<&'static str> {
    let text = path.to_string_lossy().replace('\\', "/").to_lowercase();
    if text.contains("for testing") || text.contains("chrome-for-testing") || text.contains("chrome-linux64") {
        Some("Google Chrome for Testing")
    } else if text.contains("chromium") {
        Some("Chromium")
    } else if text.contains("google/chrome") || text.contains("google chrome") || text.contains("google-chrome") {
        Some("Google Chrome")
    } else if text.contains("edge") {
        Some("Microsoft Edge")
    } else {
        None
    }
}

/// The highest version among the names of a Windows install's `Application` folder, whose
/// subfolders are the installed versions ("138.0.7204.49").
pub fn major_from_version_dirs<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<u32> {
    names.into_iter().filter(|n| is_dotted_version(n)).filter_map(|n| n.split('.').next()?.parse().ok()).max()
}

/// A browser found on this machine.
#[derive(Debug, Clone)]
pub struct Browser {
    pub path: PathBuf,
    pub version: Option<BrowserVersion>,
    /// Named by an environment variable (not found by looking).
    pub chosen_by: Option<&'static str>,
}

/// Where browsers usually are, best first: Chromium and Chrome for Testing (which load unpacked
/// extensions from the command line) before Google Chrome. Names without a slash go through PATH.
pub fn candidates(os: &str, env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    match os {
        "macos" => {
            let home = env("HOME").unwrap_or_default();
            for app in [
                "Chromium.app/Contents/MacOS/Chromium",
                "Google Chrome for Testing.app/Contents/MacOS/Google Chrome for Testing",
                "Google Chrome.app/Contents/MacOS/Google Chrome",
                "Google Chrome Beta.app/Contents/MacOS/Google Chrome Beta",
                "Google Chrome Canary.app/Contents/MacOS/Google Chrome Canary",
            ] {
                out.push(Path::new("/Applications").join(app));
                if !home.is_empty() {
                    out.push(Path::new(&home).join("Applications").join(app));
                }
            }
        }
        "windows" => {
            let roots: Vec<String> =
                ["LOCALAPPDATA", "PROGRAMFILES", "PROGRAMFILES(X86)"].iter().filter_map(|v| env(v)).collect();
            for install in ["Chromium/Application", "Google/Chrome/Application", "Google/Chrome SxS/Application"] {
                for root in &roots {
                    out.push(Path::new(root).join(install).join("chrome.exe"));
                }
            }
        }
        _ => {
            for name in [
                "chromium",
                "chromium-browser",
                "google-chrome-for-testing",
                "google-chrome",
                "google-chrome-stable",
                "google-chrome-beta",
                "google-chrome-unstable",
            ] {
                out.push(PathBuf::from(name));
            }
            out.extend(["/snap/bin/chromium", "/opt/google/chrome/chrome"].map(PathBuf::from));
        }
    }
    out
}

/// Finds a browser: the one `HEARTH_CHROME` (or `CHROMIUM`) names, else the first of [`candidates`].
pub fn find() -> Result<Browser, String> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    for var in ENV_VARS {
        if let Some(value) = env(var) {
            let path = resolve(Path::new(&value)).ok_or_else(|| {
                format!("{var}={value}, but there is no such program: point it at a Chrome or Chromium")
            })?;
            let version = version_of(&path);
            return Ok(Browser { path, version, chosen_by: Some(var) });
        }
    }
    let found = candidates(std::env::consts::OS, &env).into_iter().find_map(|p| resolve(&p));
    let path = found.ok_or_else(|| {
        format!(
            "no Chrome or Chromium found. Install Chromium (Debian/Ubuntu: `sudo apt-get install chromium`; \
             macOS: `brew install --cask chromium`; Windows: https://www.chromium.org/getting-involved/download-chromium/), \
             or set HEARTH_CHROME to a browser's program.\n{}",
            load_by_hand()
        )
    })?;
    let version = version_of(&path);
    Ok(Browser { path, version, chosen_by: None })
}

/// A path to an existing program: as given when it has a directory part, else looked up in PATH.
fn resolve(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return program.is_file().then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    let exts: Vec<String> = if cfg!(windows) {
        std::env::var("PATHEXT").unwrap_or_else(|_| ".EXE".into()).split(';').map(str::to_lowercase).collect()
    } else {
        vec![String::new()]
    };
    std::env::split_paths(&path)
        .find_map(|dir| exts.iter().map(|ext| dir.join(format!("{}{ext}", program.display()))).find(|p| p.is_file()))
}

/// Asks the browser (`--version`; on Windows the install folder's version subfolders), falling
/// back on what its path says.
fn version_of(path: &Path) -> Option<BrowserVersion> {
    if !cfg!(windows) {
        let output = Command::new(path).arg("--version").output().ok();
        let text = output.filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        if let Some(version) = text.as_deref().and_then(parse_version) {
            return Some(version);
        }
    }
    let product = product_from_path(path)?;
    let dirs: Vec<String> = path
        .parent()
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    let major = major_from_version_dirs(dirs.iter().map(String::as_str));
    Some(BrowserVersion { product: product.into(), major })
}

/// The way that always works: Load unpacked in chrome://extensions.
pub fn load_by_hand() -> String {
    let dist = crate::root().join("dist/extension");
    format!(
        "Or load Hearth by hand: `cargo xtask build`, open chrome://extensions, turn on Developer mode, \
         click Load unpacked and choose {}.",
        dist.display()
    )
}

/// Refuses a browser that would not load the extension, saying what to do instead.
pub fn check(browser: &Browser) -> Result<(), String> {
    let Some(version) = &browser.version else { return Ok(()) };
    if !version.ignores_load_extension() {
        return Ok(());
    }
    let major = version.major.unwrap_or(FIRST_WITHOUT_LOAD_EXTENSION);
    let named = browser.chosen_by.map(|var| format!(" (from {var})")).unwrap_or_default();
    Err(format!(
        "{} is {} {major}{named}: Google Chrome {FIRST_WITHOUT_LOAD_EXTENSION} and later ignore --load-extension, \
         so `cargo xtask run` cannot load Hearth into it.\n\
         Install Chromium (Debian/Ubuntu: `sudo apt-get install chromium`; macOS: `brew install --cask chromium`; \
         Windows: https://www.chromium.org/getting-involved/download-chromium/) or Chrome for Testing \
         (`npx @puppeteer/browsers install chrome@stable`) and run again, with HEARTH_CHROME=<its program> \
         if it is not found by itself.\n{}",
        browser.path.display(),
        version.product,
        load_by_hand()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(product: &str, major: u32) -> Option<BrowserVersion> {
        Some(BrowserVersion { product: product.into(), major: Some(major) })
    }

    #[test]
    fn version_lines_of_each_browser_parse() {
        assert_eq!(parse_version("Google Chrome 138.0.7204.49 \n"), version("Google Chrome", 138));
        assert_eq!(parse_version("Google Chrome 139.0.7258.5 beta"), version("Google Chrome", 139));
        assert_eq!(
            parse_version("Chromium 156.0.7000.1 built on Debian GNU/Linux 12 (bookworm)"),
            version("Chromium", 156)
        );
        assert_eq!(parse_version("Chromium 120.0.6099.224 snap"), version("Chromium", 120));
        assert_eq!(parse_version("Google Chrome for Testing 137.0.7151.55"), version("Google Chrome for Testing", 137));
        assert_eq!(parse_version("Microsoft Edge 125.0.2535.51"), version("Microsoft Edge", 125));
        assert_eq!(parse_version("\n  Google Chrome 136.0.7103.113\n"), version("Google Chrome", 136));
        assert_eq!(parse_version(""), None);
        assert_eq!(parse_version("137.0.1"), None, "no product");
        assert_eq!(parse_version("Chromium"), None, "no version");
    }

    #[test]
    fn only_branded_chrome_from_137_on_is_refused() {
        let refused = |line: &str| parse_version(line).unwrap().ignores_load_extension();
        assert!(refused("Google Chrome 137.0.7151.55"));
        assert!(refused("Google Chrome 150.0.1.2 unstable"));
        assert!(!refused("Google Chrome 136.0.7103.113"));
        assert!(!refused("Google Chrome for Testing 140.0.7339.0"));
        assert!(!refused("Chromium 156.0.7000.1 built on Debian GNU/Linux 12 (bookworm)"));
        assert!(!refused("Microsoft Edge 140.0.1.1"));
        // A branded Chrome whose version is unknown is let through (with the usual retries).
        let unknown = BrowserVersion { product: "Google Chrome".into(), major: None };
        assert!(!unknown.ignores_load_extension());
    }

    #[test]
    fn paths_name_their_browser() {
        let product = |p: &str| product_from_path(Path::new(p));
        assert_eq!(product(r"C:\Program Files\Google\Chrome\Application\chrome.exe"), Some("Google Chrome"));
        assert_eq!(
            product(r"C:\Users\a\AppData\Local\Google\Chrome SxS\Application\chrome.exe"),
            Some("Google Chrome")
        );
        assert_eq!(product(r"C:\Users\a\AppData\Local\Chromium\Application\chrome.exe"), Some("Chromium"));
        assert_eq!(product("/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"), Some("Google Chrome"));
        assert_eq!(
            product("/Applications/Google Chrome for Testing.app/Contents/MacOS/Google Chrome for Testing"),
            Some("Google Chrome for Testing")
        );
        assert_eq!(product("/usr/bin/google-chrome-stable"), Some("Google Chrome"));
        assert_eq!(product("/usr/bin/chromium"), Some("Chromium"));
        assert_eq!(product("/usr/local/bin/mybrowser"), None);
    }

    #[test]
    fn windows_versions_come_from_the_install_folder() {
        let names = ["138.0.7204.49", "137.0.7151.120", "chrome.exe", "SetupMetrics", "chrome_proxy.exe"];
        assert_eq!(major_from_version_dirs(names), Some(138));
        assert_eq!(major_from_version_dirs(["chrome.exe"]), None);
    }

    #[test]
    fn chromium_comes_before_google_chrome_everywhere() {
        let env = |name: &str| match name {
            "HOME" => Some("/Users/a".to_string()),
            "LOCALAPPDATA" => Some(r"C:\Users\a\AppData\Local".to_string()),
            "PROGRAMFILES" => Some(r"C:\Program Files".to_string()),
            _ => None,
        };
        for os in ["linux", "macos", "windows"] {
            let list = candidates(os, &env);
            let first = |product: &str| list.iter().position(|p| product_from_path(p) == Some(product));
            let (chromium, chrome) = (first("Chromium"), first("Google Chrome"));
            assert!(chromium.is_some() && chrome.is_some(), "{os}: {list:?}");
            assert!(chromium < chrome, "{os}: Chromium first: {list:?}");
        }
        assert!(candidates("windows", &env).iter().all(|p| p.to_string_lossy().ends_with("chrome.exe")));
    }

    #[test]
    fn the_refusal_says_what_to_do() {
        let browser = Browser {
            path: PathBuf::from("/usr/bin/google-chrome"),
            version: version("Google Chrome", 138),
            chosen_by: None,
        };
        let message = check(&browser).unwrap_err();
        for needed in [
            "Google Chrome 138",
            "--load-extension",
            "Chromium",
            "chrome://extensions",
            "Load unpacked",
            "dist/extension",
        ] {
            assert!(message.contains(needed), "{needed:?} in {message}");
        }
        let chromium = Browser { version: version("Chromium", 156), ..browser.clone() };
        assert!(check(&chromium).is_ok());
        assert!(check(&Browser { version: None, ..browser }).is_ok());
    }
}
