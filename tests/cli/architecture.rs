//! The rules ARCHITECTURE.md states about the code's shape, checked on the
//! sources themselves.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's crates, by the folder holding their `src/`.
const CRATES: [&str; 8] = [
    "abi", "io", "overlap", "model", "tracer", "analyzer", "driver", ".",
];

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// `text` without comments, string literals and `#[cfg(test)]` modules at
/// its end: what the compiler reads as paths.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let (mut in_string, mut in_comment) = (false, false);
    while let Some(c) = chars.next() {
        if in_comment {
            if c == '\n' {
                in_comment = false;
                out.push(c);
            }
        } else if in_string {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '/' && chars.peek() == Some(&'/') {
            in_comment = true;
        } else if c == '"' {
            in_string = true;
        } else {
            out.push(c);
        }
    }
    out
}

/// The crate's top-level modules (a file `m.rs` and a folder `m/` are one
/// module) and the files of each; `lib.rs`, `main.rs` and test-only
/// modules (`tests.rs`) are not modules that import.
fn top_level_modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if ["lib", "main", "tests"].contains(&name.as_str()) {
            continue;
        }
        if path.is_dir() {
            modules.entry(name).or_default().extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            modules.entry(name).or_default().push(path);
        }
    }
    modules
}

/// Which top-level modules each one names through `crate::` (or, in a
/// top-level file, `super::`).
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = top_level_modules(src);
    let names: BTreeSet<&String> = modules.keys().collect();
    let mut graph = BTreeMap::new();
    for (module, files) in &modules {
        let mut uses = BTreeSet::new();
        for file in files {
            let code = code_of(&std::fs::read_to_string(file).unwrap());
            let mut named = |prefix: &str| {
                for (i, _) in code.match_indices(prefix) {
                    let rest = &code[i + prefix.len()..];
                    let mut heads: Vec<String> = Vec::new();
                    if let Some(group) = rest.strip_prefix('{') {
                        let group = &group[..group.find('}').unwrap_or(group.len())];
                        heads.extend(
                            group
                                .split(',')
                                .map(|p| p.trim().split("::").next().unwrap_or("").to_string()),
                        );
                    } else {
                        let end = rest
                            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                            .unwrap_or(rest.len());
                        heads.push(rest[..end].to_string());
                    }
                    for head in heads {
                        if head != *module && names.contains(&head) {
                            uses.insert(head);
                        }
                    }
                }
            };
            named("crate::");
            if file.parent() == Some(src) {
                named("super::");
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// A circle in `graph` through `start`, if there is one.
fn circle_through(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        let here = path.last().unwrap().clone();
        for next in graph.get(&here).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    walk(graph, start, &mut path, &mut BTreeSet::new()).then_some(path)
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut circles = Vec::new();
    for krate in CRATES {
        let graph = imports(&root.join(krate).join("src"));
        for module in graph.keys() {
            if let Some(circle) = circle_through(&graph, module) {
                circles.push(format!("{krate}: {} -> {module}", circle.join(" -> ")));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// The checker itself finds a circle (two modules naming each other) and
/// reads neither comments nor strings as imports.
#[test]
fn the_circle_checker_sees_imports_and_only_imports() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("a.rs"), "use crate::{b::X, c};\n// crate::d\n").unwrap();
    std::fs::write(src.join("b.rs"), "fn f() { crate::a::g(); }\n").unwrap();
    std::fs::write(src.join("c.rs"), "const S: &str = \"crate::a\";\n").unwrap();
    std::fs::write(src.join("d.rs"), "").unwrap();
    let graph = imports(src);
    assert_eq!(graph["a"], ["b", "c"].map(String::from).into());
    assert!(graph["c"].is_empty());
    assert_eq!(circle_through(&graph, "a").unwrap(), ["a", "b"]);
    assert_eq!(circle_through(&graph, "c"), None);
}
