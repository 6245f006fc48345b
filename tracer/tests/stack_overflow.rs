//! A stack that grows past `__stack_bottom` is reported as a stack overflow
//! (`session/stack.rs`): how far below the bottom, how large the stack is,
//! and the calls on it, unwound with the ELF's call-frame information
//! (`unwind.rs`). Never as a write to an unmapped address after the stack
//! ran through `.bss`, never a panic; on both targets and both access paths.

mod common;

use common::guest;
use memtrace_tracer::{trace, AccessPath, ElfImage, TraceError, TraceOptions};

const TARGETS: [&str; 2] = ["cortex-m4", "x86_64"];
const PATHS: [AccessPath; 2] = [AccessPath::Hooks, AccessPath::Mmio];
/// `MEMTRACE_STACK_SIZE` of the harness linker scripts.
const STACK_BYTES: u64 = 256 << 10;

/// The stack overflow `name` must end in, with the function it happens in
/// and the one that called it over and over.
fn overflow(target: &str, name: &str, access: AccessPath) -> (u64, u64, usize, Vec<String>) {
    let image = ElfImage::load(&guest(target, name)).unwrap();
    let options = TraceOptions {
        access,
        stray_writes: true,
        ..TraceOptions::default()
    };
    let err = trace(&image, options, &mut []).expect_err("the guest must not reach its exit");
    let text = err.to_string();
    let TraceError::StackOverflow {
        below,
        address,
        stack_bytes,
        frames,
        context,
    } = err
    else {
        panic!("{target} {name} {access:?}: not a stack overflow: {text}");
    };
    assert_eq!(stack_bytes, STACK_BYTES, "{text}");
    let bottom = image.symbol("__stack_bottom").unwrap().address;
    assert_eq!(bottom - address, below, "{text}");
    // The store was the stack's, made near its bottom.
    assert!(below > 0 && below <= 256, "{text}");
    let mut functions = vec![context.location.function.clone().unwrap_or_default()];
    functions.extend(
        context
            .callers
            .iter()
            .map(|c| c.function.clone().unwrap_or_default()),
    );
    assert!(text.starts_with("stack overflow: "), "{text}");
    (below, stack_bytes, frames, functions)
}

#[test]
fn a_recursion_without_end_is_a_stack_overflow_with_its_callers() {
    for target in TARGETS {
        for access in PATHS {
            let (_, _, frames, functions) = overflow(target, "stack-overflow.elf", access);
            // Every level keeps at least 32 B: at most 8192 fit in 256 KiB,
            // and far more than a thousand do.
            assert!((1000..=8192).contains(&frames), "{target}: {frames}");
            assert_eq!(functions[0], "descend", "{target}");
            let main = functions.iter().position(|f| f == "main");
            let main = main.unwrap_or_else(|| panic!("{target}: no main in {functions:?}"));
            assert!(
                functions[..main].iter().all(|f| f == "descend"),
                "{target}: {:?}",
                &functions[..main.min(8)]
            );
            // Below main, only the start-up code.
            assert!(
                functions[main + 1..].iter().all(|f| [
                    "memtrace_rt_start",
                    "Reset_Handler",
                    "_start"
                ]
                .contains(&f.as_str())),
                "{target}: {:?}",
                &functions[main..]
            );
        }
    }
}

#[test]
fn a_memcpy_that_calls_itself_is_a_stack_overflow_in_memcpy() {
    for target in TARGETS {
        for access in PATHS {
            let (below, _, frames, functions) = overflow(target, "memcpy-recursion.elf", access);
            assert!(below <= 16, "{target}: {below}");
            assert!(frames > 10_000, "{target}: {frames}");
            assert_eq!(functions[0], "memcpy", "{target}");
            let main = functions.iter().position(|f| f == "main").unwrap();
            assert!(functions[1..main].iter().all(|f| f == "memcpy"), "{target}");
        }
    }
}

#[test]
fn the_message_says_depth_stack_size_and_the_chain_in_a_few_words() {
    let image = ElfImage::load(&guest("cortex-m4", "stack-overflow.elf")).unwrap();
    let text = trace(&image, TraceOptions::default(), &mut [])
        .unwrap_err()
        .to_string();
    assert!(text.contains("B below the stack bottom"), "{text}");
    assert!(text.contains("(the stack is 262144 B;"), "{text}");
    assert!(text.contains("in layer `deep`"), "{text}");
    assert!(
        text.contains("in `descend` (guests/stack_overflow.c:"),
        "{text}"
    );
    // Thousands of identical frames are one group.
    assert!(
        text.contains("called from `descend` (guests/stack_overflow.c:"),
        "{text}"
    );
    assert!(text.contains(" × "), "{text}");
    assert!(
        text.contains(", from `main` (guests/stack_overflow.c:"),
        "{text}"
    );
    assert!(text.len() < 600, "{text}");
}

#[test]
fn a_guest_fault_names_the_callers_too() {
    for target in TARGETS {
        let image = ElfImage::load(&guest(target, "fault.elf")).unwrap();
        let err = trace(&image, TraceOptions::default(), &mut []).unwrap_err();
        let TraceError::GuestFault { context, .. } = &err else {
            panic!("{target}: {err}");
        };
        assert_eq!(
            context.location.function.as_deref(),
            Some("read_unmapped"),
            "{err}"
        );
        assert_eq!(
            context.callers.first().and_then(|c| c.function.as_deref()),
            Some("main"),
            "{target}: {err}"
        );
        assert!(
            err.to_string()
                .contains("called from `main` (guests/fault.c:"),
            "{err}"
        );
    }
}
