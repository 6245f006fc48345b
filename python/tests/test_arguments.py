"""The API's arguments: a wrong type is a TypeError and a wrong value a
ValueError, raised before memtrace runs; a hostile string is passed as the
one argument it is (a model named `-h` is a file, never an option; `"conv1"`
is one layer); memtrace's answer is a result or a MemtraceError, never a
JSONDecodeError."""

import importlib
import os
import random
from pathlib import Path

import pytest

import memtrace
from memtrace.sweep import Cell, cells, verify_cell

# The module (`memtrace.sweep` is also the package's function).
sweep_module = importlib.import_module("memtrace.sweep")


class Recorded(Exception):
    """Raised by a stand-in for the binary: the call it would have made."""

    def __init__(self, args):
        super().__init__(args)
        self.args_given = list(args)


def recording(monkeypatch):
    """Every call of the binary recorded and stopped (nothing runs)."""

    def stand_in(args, *rest, **kwargs):
        raise Recorded(args)

    monkeypatch.setattr(memtrace, "call_json", stand_in)
    monkeypatch.setattr(memtrace, "call", stand_in)
    monkeypatch.setattr(sweep_module, "call_json", stand_in)


def args_of(call):
    with pytest.raises(Recorded) as caught:
        call()
    return caught.value.args_given


# The strings a notebook might hold: options, empty, NUL, controls, bidi.
HOSTILE = ["-h", "--version", "-", "--format=table", "a\x1bb", "x\u202ey", "\x7f", "\x9b"]


def test_a_model_starting_with_a_dash_is_a_file_never_an_option(monkeypatch):
    recording(monkeypatch)
    for name in ["-h", "--version", "--format=table", "-"]:
        for given in (name, Path(name)):
            args = args_of(lambda: memtrace.run(given))
            assert args[:2] == ["run", os.path.join(".", name)], args
            args = args_of(lambda: memtrace.plan(given))
            assert args[1] == os.path.join(".", name), args
    # Absolute paths and zoo names are left as they are.
    assert args_of(lambda: memtrace.verify("/m/-x.tflite"))[1] == "/m/-x.tflite"
    assert args_of(lambda: memtrace.verify("zoo:sakr_cifar10"))[1] == "zoo:sakr_cifar10"


def test_option_values_starting_with_a_dash_stay_values(monkeypatch):
    recording(monkeypatch)
    args = args_of(lambda: memtrace.verify("m.tflite", plan="-p.json", kernels="-k", fits="-1"))
    assert "--plan=./-p.json" in args and "--kernels=-k" in args and "--fits=-1" in args, args
    args = args_of(lambda: memtrace.run("m.tflite", layers=["-a", "conv 1"]))
    assert args[2:] == ["--layer=-a", "--layer=conv 1"], args


def test_a_str_is_one_layer_one_operator_and_one_sweep_cell(monkeypatch):
    recording(monkeypatch)
    args = args_of(lambda: memtrace.run("m.tflite", layers="conv1"))
    assert [a for a in args if a.startswith("--layer")] == ["--layer=conv1"], args
    args = args_of(lambda: memtrace.table("suite.elf", "t.json", ops="conv2d"))
    assert [a for a in args if a.startswith("--op")] == ["--op=conv2d"], args
    grid = cells("zoo:x", "cortex-m4", "tflm", "dmo-heap")
    assert grid == [Cell(0, "zoo:x", "cortex-m4", "tflm", "dmo-heap")]
    assert len(cells(["zoo:x", Path("a.tflite")], ("cortex-m4", "x86-64"), "tflm", None)) == 4
    args = args_of(lambda: verify_cell(Cell(0, "-m.tflite", "cortex-m4", "tflm", "-p")))
    assert args == ["verify", "./-m.tflite", "--target=cortex-m4", "--kernels=tflm", "--planner=-p"]


def test_wrong_types_are_type_errors_before_anything_runs(monkeypatch):
    recording(monkeypatch)
    model = "m.tflite"
    calls = [
        lambda: memtrace.run(12345),
        lambda: memtrace.run(None),
        lambda: memtrace.run(model, layers=[b"conv1"]),
        lambda: memtrace.run(model, layers=b"conv1"),
        lambda: memtrace.run(model, layers=7),
        lambda: memtrace.run(model, seed="1"),
        lambda: memtrace.run(model, seed=True),
        lambda: memtrace.run(model, seed=1.0),
        lambda: memtrace.run(model, kernels=["tflm"]),
        lambda: memtrace.run(model, input=3),
        lambda: memtrace.run(model, plot="yes"),
        lambda: memtrace.plan(model, fits=1.5),
        lambda: memtrace.plan(model, fits=True),
        lambda: memtrace.plan(model, planner=1),
        lambda: memtrace.plan(model, emit_offline=b"out.tflite"),
        lambda: memtrace.verify(model, oracle="no"),
        lambda: memtrace.verify(model, plan=["p.json"]),
        lambda: memtrace.verify(model, target=object()),
        lambda: memtrace.table(1, "t.json"),
        lambda: memtrace.table("suite.elf", None),
        lambda: memtrace.table("suite.elf", "t.json", configs="5"),
        lambda: memtrace.table("suite.elf", "t.json", ops=[1]),
        lambda: memtrace.regress(None, "suite.elf"),
        lambda: memtrace.regress("t.json", 2),
        lambda: memtrace.sweep(3),
        lambda: memtrace.sweep(b"zoo:x"),
        lambda: memtrace.sweep(["zoo:x", 3]),
        lambda: memtrace.sweep("zoo:x", targets=[None]),
        lambda: memtrace.sweep("zoo:x", kernels=1),
        lambda: memtrace.sweep("zoo:x", planners=[1]),
        lambda: memtrace.sweep("zoo:x", retries="3"),
        lambda: memtrace.sweep("zoo:x", on_row="print"),
        lambda: memtrace.sweep("zoo:x", address=1),
        lambda: memtrace.sweep("zoo:x", out=5),
        lambda: verify_cell("zoo:x"),
        lambda: verify_cell(Cell(0, "zoo:x", "cortex-m4", "tflm", None), "bytes"),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(TypeError):
            call()


def test_wrong_values_are_value_errors_before_anything_runs(monkeypatch):
    recording(monkeypatch)
    model = "m.tflite"
    calls = [
        lambda: memtrace.run(""),
        lambda: memtrace.run(b""),
        lambda: memtrace.run("a\0b"),
        lambda: memtrace.run(model, layers=[""]),
        lambda: memtrace.run(model, layers="a\0"),
        lambda: memtrace.run(model, seed=-1),
        lambda: memtrace.run(model, seed=2**64),
        lambda: memtrace.run(model, kernels=""),
        lambda: memtrace.plan(model, fits=0),
        lambda: memtrace.plan(model, fits=-5),
        lambda: memtrace.plan(model, fits=""),
        lambda: memtrace.verify(model, plan=""),
        lambda: memtrace.table("suite.elf", "t.json", configs=0),
        lambda: memtrace.sweep([]),
        lambda: memtrace.sweep("zoo:x", retries=-1),
        lambda: memtrace.sweep("zoo:x", targets=""),
    ]
    for call in calls:
        with pytest.raises(ValueError):
            call()


def test_sweep_checks_out_before_any_cell_runs(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(sweep_module, "verify_cell", lambda *a: ran.append(a))
    folder = tmp_path / "existing"
    folder.mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        memtrace.sweep("zoo:x", out=folder)
    with pytest.raises(ValueError, match="does not exist"):
        memtrace.sweep("zoo:x", out=tmp_path / "missing" / "t.parquet")
    assert ran == [] and sorted(os.listdir(tmp_path)) == ["existing"]
    assert os.listdir(folder) == []


def test_a_table_that_fails_to_write_leaves_nothing(tmp_path, monkeypatch):
    import pyarrow.parquet

    def full_disk(table, where, **kwargs):
        where.write(b"PAR1 half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pyarrow.parquet, "write_table", full_disk)
    out = tmp_path / "t.parquet"
    out.write_bytes(b"the old table")
    with pytest.raises(OSError):
        sweep_module.write_parquet([{"cell": 0}], out)
    assert os.listdir(tmp_path) == ["t.parquet"] and out.read_bytes() == b"the old table"


def test_a_table_is_written_whole_with_a_new_files_mode(tmp_path):
    import pyarrow.parquet

    out = tmp_path / "t.parquet"
    sweep_module.write_parquet([{"cell": 0, "model": "m"}], out)
    assert pyarrow.parquet.read_table(out).to_pylist() == [{"cell": 0, "model": "m"}]
    assert os.listdir(tmp_path) == ["t.parquet"]
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask


def test_hostile_names_reach_memtrace_as_files_and_come_back_as_errors(models, tmp_path, monkeypatch):
    """Through the real binary: an option-like model is a missing file, a
    MemtraceError with memtrace's message, never help text parsed as JSON."""
    monkeypatch.chdir(tmp_path)
    for name in ["-h", "--version", "--help", "-V"]:
        with pytest.raises(memtrace.MemtraceError) as caught:
            memtrace.run(name)
        assert caught.value.status == 1, caught.value
        assert name in str(caught.value), caught.value
    with pytest.raises(memtrace.MemtraceError) as caught:
        memtrace.verify(models / "tflm_hello_world_int8.tflite", plan="-h", oracle=False)
    assert "-h" in str(caught.value) and caught.value.status == 1, caught.value


def test_a_binary_that_prints_no_json_is_a_memtrace_error(tmp_path, monkeypatch):
    fake = tmp_path / "memtrace"
    fake.write_text("#!/bin/sh\necho 'Usage: memtrace'\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MEMTRACE_BINARY", str(fake))
    with pytest.raises(memtrace.MemtraceError, match="no JSON report"):
        memtrace.run("zoo:x")


# A seeded campaign: random arguments of every type, each call either
# refused with TypeError/ValueError or recorded as a command line whose
# every word is what the argument said.
VALUES = [
    None, True, False, 0, -1, 7, 2**64, 1.5, "", "a\0b", b"conv1", bytearray(b"x"), [], ["a", 1],
    ("x", "y"), {"k": 1}, object(), Path("p"), Path("-p"), *HOSTILE, "conv1", "zoo:x",
]
NAMES = [*HOSTILE, "conv1", "zoo:x", "m.tflite", Path("-p"), "a b", "μ"]
PARAMETERS = {
    memtrace.run: ["kernels", "target", "seed", "input", "layers", "plot"],
    memtrace.plan: ["planner", "overlap", "kernels", "target", "fits", "emit_offline"],
    memtrace.verify: ["planner", "overlap", "plan", "kernels", "target", "seed", "input",
                      "oracle", "fits", "emit_offline", "plot"],
}


def test_campaign_of_argument_types(monkeypatch):
    recording(monkeypatch)
    rng = random.Random(0x5EED_A12)
    refused = recorded = 0
    for _ in range(400):
        function = rng.choice(list(PARAMETERS))
        # Mostly well-typed, so that calls are made as well as refused.
        model = rng.choice(VALUES if rng.random() < 0.3 else NAMES)
        chosen = {
            p: rng.choice(VALUES if rng.random() < 0.5 else NAMES)
            for p in rng.sample(PARAMETERS[function], 2)
        }
        try:
            function(model, **chosen)
        except (TypeError, ValueError):
            refused += 1
            continue
        except Recorded as call:
            recorded += 1
            words = call.args_given
            # The model is one word, never an option.
            assert not words[1].startswith("-"), (function, model, chosen, words)
            # Every other word is one `--option` or `--option=value`.
            for word in words[2:]:
                assert word.startswith("--"), (function, model, chosen, words)
            layers = chosen.get("layers")
            if isinstance(layers, str):
                assert sum(w.startswith("--layer=") for w in words) == 1, words
            continue
        pytest.fail(f"{function.__name__}({model!r}, {chosen}) neither ran nor was refused")
    print(f"argument campaign: {refused} refused, {recorded} calls made")
    assert refused > 50 and recorded > 50
