//! The tree's shape, checked: inside every crate, the top-level modules depend on each other
//! without cycles (a module's `crate::…` paths in code; doc comments and test modules left out),
//! so each crate reads bottom-up; and only the engine loads a model (no other crate's code or
//! tests names the model crate's load entry points). Run with the workspace's tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module → the crate's other top-level modules its code names.
type ModuleGraph = BTreeMap<String, BTreeSet<String>>;

/// The module graph of the crate whose sources are in `src`.
fn module_graph(src: &Path) -> Result<ModuleGraph, String> {
    let mut graph = ModuleGraph::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).map_err(|e| e.to_string())?;
            let Some(first) = relative.components().next() else { continue };
            let top = first.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned();
            if top == "lib" || top == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let named = graph.entry(top.clone()).or_default();
            for module in crate_paths(&code_of(&text)) {
                if module != top {
                    named.insert(module);
                }
            }
        }
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for named in graph.values_mut() {
        named.retain(|m| modules.contains(m));
    }
    Ok(graph)
}

/// A file's code: comments dropped, and everything from its test module on.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines().map(|line| line.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// The first segment of every `crate::` path in `code`, `crate::{a, b::c}` groups included.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Items at depth 0 of the group, up to its closing brace.
            let (mut depth, mut item) = (0, String::new());
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.insert(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            found.insert(first_segment(&item));
        } else {
            found.insert(first_segment(rest));
        }
    }
    found.retain(|m| !m.is_empty() && m != "self");
    found
}

fn first_segment(path: &str) -> String {
    path.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

/// The model crate's entry points that build a model (or part of one) from its files.
const LOAD_ENTRY_POINTS: &[&str] = &[
    "model_dir::",
    "Gemma::load",
    "GemmaLoader",
    "VisionTower::load",
    "AudioTower::load",
    "Drafter::load",
    "drafter::load_dir",
];

/// The crates that may name them: the engine (`crates/engine/src/loading/`, the one door:
/// `hearth_engine::Engine`), and the model crate itself with its own tests.
const LOADERS: &[&str] = &["engine", "model"];

/// Files outside the loaders that still load a model themselves, each with why; the list may only
/// shrink (a file here that no longer loads one fails the check).
const NOT_YET: &[(&str, &str)] = &[
    ("cli/src/bench.rs", "the benchmark's random checkpoints and step timings (the bench's owner moves it)"),
    ("cli/src/bench/audio.rs", "the audio tower's benchmark, random weights in memory (the bench's owner moves it)"),
    (
        "cli/src/bench/speculative.rs",
        "the assistant's benchmark, random weights in memory (the bench's owner moves it)",
    ),
    ("cli/src/bench/vision.rs", "the vision tower's benchmark, random weights in memory (the bench's owner moves it)"),
    ("cli/src/long_task/mod.rs", "`hearth bench --long-task` (the bench's owner moves it)"),
];

/// A file's code with its comments dropped (its tests kept).
fn without_comments(text: &str) -> String {
    text.lines().map(|line| line.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// The load entry points `code` names.
fn model_loads(code: &str) -> Vec<&'static str> {
    LOAD_ENTRY_POINTS.iter().copied().filter(|entry| code.contains(entry)).collect()
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The files under `crates` (a crate per folder) outside [`LOADERS`] that name a load entry
/// point, as `crate/path: entry points`.
fn loads_outside_the_engine(crates: &Path) -> Vec<(String, Vec<&'static str>)> {
    let mut found = Vec::new();
    for file in rust_files(crates) {
        let Ok(relative) = file.strip_prefix(crates) else { continue };
        let relative = relative.to_string_lossy().replace('\\', "/");
        if LOADERS.iter().any(|loader| relative.starts_with(&format!("{loader}/"))) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        let loads = model_loads(&without_comments(&text));
        if !loads.is_empty() {
            found.push((relative, loads));
        }
    }
    found
}

/// The graph's cycles: its strongly connected components of more than one module.
fn cycles(graph: &ModuleGraph) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g ModuleGraph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_crate_has_a_cycle_among_its_modules() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
        let mut problems = Vec::new();
        let mut checked = 0;
        for entry in std::fs::read_dir(&crates).expect("crates/").flatten() {
            let src = entry.path().join("src");
            if !src.is_dir() {
                continue;
            }
            let graph = module_graph(&src).expect("sources read");
            checked += graph.len();
            for cycle in cycles(&graph) {
                problems.push(format!("{}: {}", entry.file_name().to_string_lossy(), cycle.join(" ↔ ")));
            }
        }
        assert!(checked > 50, "only {checked} modules found");
        assert!(problems.is_empty(), "modules that depend on each other:\n{}", problems.join("\n"));
    }

    #[test]
    fn only_the_engine_loads_a_model() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
        let found = loads_outside_the_engine(&crates);
        let problems: Vec<String> = found
            .iter()
            .filter(|(file, _)| !NOT_YET.iter().any(|(pending, _)| pending == file))
            .map(|(file, loads)| format!("crates/{file}: {}", loads.join(", ")))
            .collect();
        assert!(
            problems.is_empty(),
            "only crates/engine loads a model (hearth_engine::Engine::load, hearth_engine::native): \n{}",
            problems.join("\n")
        );
        for (pending, why) in NOT_YET {
            assert!(
                found.iter().any(|(file, _)| file == pending),
                "crates/{pending} ({why}) no longer loads a model itself: take it off NOT_YET"
            );
        }
    }

    #[test]
    fn the_load_check_catches_a_crate_that_loads_a_model_itself() {
        let crates = std::env::temp_dir().join(format!("hearth-architecture-{}", std::process::id()));
        let write = |path: &str, text: &str| {
            let path = crates.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("engine/src/native.rs", "fn f() { hearth_model::model_dir::load_model(p, d) }");
        write("model/tests/parity.rs", "let m = Gemma::load(config, &mut checkpoint, &device);");
        write(
            "cli/src/main.rs",
            "use hearth_model::model_dir::{ModelFiles, load_model};\nlet t = VisionTower::load(c, k, d);",
        );
        write("offscreen/src/lib.rs", "// Gemma::load in a comment\nlet e = hearth_engine::Engine::load(p, d, h, f);");
        write("agent/tests/steps.rs", "let d = hearth_model::drafter::load_dir(dir, &config, &device);");
        let found = loads_outside_the_engine(&crates);
        std::fs::remove_dir_all(&crates).unwrap();
        assert_eq!(
            found,
            vec![
                ("agent/tests/steps.rs".to_owned(), vec!["drafter::load_dir"]),
                ("cli/src/main.rs".to_owned(), vec!["model_dir::", "VisionTower::load"]),
            ]
        );
    }

    #[test]
    fn the_check_finds_a_cycle_and_reads_grouped_paths() {
        let code = code_of(
            "use crate::{a::X, b::{Y, Z}};\n// crate::c in a comment\nfn f() { crate::d::g() }\n#[cfg(test)]\nuse crate::e;",
        );
        assert_eq!(crate_paths(&code), ["a", "b", "d"].map(String::from).into_iter().collect());
        let mut graph = ModuleGraph::new();
        graph.insert("a".into(), ["b".to_owned()].into());
        graph.insert("b".into(), ["c".to_owned()].into());
        graph.insert("c".into(), ["a".to_owned()].into());
        graph.insert("d".into(), ["a".to_owned()].into());
        assert_eq!(cycles(&graph), vec![vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]]);
    }
}
