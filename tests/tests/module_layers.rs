//! Every crate's modules form layers: no module reaches, through `crate::`
//! paths, back to a module that depends on it. Checked on the sources (the
//! files directly in each crate's `src/`; a directory module counts as one
//! module), so a new cycle fails here with the crate and the modules named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates checked, by source folder from the workspace root.
const CRATES: &[&str] = &[
    "loadgen-node/engine/src",
    "loadgen-node/cli/src",
    "qdl/src",
    "sut-node/src",
    "proto/src",
    "compression/src",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package sits in the workspace")
        .to_path_buf()
}

/// Module name -> the modules its source names through `crate::`.
fn dependencies(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut deps = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("src/") {
        let path = entry.expect("entry").path();
        let (name, text) = if path.is_dir() {
            let Some(name) = path.file_name().and_then(|s| s.to_str()) else {
                continue;
            };
            // A directory module: all its files, as one module.
            let mut text = String::new();
            for file in std::fs::read_dir(&path).expect("module folder") {
                let file = file.expect("entry").path();
                if file.extension().is_some_and(|e| e == "rs") {
                    text += &std::fs::read_to_string(&file).expect("readable source");
                }
            }
            (name.to_string(), text)
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            if name == "lib" || name == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("readable source");
            (name.to_string(), text)
        } else {
            continue;
        };
        let mut used = BTreeSet::new();
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            let module: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !module.is_empty() && module != name {
                used.insert(module);
            }
        }
        deps.insert(name, used);
    }
    deps
}

/// A cycle through `start`, if there is one (depth-first search).
fn cycle_from(
    deps: &BTreeMap<String, BTreeSet<String>>,
    path: &mut Vec<String>,
    start: &str,
) -> Option<Vec<String>> {
    let last = path.last().cloned().unwrap_or_default();
    for next in deps.get(&last).into_iter().flatten() {
        if next == start {
            let mut cycle = path.clone();
            cycle.push(start.to_string());
            return Some(cycle);
        }
        if path.contains(next) || !deps.contains_key(next) {
            continue;
        }
        path.push(next.clone());
        if let Some(c) = cycle_from(deps, path, start) {
            return Some(c);
        }
        path.pop();
    }
    None
}

#[test]
fn no_module_depends_on_itself_through_others() {
    let root = workspace();
    let mut cycles = Vec::new();
    for krate in CRATES {
        let deps = dependencies(&root.join(krate));
        assert!(deps.len() >= 2, "{krate}: modules found: {:?}", deps.keys());
        for start in deps.keys() {
            let mut path = vec![start.clone()];
            if let Some(cycle) = cycle_from(&deps, &mut path, start) {
                cycles.push(format!("{krate}: {}", cycle.join(" -> ")));
                break;
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_check_finds_a_cycle() {
    let dir = std::env::temp_dir().join(format!("module-layers-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("c")).expect("scratch");
    std::fs::write(dir.join("a.rs"), "use crate::b::X;").expect("write");
    std::fs::write(dir.join("b.rs"), "use crate::c::Y;").expect("write");
    std::fs::write(dir.join("c").join("mod.rs"), "use crate::a::Z;").expect("write");
    let deps = dependencies(&dir);
    let mut path = vec!["a".to_string()];
    let cycle = cycle_from(&deps, &mut path, "a");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        cycle,
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
