//! The two ways of observing buffer accesses must see the same accesses.
//!
//! `AccessPath::Hooks` (memory hooks, exact PC and instruction per event) and
//! `AccessPath::Mmio` (buffer pages served as MMIO while their layer is open)
//! run the same guest; every message must agree, except that MMIO events carry
//! the time and address of the block that made them, which can only be at or
//! before the exact ones.

mod common;

use common::{guest, trace_messages};
use memtrace_abi::{Event, LayerSpec, Message, Role};
use memtrace_tracer::{AccessPath, ElfImage, Job, TraceOptions};

fn trace(image: &ElfImage, job: Option<&Job>, access: AccessPath) -> Vec<Message> {
    trace_preloaded(image, job, access, Vec::new())
}

fn trace_preloaded(
    image: &ElfImage,
    job: Option<&Job>,
    access: AccessPath,
    preload: Vec<(u64, Vec<u8>)>,
) -> Vec<Message> {
    let options = TraceOptions {
        job: job.cloned(),
        access,
        preload,
        ..TraceOptions::default()
    };
    let (summary, messages) = trace_messages(image, options);
    assert_eq!(summary.access, access, "the requested path was used");
    messages
}

/// Events of all batches, and the other messages, in order.
fn split(messages: Vec<Message>) -> (Vec<Event>, Vec<Message>) {
    let mut events = Vec::new();
    let mut rest = Vec::new();
    for m in messages {
        match m {
            Message::Events(batch) => events.extend(batch),
            other => rest.push(other),
        }
    }
    (events, rest)
}

fn assert_paths_agree(image: &ElfImage, job: Option<&Job>, what: &str) {
    assert_preloaded_paths_agree(image, job, Vec::new(), what);
}

fn assert_preloaded_paths_agree(
    image: &ElfImage,
    job: Option<&Job>,
    preload: Vec<(u64, Vec<u8>)>,
    what: &str,
) {
    let (exact, exact_rest) = split(trace_preloaded(
        image,
        job,
        AccessPath::Hooks,
        preload.clone(),
    ));
    let (fast, fast_rest) = split(trace_preloaded(image, job, AccessPath::Mmio, preload));
    assert!(!exact.is_empty(), "{what}: no events");
    // Layer windows, buffers and instruction counts are identical.
    assert_eq!(fast_rest, exact_rest, "{what}");
    assert_eq!(fast.len(), exact.len(), "{what}: event counts");
    for (f, e) in fast.iter().zip(&exact) {
        assert_eq!(
            Event { t: 0, pc: 0, ..*f },
            Event { t: 0, pc: 0, ..*e },
            "{what}: the same access in the same order"
        );
        assert!(
            f.t <= e.t,
            "{what}: block time after the access: {f:?} {e:?}"
        );
        assert!(
            f.pc <= e.pc,
            "{what}: block address after the PC: {f:?} {e:?}"
        );
    }
}

const SPECS: [&str; 9] = [
    "op=conv2d,dtype=int8,input=1x9x9x3,filter=4x3x3x3,stride=2,padding=same",
    "op=conv2d,dtype=f32,input=1x7x7x2,filter=3x3x3x2,stride=1,padding=valid",
    "op=depthwise_conv2d,dtype=int8,input=1x9x9x4,filter=1x3x3x4,stride=2,padding=same",
    "op=max_pool,dtype=int8,input=1x8x8x3,filter=3x3,stride=2,padding=valid",
    "op=average_pool,dtype=f32,input=1x6x6x2,filter=2x2,stride=2,padding=valid",
    "op=fully_connected,dtype=int8,input=2x20,filter=5x20",
    "op=add,dtype=int8,input=1x5x5x3",
    "op=relu,dtype=f32,input=1x4x4x3",
    "op=matmul,dtype=f32,input=4x3,filter=3x5",
];

#[test]
fn mmio_and_hooks_see_the_same_accesses_on_both_targets() {
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "suite.elf")).unwrap();
        for spec in SPECS {
            let job = Job {
                spec: LayerSpec::parse(spec).unwrap(),
                seed: 5,
            };
            assert_paths_agree(&image, Some(&job), &format!("{target} {spec}"));
        }
    }
}

/// The built-in layers: several windows in one run, pages served and given
/// back per layer.
#[test]
fn mmio_and_hooks_agree_across_layers() {
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "suite.elf")).unwrap();
        assert_paths_agree(&image, None, &format!("{target} built-in layers"));
    }
    // Thumb IT blocks whose conditional accesses hit traced buffers.
    let image = ElfImage::load(&guest("cortex-m4", "it-block.elf")).unwrap();
    assert_paths_agree(&image, None, "cortex-m4 it-block.elf");
}

/// Real TFLM, one layer per operator, whose layers reuse the arena's pages:
/// the pages served for one layer and given back at its end are served
/// again for the next, and every access must give exactly the events that
/// memory hooks see, none between layers and none fewer inside them.
#[test]
fn mmio_and_hooks_agree_on_real_tflm_whose_layers_share_pages() {
    let image = ElfImage::load(&guest("cortex-m4", "tflm-runner.elf")).unwrap();
    for model in [
        "mlperf_tiny_ad_fc_autoencoder_int8.tflite",
        "tflm_micro_speech_quantized.tflite",
    ] {
        assert_preloaded_paths_agree(&image, None, tflm_preload(&image, model), model);
    }
}

/// What the TFLM runner `image` needs in memory to run `model` (of
/// `../shared/models`) one layer per operator, weights undeclared.
fn tflm_preload(image: &ElfImage, model: &str) -> Vec<(u64, Vec<u8>)> {
    use memtrace_abi::runner::{symbols, TflmJob};
    let at = |name| image.symbol(name).unwrap().address;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/models")
        .join(model);
    let bytes = std::fs::read(&path).unwrap();
    let job = TflmJob {
        model_bytes: bytes.len() as u32,
        arena_bytes: (at(symbols::ARENA_END) - at(symbols::ARENA)) as u32,
        input_bytes: 0,
        layers: true,
        weights: false,
        red_zone_bytes: 0,
        digests: false,
        dump_op: None,
    };
    vec![(at(symbols::JOB), job.bytes()), (at(symbols::MODEL), bytes)]
}

/// Every access to a served page costs an MMIO dispatch, whatever it
/// touches, and Unicorn maps memory in pages of its own: 1 KiB on the
/// Cortex-M4. Real TFLM places CMSIS-NN's scratch buffers beside the
/// layers' tensors, and its kernels read their scratch over and over. In a
/// run that leaves scratch and persistent memory untraced (an O_s run), the
/// accesses that record nothing are their accesses inside the 1 KiB pages holding the
/// layer's traced bytes, counted from a run that traces the scratch too;
/// far fewer than those inside the 4 KiB pages around them.
#[test]
fn untraced_scratch_costs_a_dispatch_only_inside_the_engine_pages_of_traced_bytes() {
    let image = ElfImage::load(&guest("cortex-m4", "tflm-runner-cmsis.elf")).unwrap();
    let preload = tflm_preload(&image, "mlperf_tiny_ic_resnet8_int8.tflite");
    let run = |untraced_roles: Vec<Role>| {
        trace_messages(
            &image,
            TraceOptions {
                access: AccessPath::Mmio,
                preload: preload.clone(),
                untraced_roles,
                ..TraceOptions::default()
            },
        )
    };
    let (_, everything) = run(Vec::new());
    // As a model's O_s run: scratch and the kernels' own persistent
    // memory untraced.
    let untraced = |r: Role| matches!(r, Role::Scratch | Role::Persistent);
    let (o_s_run, _) = run(vec![Role::Scratch, Role::Persistent]);
    let scratch_accesses_beside_traced_bytes = |page: u64| {
        let mut count = 0;
        let mut layer: Vec<memtrace_abi::Buffer> = Vec::new();
        for m in &everything {
            match m {
                Message::LayerBegin(_) => layer.clear(),
                Message::BufferDeclared(b) => layer.push(b.clone()),
                Message::Events(batch) => {
                    let pages = |b: &memtrace_abi::Buffer| {
                        (b.base / page, (b.base + b.size as u64).div_ceil(page))
                    };
                    let traced: Vec<(u64, u64)> = layer
                        .iter()
                        .filter(|b| !untraced(b.role))
                        .map(pages)
                        .collect();
                    for e in batch {
                        let b = layer.iter().find(|b| b.id == e.buffer).unwrap();
                        if !untraced(b.role) {
                            continue;
                        }
                        let first = (b.base + e.offset as u64) / page;
                        let last = (b.base + (e.offset + e.size) as u64 - 1) / page;
                        if traced.iter().any(|&(lo, hi)| first < hi && lo <= last) {
                            count += 1;
                        }
                    }
                }
                _ => {}
            }
        }
        count
    };
    let (kib, four_kib) = (
        scratch_accesses_beside_traced_bytes(1024),
        scratch_accesses_beside_traced_bytes(4096),
    );
    assert!(
        four_kib > 10 * kib.max(1),
        "ResNet-8's scratch shares 4 KiB pages with its tensors: {four_kib} against {kib}"
    );
    assert_eq!(
        o_s_run.idle_dispatches, kib,
        "the accesses that recorded nothing are the scratch accesses in the 1 KiB pages"
    );
}

/// A guest built with an older memtrace.h has no `memtrace_signal`, so its
/// commands cannot be timed without hooks: the MMIO path falls back to the
/// hook path (and says so) instead of giving inexact layer times. Such a
/// guest is made here by renaming the symbol in a real ELF's string tables.
#[test]
fn a_guest_without_memtrace_signal_is_traced_with_hooks() {
    let path = guest("cortex-m4", "suite.elf");
    let mut bytes = std::fs::read(&path).unwrap();
    let name = b"memtrace_signal\0";
    let places: Vec<usize> = (0..bytes.len() - name.len())
        .filter(|&i| &bytes[i..i + name.len()] == name)
        .collect();
    assert!(!places.is_empty(), "the symbol name is in the ELF");
    for at in places {
        bytes[at + name.len() - 2] = b'X'; // the symbol and DWARF strings
    }
    let image = ElfImage::parse(&path, bytes.into()).unwrap();
    assert!(image.symbol("memtrace_signal").is_none());
    let job = Job {
        spec: LayerSpec::parse(SPECS[0]).unwrap(),
        seed: 5,
    };
    let options = TraceOptions {
        job: Some(job.clone()),
        access: AccessPath::Mmio,
        ..TraceOptions::default()
    };
    let (summary, fallback) = trace_messages(&image, options);
    assert_eq!(summary.access, AccessPath::Hooks);
    let original = ElfImage::load(&path).unwrap();
    assert_eq!(fallback, trace(&original, Some(&job), AccessPath::Hooks));
}

/// Served pages must never hold code: the image knows which pages do.
#[test]
fn code_pages_are_told_apart_from_data_pages() {
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, "suite.elf")).unwrap();
        assert!(image.is_executable(image.entry, 2), "{target}: entry");
        let port = image.protocol_port().unwrap();
        assert!(!image.is_executable(port.address, 8), "{target}: port page");
        let signal = image.symbol("memtrace_signal").unwrap();
        assert!(image.is_executable(signal.address, signal.size), "{target}");
    }
}

/// Runs `check` on both targets and both paths, with a function that
/// traces the conv job of `SPECS[0]` on `elf` (a conv: input, output,
/// weights, bias, and CMSIS-NN's scratch) with the options `roles` makes of
/// the roles it is given.
fn on_a_conv_job(
    elf: &str,
    roles: impl Fn(Vec<Role>) -> TraceOptions<'static>,
    check: impl Fn(&str, &dyn Fn(Vec<Role>) -> Traced),
) {
    for target in ["cortex-m4", "x86_64"] {
        let image = ElfImage::load(&guest(target, elf)).unwrap();
        let job = Job {
            spec: LayerSpec::parse(SPECS[0]).unwrap(),
            seed: 5,
        };
        for access in [AccessPath::Hooks, AccessPath::Mmio] {
            let run = |given: Vec<Role>| {
                let options = TraceOptions {
                    job: Some(job.clone()),
                    access,
                    ..roles(given)
                };
                split(trace_messages(&image, options).1)
            };
            check(&format!("{target} {access:?}"), &run);
        }
    }
}

/// A run's events and its other messages ([`split`]).
type Traced = (Vec<Event>, Vec<Message>);

/// The buffers announced among `messages`.
fn declared(messages: &[Message]) -> impl Iterator<Item = &memtrace_abi::Buffer> {
    messages.iter().filter_map(|m| match m {
        Message::BufferDeclared(b) => Some(b),
        _ => None,
    })
}

/// Untraced roles: the buffers of those roles give no events and are not
/// announced, and every other buffer's accesses are exactly the ones of a
/// run that traces everything, on both paths and both targets.
#[test]
fn untraced_roles_leave_the_other_buffers_accesses_unchanged() {
    let untraced = |roles| TraceOptions {
        untraced_roles: roles,
        ..TraceOptions::default()
    };
    on_a_conv_job("suite.elf", untraced, |what, run| {
        let (all, all_rest) = run(Vec::new());
        let (some, some_rest) = run(vec![Role::Weights, Role::Bias]);
        let ids = |rest: &[Message], keep: &dyn Fn(Role) -> bool| -> Vec<u32> {
            declared(rest)
                .filter(|b| keep(b.role))
                .map(|b| b.id)
                .collect()
        };
        let constant = |r: Role| matches!(r, Role::Weights | Role::Bias);
        let dropped = ids(&all_rest, &constant);
        assert_eq!(dropped.len(), 2, "{what}: weights and bias");
        assert!(ids(&some_rest, &constant).is_empty(), "not announced");
        assert_eq!(
            ids(&some_rest, &|r| !constant(r)),
            ids(&all_rest, &|r| !constant(r)),
            "{what}: the other buffers are"
        );
        let kept: Vec<Event> = all
            .iter()
            .filter(|e| !dropped.contains(&e.buffer))
            .map(|e| Event { seq: 0, ..*e })
            .collect();
        assert!(kept.len() < all.len(), "{what}: the weights were read");
        let some: Vec<Event> = some.iter().map(|e| Event { seq: 0, ..*e }).collect();
        assert_eq!(some, kept, "{what}");
    });
}

/// Roles written whole: the buffer is announced as before and gives one
/// store over all of it at its declaration, none of its accesses; every
/// other message and every other buffer's events are those of a run that
/// traces everything, on both paths and both targets.
#[test]
fn a_role_written_whole_gives_one_store_over_the_buffer_and_none_of_its_accesses() {
    use memtrace_abi::{AccessKind, Buffer};
    let written_whole = |roles| TraceOptions {
        written_whole_roles: roles,
        ..TraceOptions::default()
    };
    on_a_conv_job("suite-cmsis.elf", written_whole, |what, run| {
        let (all, all_rest) = run(Vec::new());
        let (whole, whole_rest) = run(vec![Role::Scratch]);
        assert_eq!(whole_rest, all_rest, "{what}: layers and buffers");
        let scratch: Vec<&Buffer> = declared(&all_rest)
            .filter(|b| b.role == Role::Scratch)
            .collect();
        assert!(!scratch.is_empty(), "{what}: CMSIS-NN's conv has scratch");
        let is_scratch = |e: &Event| scratch.iter().any(|b| b.id == e.buffer);
        for b in scratch.iter() {
            let accesses = all.iter().filter(|e| e.buffer == b.id).count();
            assert!(accesses > 1, "{what}: the kernel uses `{}`", b.name);
            let stores: Vec<&Event> = whole.iter().filter(|e| e.buffer == b.id).collect();
            assert_eq!(stores.len(), 1, "{what}: `{}`", b.name);
            let s = stores[0];
            assert_eq!(
                (s.offset, s.size, s.kind),
                (0, b.size, AccessKind::Store),
                "{what}"
            );
            // Declared before the kernel runs: before all its accesses.
            assert!(
                whole
                    .iter()
                    .filter(|e| !is_scratch(e))
                    .all(|e| e.seq > s.seq),
                "{what}"
            );
        }
        let others = |events: &[Event]| -> Vec<Event> {
            events
                .iter()
                .filter(|e| !is_scratch(e))
                .map(|e| Event { seq: 0, ..*e })
                .collect()
        };
        assert_eq!(others(&whole), others(&all), "{what}");
    });
}
