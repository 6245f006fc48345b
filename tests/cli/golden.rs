//! Golden outputs: what a user reads from every command — its text report,
//! its JSON, its errors — kept in `fixtures/golden/` and compared byte for
//! byte once what differs between machines is normalised (the checkout's
//! path, the shared sources', the home and temporary folders, times and
//! rates). `make golden` writes them anew (`MEMTRACE_BLESS=1`) for review
//! with `git diff fixtures/golden`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use regex::Regex;

/// One command of the golden set: the file that keeps its transcript and its
/// arguments, where `@m4` stands for the Cortex-M4 guests' folder, `@models`
/// for the shared models' and `@tmp` for the set's temporary folder. The
/// cases run in order and share `@tmp` (`regress` reads `table`'s baseline).
struct Case {
    name: &'static str,
    args: &'static [&'static str],
}

const DEPTHWISE: &str = "op=depthwise_conv2d,dtype=int8,input=1x8x8x4,filter=1x3x3x4,padding=same";

const CASES: &[Case] = &[
    Case {
        name: "run-job",
        args: &["run", "@m4/suite.elf", "--job", DEPTHWISE],
    },
    Case {
        name: "run-job-json",
        args: &[
            "run",
            "@m4/suite.elf",
            "--job",
            DEPTHWISE,
            "--format",
            "json",
        ],
    },
    Case {
        name: "run-no-such-elf",
        args: &["run", "@tmp/none.elf"],
    },
    Case {
        name: "validate-dilated-max-pool",
        args: &[
            "validate",
            "@m4/suite.elf",
            "--grid",
            "op=max_pool,input=1x8x8x2,filter=2x2,dilation=2",
            "--jobs",
            "1",
        ],
    },
    Case {
        name: "validate-bad-grid",
        args: &["validate", "@m4/suite.elf", "--grid", "op=bogus"],
    },
    Case {
        name: "table",
        args: &[
            "table",
            "@m4/suite.elf",
            "--no-builtin",
            "--grid",
            DEPTHWISE,
            "--jobs",
            "1",
            "--out",
            "@tmp/baseline.json",
        ],
    },
    Case {
        name: "regress-modified-depthwise",
        args: &[
            "regress",
            "@tmp/baseline.json",
            "@m4/suite-modified.elf",
            "--jobs",
            "1",
        ],
    },
    Case {
        name: "plan-analytic",
        args: &[
            "plan",
            "zoo:mobilenet_v1_0.25_128_int8",
            "--overlap",
            "analytic",
        ],
    },
    Case {
        name: "plan-no-such-model",
        args: &["plan", "@tmp/none.tflite"],
    },
    Case {
        name: "verify-hello-world",
        args: &[
            "verify",
            "@models/tflm_hello_world_int8.tflite",
            "--no-oracle",
        ],
    },
    Case {
        name: "cold-hello-world",
        args: &["cold", "@models/tflm_hello_world_int8.tflite"],
    },
    Case {
        name: "zoo-list",
        args: &["zoo", "list"],
    },
    Case {
        name: "check-max-pool-unit-test",
        args: &["check", "@m4/unit-tests/test_arm_max_pool_s8.elf"],
    },
    Case {
        name: "bench-no-such-model",
        args: &["bench", "--models", "@tmp/none.tflite"],
    },
];

/// The folders the cases name and the transcripts normalise.
struct Places {
    repo: PathBuf,
    shared: PathBuf,
    tmp: PathBuf,
    home: Option<PathBuf>,
}

impl Places {
    fn new(tmp: &Path) -> Places {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let shared = repo
            .join("../shared")
            .canonicalize()
            .unwrap_or(repo.join("../shared"));
        Places {
            shared,
            tmp: tmp.canonicalize().unwrap(),
            home: std::env::var_os("HOME").map(PathBuf::from),
            repo,
        }
    }

    fn expand(&self, arg: &str) -> String {
        arg.replace(
            "@m4",
            &self
                .repo
                .join("harness-c/build/cortex-m4")
                .display()
                .to_string(),
        )
        .replace("@models", &self.shared.join("models").display().to_string())
        .replace("@tmp", &self.tmp.display().to_string())
    }

    /// `text` with what differs between machines and runs replaced by names.
    fn normalise(&self, text: &str) -> String {
        // The shared folder as `<repo>/../shared` too, before `<repo>`.
        let mut text = text
            .replace(&self.tmp.display().to_string(), "<tmp>")
            .replace(
                &self.repo.join("../shared").display().to_string(),
                "<shared>",
            )
            .replace(&self.shared.display().to_string(), "<shared>")
            .replace(&self.repo.display().to_string(), "<repo>");
        if let Some(home) = self.home.as_ref().filter(|h| h.as_os_str().len() > 1) {
            text = text.replace(&home.display().to_string(), "<home>");
        }
        let rules = [
            // rates before times: "12.5 M/s", "3 200 configs/s"
            (
                r"\d[\d ,.]*\s?[kMG]?(instructions|configs|events)?/s\b",
                "<rate>",
            ),
            (r"\d+(\.\d+)?\s?(ns|µs|us|ms|s|min)\b", "<time>"),
            (
                r#""(\w*seconds?|\w*_ms|\w*_per_second)": [\d.e+-]+"#,
                r#""$1": <time>"#,
            ),
            // A guest's bytes hold its build folders (DWARF), so its digest
            // names the checkout, not the code.
            (r"sha256 [0-9a-f]{16}", "sha256 <digest>"),
            // A whole program's count includes printing its source paths
            // (Unity prints `__FILE__`); each call's count stays.
            (
                r"(exited with status -?\d+ after) \d+ instructions",
                "$1 <n> instructions",
            ),
            // A whole TFLM run's (verify's run table, last column) differs
            // between machines: CI counted 288 814 where this one counts
            // 288 392 (with a fresh build, and with TFLM compiled from
            // another folder: not its paths). Each operator's and each
            // kernel call's count stays.
            (r"(?m)^(\S+ \([^)]*\)(?: +\d+){5}) +\d+$", "$1 <n>"),
        ];
        for (pattern, with) in rules {
            text = Regex::new(pattern)
                .unwrap()
                .replace_all(&text, with)
                .into_owned();
        }
        text
    }
}

/// What a user saw of one case: the command, its exit status, stdout and
/// stderr.
fn transcript(places: &Places, case: &Case, args: &[String], out: &Output) -> String {
    let shown: Vec<String> = args
        .iter()
        .map(|a| {
            let a = places.normalise(a);
            if a.contains([' ', ',', '=']) {
                format!("'{a}'")
            } else {
                a
            }
        })
        .collect();
    format!(
        "$ memtrace {}\nexit status: {}\n--- stdout ({})\n{}--- stderr\n{}",
        shown.join(" "),
        out.status
            .code()
            .map_or_else(|| "killed".to_owned(), |c| c.to_string()),
        case.name,
        places.normalise(&String::from_utf8_lossy(&out.stdout)),
        places.normalise(&String::from_utf8_lossy(&out.stderr)),
    )
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/golden")
}

#[test]
#[cfg_attr(
    any(no_cmsis, no_tflm),
    ignore = "CMSIS-NN unit tests or TFLM runners not built: make test builds them"
)]
fn every_command_prints_what_its_golden_file_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let places = Places::new(tmp.path());
    let bless = std::env::var_os("MEMTRACE_BLESS").is_some();
    let mut differ = Vec::new();
    for case in CASES {
        let args: Vec<String> = case.args.iter().map(|a| places.expand(a)).collect();
        let out = Command::new(env!("CARGO_BIN_EXE_memtrace"))
            .args(&args)
            .env("CI", "1")
            .env("MEMTRACE_CACHE_DIR", tmp.path().join("cache"))
            .env_remove("MEMTRACE_TFLM_PYTHON")
            .output()
            .expect("memtrace runs");
        let seen = transcript(&places, case, &args, &out);
        let path = golden_dir().join(format!("{}.txt", case.name));
        if bless {
            std::fs::create_dir_all(golden_dir()).unwrap();
            std::fs::write(&path, &seen).unwrap();
            continue;
        }
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        if kept != seen {
            let line = kept
                .lines()
                .zip(seen.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(kept.lines().count().min(seen.lines().count()));
            differ.push(format!(
                "{}: line {}\n  kept: {}\n  seen: {}",
                case.name,
                line + 1,
                kept.lines().nth(line).unwrap_or("<end>"),
                seen.lines().nth(line).unwrap_or("<end>")
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "outputs differ from fixtures/golden (if meant, `make golden` and review the diff):\n{}",
        differ.join("\n")
    );
}

/// Every subcommand `memtrace --help` lists has a golden case, and every
/// golden file a case (none left behind by a removed one).
#[test]
fn the_golden_set_covers_every_command_and_only_its_cases() {
    let help = crate::common::stdout(&crate::common::memtrace(["--help"]));
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .expect("a command list")
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 10, "{help}");
    for command in &commands {
        assert!(
            CASES.iter().any(|c| c.args[0] == *command),
            "`memtrace {command}` has no golden case"
        );
    }
    let names: Vec<String> = CASES.iter().map(|c| format!("{}.txt", c.name)).collect();
    for entry in std::fs::read_dir(golden_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            names.contains(&name),
            "fixtures/golden/{name} belongs to no case"
        );
    }
}

/// The normalisation replaces what differs between machines and nothing a
/// user acts on: sizes, counts and instruction counts stay.
#[test]
fn normalising_keeps_sizes_and_counts_and_hides_times_and_places() {
    let tmp = tempfile::tempdir().unwrap();
    let places = Places::new(tmp.path());
    let tmp_path = places.tmp.display().to_string();
    let text = format!(
        "{tmp_path}/b.json: 12 layers, 4096 B, 1234567 instructions in 1.25 s (3.1 M/s, 8 configs/s), 2 stray writes\n\
         runner.elf sha256 83d3c3d25c9925b3; prog.elf exited with status 0 after 154331 instructions\n\
         tflm (none)          32          676         32        644         0         288392\n"
    );
    assert_eq!(
        places.normalise(&text),
        "<tmp>/b.json: 12 layers, 4096 B, 1234567 instructions in <time> (<rate>, <rate>), 2 stray writes\n\
         runner.elf sha256 <digest>; prog.elf exited with status 0 after <n> instructions\n\
         tflm (none)          32          676         32        644         0 <n>\n"
    );
}
