//! The engine's modules form layers: no module reaches, through `crate::`
//! paths, back to a module that depends on it. Checked on the sources, so a
//! new cycle fails here with the modules named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name -> the modules its source names through `crate::`.
fn dependencies(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut deps = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("src/") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        if name == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source");
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
    let deps = dependencies(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(deps.len() > 10, "modules found: {:?}", deps.keys());
    for start in deps.keys() {
        let mut path = vec![start.clone()];
        if let Some(cycle) = cycle_from(&deps, &mut path, start) {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
}
