"""The Python API, as a notebook user calls it, against the installed wheel."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import memtrace


def test_the_package_and_its_binary_come_from_the_wheel(prefix):
    package = Path(memtrace.__file__).resolve()
    assert prefix in package.parents, f"memtrace imported from {package}, not the venv"
    assert prefix in memtrace.executable().resolve().parents
    assert memtrace.version().startswith("memtrace ")


def test_no_compiler_is_needed(prefix):
    for compiler in ("cc", "gcc", "arm-none-eabi-gcc", "cargo", "rustc"):
        assert shutil.which(compiler) is None, f"{compiler} is on PATH: the test proves nothing"


def test_run_traces_every_operator_on_the_wheels_own_runner(models, prefix):
    result = memtrace.run(models / "tflm_hello_world_int8.tflite")
    runner = Path(result.raw["elf"]).resolve()
    assert prefix / "share" / "memtrace" / "guests" in runner.parents, runner
    ops = [layer.op for layer in result.layers if layer.op.isupper()]
    assert ops == ["FULLY_CONNECTED"] * 3
    # TFLM's head and tail add up to the arena it reports used.
    assert result.head_bytes + result.tail_bytes == result.arena_used_bytes
    table = result.rows()
    assert len(table) == len(result.layers)


def test_a_model_as_bytes_or_a_converter_gives_the_same_run(models):
    path = models / "tflm_hello_world_int8.tflite"
    by_path = memtrace.run(path)
    by_bytes = memtrace.run(path.read_bytes())

    class Converter:  # what tf.lite.TFLiteConverter offers: convert() -> bytes
        def convert(self):
            return path.read_bytes()

    by_converter = memtrace.run(Converter())
    for other in (by_bytes, by_converter):
        assert [l.exact_os_bytes for l in other.layers] == [l.exact_os_bytes for l in by_path.layers]
        assert other.arena_used_bytes == by_path.arena_used_bytes


def test_tables_for_pandas_and_polars(models):
    result = memtrace.run(models / "tflm_hello_world_int8.tflite")
    pandas_frame = result.to_pandas()
    polars_frame = result.to_polars()
    assert list(pandas_frame["op"]) == list(polars_frame["op"]) == [l.op for l in result.layers]
    assert int(pandas_frame["instructions"].sum()) == sum(l.instructions for l in result.layers)


def test_the_best_plan_skips_a_planner_that_does_not_apply(models):
    # ResNet-8's skip connections leave TinySeg's replacement without a plan.
    plan = memtrace.plan(models / "mlperf_tiny_ic_resnet8_int8.tflite")
    absent = [p for p in plan.plans if p.peak_bytes is None]
    assert absent and all(p.status == "not applicable" for p in absent)
    # The plan the command line measured the arena for is the best one.
    chosen = plan.raw["arena_to_allocate"]
    assert (plan.best.planner, plan.best.overlap) == (chosen["planner"], chosen["overlap"])
    assert plan.best.peak_bytes == chosen["planned_bytes"]


def test_plan_and_verify_agree_with_the_command_line(models, tmp_path):
    model = models / "mlperf_tiny_ad_fc_autoencoder_int8.tflite"
    plan = memtrace.plan(model, kernels="cmsis-nn")
    assert plan.best.peak_bytes >= plan.lower_bound_bytes
    greedy = [p for p in plan.plans if p.planner == "tflm-greedy"][0]
    assert plan.best.peak_bytes <= greedy.peak_bytes
    proof = memtrace.verify(model, kernels="cmsis-nn", planner=plan.best.planner, overlap=plan.best.overlap)
    assert proof.ok and proof.bit_exact and proof.clobbers == 0
    assert proof.planned_bytes == plan.best.peak_bytes
    # The arena to allocate is measured on TFLM, independently by plan and
    # verify, for the same plan.
    assert proof.arena_to_allocate_bytes == plan.arena_to_allocate_bytes
    # The same verify through the command line gives the same report.
    cli = subprocess.run(
        [str(memtrace.executable()), "verify", str(model), "--kernels", "cmsis-nn",
         "--planner", plan.best.planner, "--overlap", plan.best.overlap, "--format", "json"],
        capture_output=True, text=True, check=True,
    )
    assert json.loads(cli.stdout)["output_digest"] == proof.raw["output_digest"]


def test_verify_is_bit_exact_with_pypi_tflite_micro(models):
    proof = memtrace.verify(models / "tflm_person_detect.tflite", planner="dmo-heap")
    if proof.oracle_agrees is None:
        pytest.fail("no host oracle ran: set MEMTRACE_TFLM_PYTHON or install tflite-micro here")
    assert proof.oracle_agrees and proof.ok
    assert proof.raw["oracle"]["mismatched_bytes"] == 0


def test_a_picture_for_the_notebook(models):
    result = memtrace.run(models / "tflm_hello_world_int8.tflite", plot=True)
    png = result.plot()
    data = png if isinstance(png, bytes) else png.data
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


def test_errors_carry_memtraces_message(tmp_path):
    bad = tmp_path / "not-a-model.tflite"
    bad.write_bytes(b"this is no flatbuffer")
    with pytest.raises(memtrace.MemtraceError) as caught:
        memtrace.run(bad)
    assert "not-a-model.tflite" in str(caught.value)
    assert caught.value.status != 0
    with pytest.raises(TypeError):
        memtrace.run(12345)


def test_a_guest_the_wheel_lacks_says_what_to_build_and_install(models, prefix):
    runner = prefix / "share" / "memtrace" / "guests" / "x86_64" / "tflm-runner-cmsis.elf"
    aside = runner.with_suffix(".aside")
    runner.rename(aside)
    try:
        with pytest.raises(memtrace.MemtraceError) as caught:
            memtrace.run(models / "tflm_hello_world_int8.tflite", target="x86-64", kernels="cmsis-nn")
    finally:
        aside.rename(runner)
    message = str(caught.value)
    assert "not among the guests this installation carries" in message
    assert "gcc-arm-none-eabi" in message and "--runner" in message


def test_a_proven_plan_that_misses_its_budget_is_not_ok(models, tmp_path):
    model = models / "tflm_hello_world_int8.tflite"
    emitted = tmp_path / "planned.tflite"
    missed = memtrace.verify(model, oracle=False, fits=100, emit_offline=emitted)
    assert missed.proven and missed.bit_exact and missed.clobbers == 0
    assert missed.ok is False and missed.fits is False and missed.budget_bytes == 100
    assert missed.raw["budget"]["arena_bytes"] == missed.arena_to_allocate_bytes
    assert not emitted.exists(), "a plan that misses its budget was written"
    met = memtrace.verify(model, oracle=False, fits="1M")
    assert met.ok and met.proven and met.fits is True and met.budget_bytes == 1 << 20
    assert memtrace.verify(model, oracle=False).fits is None
