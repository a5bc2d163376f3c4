//! Every crate's modules form layers: no module reaches back to a module that
//! depends on it. Checked on the sources, level by level of each crate's
//! module tree (from `lib.rs` and `main.rs`, following `mod` declarations):
//! at each level the parent's own file and each child module (with
//! everything below it) are the nodes, and an edge is a path that names a
//! sibling:
//!
//! - from a child: `crate::a` (or `crate::parent::a` below the top) and
//!   `super::a`, grouped imports (`use crate::{a::X, b}`) included; a name
//!   the parent re-exports (`pub use a::X`) counts as `a`, any other name
//!   as the parent;
//! - from the parent's own file: `a::`, `self::a::` or `crate::a`, outside
//!   `mod` declarations and re-exports (those only pass names through).
//!
//! Comments are skipped. A new cycle fails here with the crate, the level
//! and the modules named.
//!
//! The same module trees are checked against docs/architecture.md, the map
//! of the code: every module of a product crate's root is named in a table
//! row of that crate's section, and where a table lists modules "from the
//! top layer down", no module uses one listed above it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crate roots of the workspace: each member's `src/lib.rs` and
/// `src/main.rs`, or the `path` its manifest gives them, from the workspace
/// root. The second value says whether the crate is the product's (mapped
/// in docs/architecture.md) rather than the tests' own.
fn roots() -> Vec<(String, bool)> {
    let root = workspace();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("the workspace's members");
    let mut roots = Vec::new();
    for member in members.split(',').map(|m| m.trim().trim_matches('"')) {
        if member.is_empty() {
            continue;
        }
        let product = member != "tests" && !member.starts_with("tests/");
        let own = std::fs::read_to_string(root.join(member).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("{member}/Cargo.toml: {e}"));
        // `[lib] path = "..."` (the tests crate); otherwise the defaults.
        let lib = own
            .split_once("[lib]")
            .and_then(|(_, rest)| rest.lines().find_map(|l| l.trim().strip_prefix("path = ")))
            .map(|p| p.trim_matches('"').to_string())
            .unwrap_or_else(|| "src/lib.rs".into());
        for file in [lib.as_str(), "src/main.rs"] {
            if root.join(member).join(file).exists() {
                roots.push((format!("{member}/{file}"), product));
            }
        }
    }
    assert!(roots.len() >= 12, "too few crate roots found: {roots:?}");
    roots
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package sits in the workspace")
        .to_path_buf()
}

/// One module: its file's code (comments removed) and its child modules.
struct Module {
    code: String,
    children: Vec<(String, Module)>,
}

impl Module {
    /// Loads the module in `file` and, recursively, the modules it declares.
    fn load(file: &Path) -> Module {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let code = without_comments(&text);
        // `lib.rs`, `main.rs` and `mod.rs` own their folder; `a.rs` owns `a/`.
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let here = file.parent().expect("a source file has a folder");
        let dir = if matches!(stem, "lib" | "main" | "mod") {
            here.to_path_buf()
        } else {
            here.join(stem)
        };
        let mut children = Vec::new();
        let mut path_attr = None;
        for line in code.lines().map(str::trim) {
            if let Some(p) = line.strip_prefix("#[path = \"") {
                path_attr = p.strip_suffix("\"]").map(|p| here.join(p));
                continue;
            }
            if let Some(name) = module_declared(line) {
                let file = path_attr.take().unwrap_or_else(|| {
                    let flat = dir.join(format!("{name}.rs"));
                    if flat.exists() {
                        flat
                    } else {
                        dir.join(name).join("mod.rs")
                    }
                });
                children.push((name.to_string(), Module::load(&file)));
            } else if !line.starts_with("#[") {
                path_attr = None;
            }
        }
        Module { code, children }
    }

    /// This module's code and all its descendants'.
    fn all_code(&self) -> String {
        let mut all = self.code.clone();
        for (_, child) in &self.children {
            all += "\n";
            all += &child.all_code();
        }
        all
    }
}

/// `name` if `line` declares a module in its own file (`pub mod name;`).
fn module_declared(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("pub").map_or(line, |r| {
        let r = r.trim_start();
        match r.strip_prefix('(') {
            Some(r) => r.split_once(')').map_or(r, |(_, r)| r),
            None => r,
        }
    });
    let name = rest.trim_start().strip_prefix("mod ")?.strip_suffix(';')?;
    name.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
        .then_some(name)
}

/// `text` without `//` comments (whole lines, and the rest of a line after
/// ` //`), so that a doc link is not an import.
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.trim_start().starts_with("//") {
            out.push('\n');
            continue;
        }
        out += line.split_once(" //").map_or(line, |(code, _)| code);
        out.push('\n');
    }
    out
}

/// `code` without the bodies of inline modules (`mod tests { ... }`), where
/// `super::` names the file's own module rather than its parent.
fn outside_inline_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut depth: isize = 0;
    for line in code.lines() {
        let trimmed = line.trim();
        let opens = trimmed.ends_with('{') && trimmed.split_whitespace().any(|w| w == "mod");
        if depth == 0 && !opens {
            out += line;
            out.push('\n');
            continue;
        }
        depth = (depth + braces(line)).max(0);
    }
    out
}

/// `{` minus `}` on `line`, outside string and character literals.
fn braces(line: &str) -> isize {
    let mut count = 0;
    let mut in_string = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if in_string => {
                chars.next();
            }
            '"' => in_string = !in_string,
            '\'' if !in_string => {
                // A character literal: skip it whole ('{', '\'', '\n').
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with('\\') {
                    chars.nth(2);
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.nth(1);
                }
            }
            '{' if !in_string => count += 1,
            '}' if !in_string => count -= 1,
            _ => {}
        }
    }
    count
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first path segment of each path that starts right after `prefix`:
/// `a` for `prefix a::X`, and `a`, `b` for `prefix {a::X, b}`.
fn first_segments(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices(prefix) {
        // `prefix` must start a path (not end some longer identifier).
        let before = code[..i].chars().next_back();
        if prefix.starts_with(is_ident) && before.is_some_and(|c| is_ident(c) || c == ':') {
            continue;
        }
        let rest = &code[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        item_start = false;
                        let name: String =
                            group[j..].chars().take_while(|&c| is_ident(c)).collect();
                        if !name.is_empty() {
                            found.insert(name);
                        }
                    }
                    _ => {}
                }
            }
        } else if rest.starts_with('*') {
            // A glob takes names from the parent's own file.
            found.insert("*".to_string());
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found.remove("self");
    found
}

/// The parent's own code without its `mod` declarations and re-exports, and
/// the names it re-exports: name -> the child it comes from (`None` for
/// another crate's).
fn split_reexports(
    code: &str,
    children: &BTreeSet<String>,
) -> (String, BTreeMap<String, Option<String>>) {
    let mut rest = String::new();
    let mut reexports = BTreeMap::new();
    let mut statement: Option<String> = None;
    for line in code.lines() {
        let trimmed = line.trim_start();
        if statement.is_none() && trimmed.starts_with("pub") && trimmed.contains(" use ") {
            statement = Some(String::new());
        }
        if let Some(s) = statement.as_mut() {
            *s += line;
            *s += "\n";
            if line.contains(';') {
                let s = statement.take().unwrap_or_default();
                let path = s.split_once(" use ").map_or("", |(_, p)| p).trim();
                let first: String = path.chars().take_while(|&c| is_ident(c)).collect();
                let from = children.contains(&first).then_some(first);
                for leaf in reexported_names(path) {
                    reexports.insert(leaf, from.clone());
                }
            }
            continue;
        }
        if module_declared(trimmed).is_none() {
            rest += line;
            rest.push('\n');
        }
    }
    (rest, reexports)
}

/// The names a `use` path brings in: each path's last identifier, or its
/// `as` alias.
fn reexported_names(path: &str) -> Vec<String> {
    let spaced: String = path
        .chars()
        .flat_map(|c| match c {
            ',' | '{' | '}' | ';' => vec![' ', c, ' '],
            ':' => vec![' '],
            c => vec![c],
        })
        .collect();
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut names = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let next = tokens.get(i + 1).copied().unwrap_or(";");
        let last = matches!(next, "," | "}" | ";");
        if t.chars().all(is_ident) && *t != "self" && last {
            names.push(t.to_string());
        }
    }
    names
}

/// Whether `code` has a path that starts with `word::`.
fn starts_path(code: &str, word: &str) -> bool {
    let pattern = format!("{word}::");
    code.match_indices(&pattern).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        !before.is_some_and(|c| is_ident(c) || c == ':')
    })
}

/// The dependencies between the nodes of one level: the parent's own file
/// (named `parent`) and its children. `absolute` is the level's path from
/// the crate root (`crate::` at the top, `crate::backend::` below it).
fn level(parent: &Module, absolute: &str) -> BTreeMap<String, BTreeSet<String>> {
    const PARENT: &str = "(parent)";
    let names: BTreeSet<String> = parent.children.iter().map(|(n, _)| n.clone()).collect();
    let (own, reexports) = split_reexports(&parent.code, &names);
    let resolve = |name: &str| -> Option<String> {
        if names.contains(name) {
            return Some(name.to_string());
        }
        match reexports.get(name) {
            Some(from) => from.clone(),
            None => Some(PARENT.to_string()),
        }
    };
    let mut deps = BTreeMap::new();
    let mut from_parent: BTreeSet<String> = first_segments(&own, absolute)
        .into_iter()
        .chain(first_segments(&own, "self::"))
        .filter(|n| names.contains(n))
        .collect();
    from_parent.extend(names.iter().filter(|n| starts_path(&own, n)).cloned());
    deps.insert(PARENT.to_string(), from_parent);
    for (name, child) in &parent.children {
        let mut used: BTreeSet<String> = first_segments(&child.all_code(), absolute)
            .into_iter()
            .chain(first_segments(
                &outside_inline_modules(&child.code),
                "super::",
            ))
            .filter_map(|n| resolve(&n))
            .collect();
        used.remove(name);
        deps.insert(name.clone(), used);
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

/// The first cycle of every level of `module`'s tree, as `level: a -> b -> a`.
fn cycles(module: &Module, absolute: &str, out: &mut Vec<String>) {
    if module.children.is_empty() {
        return;
    }
    let deps = level(module, absolute);
    for start in deps.keys() {
        let mut path = vec![start.clone()];
        if let Some(cycle) = cycle_from(&deps, &mut path, start) {
            out.push(format!("{absolute} {}", cycle.join(" -> ")));
            break;
        }
    }
    for (name, child) in &module.children {
        cycles(child, &format!("{absolute}{name}::"), out);
    }
}

#[test]
fn no_module_depends_on_itself_through_others() {
    let root = workspace();
    let mut found = Vec::new();
    for (file, _) in roots() {
        let module = Module::load(&root.join(&file));
        let mut here = Vec::new();
        cycles(&module, "crate::", &mut here);
        found.extend(here.into_iter().map(|c| format!("{file}: {c}")));
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

/// The sections of a Markdown text: each `## ` heading and the lines up to
/// the next one.
fn sections(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            out.push((h.to_string(), Vec::new()));
        } else if let Some((_, lines)) = out.last_mut() {
            lines.push(line.to_string());
        }
    }
    out
}

/// The section of the map that describes the crate in folder `dir`: the one
/// whose heading names that folder, or the nearest folder above it.
fn section_of<'a>(map: &'a [(String, Vec<String>)], dir: &str) -> Option<&'a [String]> {
    let mut dir = dir;
    loop {
        let named = format!("`{dir}/`");
        if let Some((_, lines)) = map.iter().find(|(h, _)| h.contains(&named)) {
            return Some(lines);
        }
        dir = dir.rsplit_once('/')?.0;
    }
}

/// The names in backticks in `text`, each cut at its first `/` (`infer/`
/// and `infer/read` name `infer`) and kept only if it could name a module.
fn backticked(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|t| t.split('/').next().unwrap_or(""))
        .filter(|t| !t.is_empty() && t.chars().all(is_ident))
        .map(String::from)
        .collect()
}

/// The first cell of each row of each table in `lines` that follows a line
/// saying "from the top layer down", in order: the modules of each row.
fn layered_tables(lines: &[String]) -> Vec<Vec<BTreeSet<String>>> {
    let mut tables = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].contains("from the top layer down") {
            i += 1;
            continue;
        }
        let mut rows = Vec::new();
        let mut j = i + 1;
        while j < lines.len() && !lines[j].starts_with('|') {
            j += 1;
        }
        while j < lines.len() && lines[j].starts_with('|') {
            let first = lines[j].split('|').nth(1).unwrap_or("");
            let names = backticked(first);
            if !names.is_empty() {
                rows.push(names);
            }
            j += 1;
        }
        tables.push(rows);
        i = j;
    }
    tables
}

/// What the map gets wrong about the crate whose root is `file` (from the
/// workspace root): modules missing from its section's tables, and uses of
/// a module listed above in a table ordered from the top layer down.
fn map_errors(map: &[(String, Vec<String>)], file: &str, module: &Module) -> Vec<String> {
    let dir = file
        .rsplit_once("/src/")
        .map_or(file, |(dir, _)| dir)
        .to_string();
    let Some(lines) = section_of(map, &dir) else {
        return vec![format!("{file}: no section of the map names `{dir}/`")];
    };
    let in_tables: BTreeSet<String> = lines
        .iter()
        .filter(|l| l.starts_with('|'))
        .flat_map(|l| backticked(l))
        .collect();
    let mut errors: Vec<String> = module
        .children
        .iter()
        .filter(|(name, _)| !in_tables.contains(name))
        .map(|(name, _)| {
            format!("{file}: module `{name}` is in no table of the map's section for `{dir}/`")
        })
        .collect();
    let deps = level(module, "crate::");
    for rows in layered_tables(lines) {
        let row_of = |m: &str| rows.iter().position(|r| r.contains(m));
        for (name, used) in &deps {
            let Some(mine) = row_of(name) else { continue };
            for u in used {
                if row_of(u).is_some_and(|theirs| theirs < mine) {
                    errors.push(format!(
                        "{file}: `{name}` uses `{u}`, which the map lists above it (from the top layer down)"
                    ));
                }
            }
        }
    }
    errors
}

#[test]
fn the_map_names_every_module_and_its_layers_hold() {
    let root = workspace();
    let text = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the map");
    let map = sections(&text);
    let mut errors = Vec::new();
    for (file, product) in roots() {
        if product {
            errors.extend(map_errors(&map, &file, &Module::load(&root.join(&file))));
        }
    }
    assert!(
        errors.is_empty(),
        "docs/architecture.md is not the map of the code:\n{}",
        errors.join("\n")
    );
}

#[test]
fn the_map_check_finds_what_is_missing_or_out_of_order() {
    let dir = tests::scratch("module-layers-map");
    for (path, text) in [
        ("x/src/lib.rs", "mod top;\nmod low;\nmod forgotten;\n"),
        ("x/src/top.rs", ""),
        ("x/src/low.rs", "use crate::top::T;\n"),
        ("x/src/forgotten.rs", ""),
    ] {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("scratch");
        std::fs::write(path, text).expect("write");
    }
    let map = sections(
        "## The x crate (`x/`)\n\nModules, from the top layer down:\n\n\
         | module | what |\n|---|---|\n| `top` | a |\n| `low` | b |\n",
    );
    let module = Module::load(&dir.join("x/src/lib.rs"));
    let errors = map_errors(&map, "x/src/lib.rs", &module);
    assert_eq!(
        errors,
        [
            "x/src/lib.rs: module `forgotten` is in no table of the map's section for `x/`",
            "x/src/lib.rs: `low` uses `top`, which the map lists above it (from the top layer down)",
        ]
    );
    assert_eq!(
        map_errors(&map, "y/src/lib.rs", &module),
        ["y/src/lib.rs: no section of the map names `y/`"]
    );
}

/// Writes `files` (path, text) under a scratch folder and returns the cycles
/// the check finds from its `lib.rs`.
fn cycles_in(files: &[(&str, &str)]) -> Vec<String> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = tests::scratch(&format!("module-layers-{n}"));
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("scratch");
        std::fs::write(path, text).expect("write");
    }
    let mut found = Vec::new();
    cycles(&Module::load(&dir.join("lib.rs")), "crate::", &mut found);
    found
}

#[test]
fn the_check_finds_cycles() {
    // Grouped imports, a re-exported name and `super::`.
    let found = cycles_in(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\npub use c::Z;\n"),
        ("a.rs", "use crate::{b::X, c};\n"),
        ("b.rs", "use crate::Z;\n"),
        ("c.rs", "use super::a::Y;\n"),
    ]);
    assert_eq!(found, ["crate:: a -> b -> c -> a"]);

    // The root's own code, and a name defined there.
    let found = cycles_in(&[
        ("lib.rs", "mod a;\nmod b;\npub fn f() { a::g() }\n"),
        ("a.rs", "pub fn g() { crate::f() }\n"),
        ("b.rs", ""),
    ]);
    assert_eq!(found, ["crate:: (parent) -> a -> (parent)"]);

    // Inside a folder module, a glob of the parent's items.
    let found = cycles_in(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", ""),
        ("b/mod.rs", "mod c;\nmod d;\nfn f() { c::g() }\n"),
        ("b/c.rs", "use super::*;\n"),
        ("b/d.rs", ""),
    ]);
    assert_eq!(found, ["crate::b:: (parent) -> c -> (parent)"]);

    // `super::` inside an inline module names the file's own module.
    let found = cycles_in(&[
        ("lib.rs", "mod a;\nmod b;\nfn f() { a::g() }\n"),
        (
            "a.rs",
            "pub fn g() {}\nmod tests {\n    use super::*;\n    const C: char = '{';\n}\nfn h() { super::f() }\n",
        ),
        ("b.rs", ""),
    ]);
    assert_eq!(found, ["crate:: (parent) -> a -> (parent)"]);
    let found = cycles_in(&[
        ("lib.rs", "mod a;\nmod b;\nfn f() { a::g() }\n"),
        (
            "a.rs",
            "pub fn g() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
        ("b.rs", ""),
    ]);
    assert!(found.is_empty(), "{found:?}");

    // Comments, re-exports and `mod` lines are no edges.
    let found = cycles_in(&[
        ("lib.rs", "mod a;\nmod b;\npub use a::X;\n// b::Y\n"),
        ("a.rs", "use crate::b::Y; // crate::a\n"),
        ("b.rs", "/// [`crate::X`]\npub struct Y;\n"),
    ]);
    assert!(found.is_empty(), "{found:?}");
}
