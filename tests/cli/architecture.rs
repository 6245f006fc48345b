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

/// The modules directly under `src` (a file `m.rs` and a folder `m/` are one
/// module) and the files of each; `lib.rs`, `main.rs`, `mod.rs` and
/// test-only modules (`tests.rs`) are not modules that import.
fn top_level_modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if ["lib", "main", "mod", "tests"].contains(&name.as_str()) {
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
    imports_under(src, "crate::")
}

/// Which modules directly under `src` each one names through `path` (the
/// folder's own path from the crate root: `crate::` for a crate's `src/`)
/// or, in a file directly in `src`, `super::`.
fn imports_under(src: &Path, path: &str) -> BTreeMap<String, BTreeSet<String>> {
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
            named(path);
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

/// The workflows too: no command's module imports one that imports it
/// back, and `plan`, `verify` and `run` never name each other (what they
/// share lives below them).
#[test]
fn no_workflow_imports_one_that_imports_it_back_and_plan_verify_run_stand_alone() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = imports_under(&root.join("driver/src/workflows"), "crate::workflows::");
    assert!(
        graph.contains_key("verify") && graph.contains_key("sweep"),
        "{graph:?}"
    );
    for module in graph.keys() {
        assert_eq!(circle_through(&graph, module), None, "workflows: {module}");
    }
    for (a, b) in [("plan", "verify"), ("plan", "run"), ("verify", "run")] {
        assert!(
            !graph[a].contains(b) && !graph[b].contains(a),
            "{a} and {b}: {graph:?}"
        );
    }
}

/// ARCHITECTURE.md, read once.
fn the_map() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md")).unwrap()
}

#[test]
fn the_map_fits_on_a_few_pages() {
    let lines = the_map().lines().count();
    assert!(
        lines <= 300,
        "ARCHITECTURE.md has {lines} lines: move inventory into `//!` docs"
    );
}

/// Every path the map names in backticks exists: one with a `/` from the
/// repository's root, a bare file name somewhere in it.
#[test]
fn every_path_the_map_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = BTreeSet::new();
    let mut walk = vec![root.to_path_buf()];
    while let Some(dir) = walk.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "build" && name != "target" {
                    walk.push(path);
                }
            } else {
                files.insert(name);
            }
        }
    }
    let map = the_map();
    let named: Vec<&str> = map
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| !t.contains([' ', '<', '*', '\n']) && !t.starts_with(['~', '$', '/']))
        .collect();
    let (mut paths, mut missing) = (0, Vec::new());
    for token in named {
        let is_file = Path::new(token).extension().is_some_and(|e| {
            ["rs", "md", "c", "cc", "h", "py", "sh", "toml"].contains(&&*e.to_string_lossy())
        });
        if token.contains('/') {
            paths += 1;
            if !root.join(token.trim_end_matches('/')).exists() {
                missing.push(token);
            }
        } else if is_file {
            paths += 1;
            if !files.contains(token) {
                missing.push(token);
            }
        }
    }
    assert!(paths > 50, "only {paths} paths found in the map");
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what does not exist: {missing:?}"
    );
}

/// The map's block of crate dependencies is each `Cargo.toml`'s: a crate
/// depends on exactly the memtrace crates its line names.
#[test]
fn each_crate_depends_on_exactly_the_crates_the_map_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = the_map();
    let block = map
        .split("Each crate depends on exactly these")
        .nth(1)
        .and_then(|rest| rest.split("```").nth(1))
        .expect("the map's dependency block");
    let mut crates = 0;
    for line in block.lines().filter(|l| l.contains('→')) {
        let (name, deps) = line.split_once('→').unwrap();
        let name = name.trim();
        let said: BTreeSet<String> = deps
            .split(',')
            .map(|d| d.trim())
            .filter(|d| !d.is_empty())
            .map(|d| format!("memtrace-{d}"))
            .collect();
        let folder = if name == "memtrace" { "." } else { name };
        let manifest = std::fs::read_to_string(root.join(folder).join("Cargo.toml")).unwrap();
        let section = manifest
            .split("\n[dependencies]\n")
            .nth(1)
            .map(|s| s.split("\n[").next().unwrap_or(""))
            .unwrap_or("");
        let actual: BTreeSet<String> = section
            .lines()
            .filter_map(|l| l.split(['.', ' ', '=']).next())
            .filter(|n| n.starts_with("memtrace-"))
            .map(str::to_owned)
            .collect();
        assert_eq!(actual, said, "{name}: Cargo.toml against the map");
        crates += 1;
    }
    assert_eq!(crates, CRATES.len(), "one line per crate");
}

/// The model argument is parsed once, at the binary (`ModelSource`): no
/// crate below it tells a zoo model from a file by its text.
#[test]
fn only_the_binary_reads_a_model_argument_as_text() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let needle = ["\"zoo", ":"].concat();
    let mut found = Vec::new();
    for krate in ["driver", "model", "analyzer", "tracer"] {
        for file in rust_files(&root.join(krate)) {
            let text = std::fs::read_to_string(&file).unwrap();
            for (i, line) in text.lines().enumerate() {
                if line.contains(&needle) {
                    found.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
    // The check can fail: the binary does hold one.
    let binary = rust_files(&root.join("src"))
        .iter()
        .any(|f| std::fs::read_to_string(f).unwrap().contains(&needle));
    assert!(binary, "src/ names `zoo:` (bench's default model)");
}
